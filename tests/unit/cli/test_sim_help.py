"""`kvbench sim --help` explains every flag and lists every timing profile --profile takes."""

import argparse
import re
import subprocess
import sys

from kvbench.sim.args import build_parser
from kvbench.sim.timing import GPUS, PROFILES, resolve_profile


def _help() -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "kvbench", "sim", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_every_flag_has_a_help_text_in_sim_help() -> None:
    text = _help()
    options = [a for a in build_parser()._actions if not isinstance(a, argparse._HelpAction)]
    unexplained = [a.option_strings[0] for a in options if not (a.help or "").strip()]
    assert unexplained == []
    missing = [a.option_strings[0] for a in options if a.option_strings[0] not in text]
    assert missing == []


def test_sim_help_lists_every_profile_and_each_resolves() -> None:
    listed = _help().split("timing profiles (--profile):", 1)[1]
    names = set(re.findall(r"\b(roofline:[\w-]+|[a-z0-9.]+-[\w.-]+)(?=[:,])", listed))
    expected = set(PROFILES) | {f"roofline:{gpu}" for gpu in GPUS}
    assert names == expected
    assert all(resolve_profile(name).name == name for name in names)
