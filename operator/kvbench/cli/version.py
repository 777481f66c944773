"""`kvbench --version`: the project's version, and its commit when run from a git checkout.

A source tree that was never installed has no package metadata (`kvbench.__version__` is then
`0.0.0+unknown`), and an editable install's metadata keeps the version it was installed at;
pyproject.toml next to the package is what the tree is, and `git describe` says which commit.
"""

import subprocess
import tomllib
from pathlib import Path

import click

import kvbench

__all__ = ["project_version", "version_option"]


def _source_tree() -> tuple[Path, str] | None:
    """The source tree this kvbench is imported from, and pyproject's version there (None:
    an installed package, whose tree has no kvbench pyproject.toml)."""
    root = Path(kvbench.__file__).resolve().parents[2]
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        return None
    if project.get("name") != "kvbench" or "version" not in project:
        return None
    return root, str(project["version"])


def _git_describe(root: Path) -> str | None:
    """The commit of a checkout at `root` (a tag when one is near, `-dirty` when edited)."""
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--tags", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def project_version() -> str:
    """pyproject's version (with `git describe` in a checkout) from a source tree, else the
    installed package's."""
    tree = _source_tree()
    if tree is None:
        return kvbench.__version__
    root, version = tree
    described = _git_describe(root)
    return f"{version} (git {described})" if described else version


def _show(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"kvbench, version {project_version()}")
        ctx.exit()


version_option = click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show,
    help="Show the version and exit.",
)
"""Looked up only when asked for: git runs for `--version`, not for every command."""
