"""requirements.lock, which the image installs with --require-hashes, agrees with pyproject.toml:
each of kvbench's pins at the same version, the build requirements satisfied, nothing of the
test extra, and every entry pinned with its hashes. (Its completeness is checked
where it counts: the image build runs `pip check`.) scripts/lock.sh regenerates it."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kvbench.testing.image import LOCK, REPO

_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s*\\\n\s+--hash=\S+)*)", re.M)


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _locked() -> dict[str, tuple[str, list[str]]]:
    """Name -> (version, hashes) of every entry."""
    text = LOCK.read_text()
    return {
        canonicalize_name(name): (version, re.findall(r"--hash=(\S+)", hashes))
        for name, version, hashes in _ENTRY.findall(text)
    }


def test_every_entry_is_pinned_with_hashes() -> None:
    text = LOCK.read_text()
    requirement_lines = [
        line for line in text.splitlines() if line and not line.startswith((" ", "#"))
    ]
    locked = _locked()
    assert len(locked) == len(requirement_lines), "an entry is not of the form name==version"
    for name, (_, hashes) in locked.items():
        assert hashes, f"{name} has no hash"
        assert all(h.startswith("sha256:") for h in hashes), name


def test_kvbench_pins_are_locked_at_their_versions() -> None:
    locked = _locked()
    for line in _pyproject()["project"]["dependencies"]:
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"pyproject.toml pins exactly: {line}"
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{line} is missing from {LOCK.name}: run scripts/lock.sh"
        assert locked[name][0] == specifier.version, (
            f"pyproject.toml has {line}, {LOCK.name} {locked[name][0]}: run scripts/lock.sh"
        )


def test_build_requirements_are_locked() -> None:
    locked = _locked()
    for line in _pyproject()["build-system"]["requires"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"build requirement {line} is missing from {LOCK.name}"
        assert requirement.specifier.contains(locked[name][0]), line


def test_the_test_extra_stays_out_of_the_image() -> None:
    """(The dynamo extra cannot be told apart so: some of its pins are kvbench's transitive
    dependencies too.)"""
    project = _pyproject()["project"]
    tools = {
        canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["test"]
    }
    assert not tools & set(_locked())
