"""The end-to-end table of hostile specs (tests/e2e/hostile_specs.py), for the unit tests that
check it offline: tests/e2e is on the import path only when pytest collects it."""

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "e2e" / "hostile_specs.py"


def _load():
    if "hostile_specs" in sys.modules:
        return sys.modules["hostile_specs"]
    spec = importlib.util.spec_from_file_location("hostile_specs", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hostile_specs"] = module
    spec.loader.exec_module(module)
    return module


hostile = _load()
