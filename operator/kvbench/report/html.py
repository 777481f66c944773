"""The report as one self-contained HTML file: the console's tables and every plot embedded
(base64 PNG), no link to anything outside it, so that it reads offline and can be mailed."""

import base64
import html
from pathlib import Path

from rich.console import Console

__all__ = ["write_html"]

_CODE = (
    "<pre style=\"font-family: Menlo, Consolas, 'DejaVu Sans Mono', monospace; "
    "font-size: 13px; line-height: 1.3; color: {foreground}; background: {background}; "
    'padding: 1em; overflow-x: auto">{code}</pre>'
)
_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 110em; }}
figure {{ margin: 2em 0; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
</style>
</head>
<body>
<h1>{title}</h1>
{tables}
{figures}
</body>
</html>
"""


def _figure(plot: Path) -> str:
    data = base64.b64encode(plot.read_bytes()).decode("ascii")
    name = html.escape(plot.name)
    return (
        f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
        f"<figcaption>{name}</figcaption></figure>"
    )


def write_html(console: Console, title: str, plots: list[Path], path: Path) -> Path:
    """Write what `console` recorded (without clearing it) and `plots` into `path`."""
    tables = console.export_html(clear=False, inline_styles=True, code_format=_CODE)
    figures = "\n".join(_figure(p) for p in plots)
    path.write_text(
        _PAGE.format(title=html.escape(title), tables=tables, figures=figures), encoding="utf-8"
    )
    return path
