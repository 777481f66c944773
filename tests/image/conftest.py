"""The project's image and its router image, built by Docker once per session (and reused
across sessions while nothing they are built from changed), and the project image's simulator
running in a container."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from image_helpers import ImageRunner, ImageServer

from kvbench.testing.image import BuiltImage, ensure_image

_TOOLS = ("debootstrap", "tar")
_BUILT = pytest.StashKey[BuiltImage]()

SIM_ARGS = (
    "--model", "Qwen/Qwen3-0.6B", "--max-model-len", "4096",
    "--kv-cache-memory-bytes", "1073741824", "--gpu-memory-utilization", "0.01",
    "--enable-prompt-tokens-details", "--time-scale", "0", "--worker-id", "image-sim",
)  # fmt: skip


@pytest.fixture(scope="session")
def image(request: pytest.FixtureRequest) -> BuiltImage:
    if os.geteuid() != 0:
        pytest.skip("the image tests need root: Docker, debootstrap")
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing or subprocess.run(["/usr/bin/docker", "info"], capture_output=True).returncode:
        pytest.fail(
            f"the image tests need a running Docker and {', '.join(_TOOLS)}: "
            "apt-get install docker.io debootstrap, and start dockerd"
        )
    built = ensure_image()
    request.config.stash[_BUILT] = built
    return built


@pytest.fixture(scope="session")
def runner(image: BuiltImage) -> ImageRunner:
    return ImageRunner(image)


@pytest.fixture(scope="session")
def router_image(image: BuiltImage) -> BuiltImage:
    """The Dockerfile's `router` target, built after the project image (whose layers it
    shares)."""
    return ensure_image("router")


@pytest.fixture(scope="session")
def router_runner(router_image: BuiltImage) -> ImageRunner:
    return ImageRunner(router_image)


@pytest.fixture(scope="module")
def sim(runner: ImageRunner, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImageServer]:
    server = ImageServer(runner, SIM_ARGS, tmp_path_factory.mktemp("sim") / "sim.log")
    yield server
    server.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config):
    built = config.stash.get(_BUILT, None)
    if built is None:
        return
    when = "in this session" if built.built_now else "by an earlier session"
    terminalreporter.write_line(
        f"kvbench image {built.tag}: {built.size:,} bytes ({built.size / 1e6:.0f} MB), "
        f"built {when} in {built.build_seconds:.0f} s"
    )
