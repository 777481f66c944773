"""Mount targets on the host are shared by every node agent of the machine: one removes what
it created only when no agent's pod uses it any more (`MountPoints`), also after an agent
died holding it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kvbench.testing.volumes import Mount, MountPoints


def _mount(tmp_path: Path) -> Mount:
    source = tmp_path / "source"
    source.mkdir(exist_ok=True)
    return Mount(source=source, target=tmp_path / "host" / "var" / "secrets" / "token")


def test_a_target_stays_while_another_agent_uses_it_and_goes_with_the_last(
    tmp_path: Path,
) -> None:
    registry, mount = tmp_path / "registry", _mount(tmp_path)
    first, second = MountPoints(registry), MountPoints(registry)
    first.acquire(mount)  # creates host/var/secrets/token
    second.acquire(mount)
    first.release(mount)
    kept = mount.target.is_dir()
    second.release(mount)
    assert (kept, (tmp_path / "host").exists()) == (True, False)


def test_a_target_that_was_there_before_is_never_removed(tmp_path: Path) -> None:
    registry, mount = tmp_path / "registry", _mount(tmp_path)
    mount.target.mkdir(parents=True)
    first, second = MountPoints(registry), MountPoints(registry)
    first.acquire(mount)
    second.acquire(mount)
    second.release(mount)
    first.release(mount)
    assert mount.target.is_dir()


def test_what_a_dead_agent_created_goes_with_the_next_last_user(tmp_path: Path) -> None:
    registry, mount = tmp_path / "registry", _mount(tmp_path)
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from kvbench.testing.volumes import Mount, MountPoints\n"
        "mount = Mount.model_validate_json(sys.argv[2])\n"
        "MountPoints(Path(sys.argv[1])).acquire(mount)\n"
        "os._exit(0)  # dies holding it: no release\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(registry), mount.model_dump_json()], check=True
    )
    created = mount.target.is_dir()
    survivor = MountPoints(registry)
    survivor.acquire(mount)
    survivor.release(mount)
    assert (created, (tmp_path / "host").exists()) == (True, False)
