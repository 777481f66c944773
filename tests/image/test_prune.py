"""Pruning old source-hash images never removes the image just built: a build whose every
step was cached (the router image, when only the project's Python changed) gets the creation
time of the image it matches, so by age it sorts among the oldest (a CI run's failure:
"No such image" right after "naming to ... done")."""

from __future__ import annotations

import subprocess

import pytest

from kvbench.testing import image


def test_the_image_just_built_is_kept_whatever_its_age(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = "localhost/kvbench-router"
    newest_first = [f"{repo}:src-new1", f"{repo}:src-new2", f"{repo}:src-old", f"{repo}:src-built"]
    monkeypatch.setattr(image, "_docker", lambda *args: "\n".join(newest_first))
    removed: list[str] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        assert argv[1] == "rmi"
        removed.append(argv[2])
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(image.subprocess, "run", run)
    image._prune(repo, f"{repo}:src-built")
    assert f"{repo}:src-built" not in removed
    # the built one and the newest others, _KEEP_IMAGES in all
    kept = [t for t in newest_first if t not in removed]
    assert len(kept) == image._KEEP_IMAGES and kept[0] == f"{repo}:src-new1"
