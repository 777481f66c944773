"""The images the test cluster's nodes hold, built here with Docker (nothing can be pulled)
and loaded into every node's containerd under the names pods ask for.

- the project image (the repository's Dockerfile, default target) as `ghcr.io/kvbench/kvbench`
  at the chart's appVersion and the manifests' default;
- the router image (its `router` target) as the operator's default router image;
- a stand-in for `vllm/vllm-openai` at the engine's default tag: the only stand-in left, built
  FROM the project image, its `vllm` command running `kvbench sim serve` with the arguments
  `vllm serve` was given (`vllm-openai.Dockerfile` beside this module), so the pod spec the
  operator writes (command, args, env, probes, volumes, securityContext) runs unchanged;
- the pod sandbox's pause image, `FROM scratch` around the `pause` built from the Kubernetes
  source (build/pause's Dockerfile).

The archive `docker save` makes of them is cached by the images' IDs, so a node whose
containerd already holds them loads nothing.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from kvbench.api.engine import EngineSpec
from kvbench.kube.manifests.router import ROUTER_IMAGE
from kvbench.testing.image import REPO, docker, ensure_image

__all__ = ["PAUSE_IMAGE", "NodeImages", "node_images", "normalized"]

PAUSE_IMAGE = "k8s.gcr.io/pause:3.4"
"""The tag build/pause/Makefile gives the pause of Kubernetes 1.20's source."""
_VLLM_DOCKERFILE = Path(__file__).with_name("vllm-openai.Dockerfile")


class NodeImages(BaseModel):
    """The archive to load (named by its images' IDs: a rebuilt image makes a new one) and
    the names a runtime that loaded it holds, as containerd normalizes them."""

    archive: Path
    references: list[str]
    build_seconds: float


def normalized(name: str) -> str:
    """A reference as containerd stores it: Docker Hub's registry and `library/` spelled out."""
    first, _, rest = name.partition("/")
    if not rest:
        return f"docker.io/library/{name}"
    if "." in first or ":" in first or first == "localhost":
        return name
    return f"docker.io/{name}"


def _chart_app_version() -> str:
    for line in (REPO / "charts" / "kvbench-operator" / "Chart.yaml").read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise RuntimeError("the chart has no appVersion")


def _image_id(tag: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()


def _pause(binary: Path) -> str:
    with tempfile.TemporaryDirectory() as context:
        shutil.copy2(binary, Path(context) / "pause")
        (Path(context) / "Dockerfile").write_text(
            'FROM scratch\nADD pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
        )
        docker("build", "--tag", PAUSE_IMAGE, context)
    return PAUSE_IMAGE


def _vllm_stand_in(project: str) -> str:
    tag = EngineSpec.model_fields["image"].default
    docker(
        "build", "--build-arg", f"PROJECT_IMAGE={project}", "--tag", tag,
        "--file", str(_VLLM_DOCKERFILE), str(_VLLM_DOCKERFILE.parent),
    )  # fmt: skip
    return tag


def node_images(pause_binary: Path, cache: Path) -> NodeImages:
    """Build (or find) every image, tag it as pods name it, and save them in one archive."""
    began = time.monotonic()
    project = ensure_image("kvbench").tag
    router = ensure_image("router").tag
    names = [_pause(pause_binary)]
    for tag in {f"ghcr.io/kvbench/kvbench:{_chart_app_version()}", "ghcr.io/kvbench/kvbench:0.1.0"}:
        docker("tag", project, tag)
        names.append(tag)
    docker("tag", router, ROUTER_IMAGE)
    names += [ROUTER_IMAGE, _vllm_stand_in(project)]
    digest = hashlib.sha256(
        "".join(f"{n}={_image_id(n)}\n" for n in sorted(names)).encode()
    ).hexdigest()[:16]
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"node-images-{digest}.tar"
    if not archive.exists():
        partial = archive.with_suffix(".partial")
        docker("save", "--output", str(partial), *names)
        partial.rename(archive)
        for old in cache.glob("node-images-*.tar"):
            if old != archive:
                old.unlink()
    references = {normalized(n) for n in names}
    return NodeImages(
        archive=archive, references=sorted(references), build_seconds=time.monotonic() - began
    )


if __name__ == "__main__":
    from kvbench.testing.build import ensure_binaries

    built = node_images(ensure_binaries().pause, Path("/var/cache/kvbench/node-images"))
    print(built.model_dump_json(indent=1))
