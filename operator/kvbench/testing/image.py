"""The project's container images (the repository's Dockerfile: the project image, its default
target, and the router image, its `router` target), built by Docker's BuildKit as a user's
`docker build` builds them, and run by Docker as Kubernetes runs them.

The Dockerfile's base, an exact Docker Hub tag that cannot be pulled offline, is made locally
under that very name from `debootstrap --variant=minbase`, slimmed the way Docker's slim images
are. An image is tagged by the hash of everything it is built from, so a session builds only
when one of those changed; the base's root file system and the build records are cached
outside the repo. `run_argv` runs an image as the chart's securityContext does: its user, a
read-only root file system, its declared volumes writable. Run `python -m kvbench.testing.image`
to build ahead of the tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from kvbench.testing.longwaits import exclusive

__all__ = [
    "DOCKERFILE",
    "IMAGE_REPOSITORIES",
    "LOCK",
    "REPO",
    "BuiltImage",
    "ImageTarget",
    "base_image_name",
    "docker",
    "ensure_image",
    "run_argv",
    "source_hash",
]

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"
ImageTarget = Literal["kvbench", "router"]
"""The Dockerfile's targets the tests build: its last stage (the project image) and `router`."""
IMAGE_REPOSITORIES: dict[ImageTarget, str] = {
    "kvbench": "localhost/kvbench",
    "router": "localhost/kvbench-router",
}
_TAG_PREFIX = "src-"
_KEEP_IMAGES = 3
_SUITE, _MIRROR = "bookworm", "http://deb.debian.org/debian"
_BASE_REVISION = "2"
"""Of the local base (`_slim` and the configuration below): a change makes a new one."""
_SOURCES = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
_SLIM_PATHS = ("doc", "groff", "info", "linda", "lintian", "locale", "man")
"""/usr/share's documentation, which Docker's slim images leave out (dpkg path-exclude)."""
_SLIM_KEEP = re.compile(r"doc/[^/]+/copyright|locale/locale\.alias")
_DPKG_SLIM = (
    "".join(f"path-exclude /usr/share/{name}/*\n" for name in _SLIM_PATHS)
    + "path-include /usr/share/doc/*/copyright\npath-include /usr/share/locale/locale.alias\n"
)
_APT_CLEAN = """\
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::GzipIndexes "true";
Acquire::Languages "none";
"""
_BASE_CONFIG = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "CMD bash",
    f"LABEL io.kvbench.base-revision={_BASE_REVISION}",
)
_DOCKER = "/usr/bin/docker"
"""Debian's docker client (a newer one on PATH may want a buildx this engine lacks)."""


class BuiltImage(BaseModel):
    """A built image's name and the parts of its configuration a runtime obeys."""

    tag: str
    size: int
    """Bytes, as `docker image inspect` counts them (all layers, uncompressed)."""
    user: str
    env: list[str]
    workdir: str
    entrypoint: list[str]
    cmd: list[str]
    volumes: list[str]
    build_seconds: float
    """How long the build that made the image took (recorded, so a cached image has it too)."""
    built_now: bool


def _cache_root() -> Path:
    return Path(os.environ.get("KVBENCH_IMAGE_CACHE", "/var/cache/kvbench/image"))


def _log(message: str) -> None:
    print(f"kvbench image: {message}", file=sys.stderr, flush=True)


def _run(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed with exit code {result.returncode}")
    return result


def docker(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Debian's docker client; a failure raises with its error."""
    if not Path(_DOCKER).exists():
        raise RuntimeError("Docker is not installed (Debian: apt-get install docker.io)")
    done = subprocess.run([_DOCKER, *args], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()[-2000:]}")
    return done


def _docker(*args: str) -> str:
    return docker(*args).stdout.strip()


def _exists(tag: str) -> bool:
    try:
        _docker("image", "inspect", "--format", "{{.Id}}", tag)
    except RuntimeError:
        return False
    return True


def base_image_name() -> str:
    """The default of the Dockerfile's `ARG BASE_IMAGE`, which its stages are built FROM."""
    match = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{DOCKERFILE} has no `ARG BASE_IMAGE=...` line")
    return match.group(1)


def _context_files() -> list[Path]:
    """What the build reads: the Dockerfile and what .dockerignore lets into the context."""
    package = [
        path
        for path in sorted((REPO / "operator").rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and not any(part.endswith(".egg-info") for part in path.parts)
    ]
    fixed = ["Dockerfile", ".dockerignore", "requirements.lock", "pyproject.toml", "README.md"]
    return [*(REPO / name for name in fixed), *package]


def source_hash() -> str:
    """A hash of every file the image is built from, names included, and of the local base's
    revision: its tag."""
    digest = hashlib.sha256(f"base {_BASE_REVISION}\0".encode())
    for path in _context_files():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _slim(rootfs: Path) -> None:
    """What Docker's slim Debian images do to debootstrap's minbase: no documentation, no
    package lists or caches, and dpkg and apt told to keep it that way."""
    share = rootfs / "usr" / "share"
    for name in _SLIM_PATHS:
        for path in sorted((share / name).rglob("*"), reverse=True):  # children first
            if path.is_symlink() or not path.is_dir():
                if not _SLIM_KEEP.fullmatch(str(path.relative_to(share))):
                    path.unlink()
            elif not any(path.iterdir()):
                path.rmdir()
    for pattern in (
        "var/lib/apt/lists/*",
        "var/cache/apt/*.bin",
        "var/cache/apt/archives/*.deb",
        "var/log/*.log",
    ):
        for path in rootfs.glob(pattern):
            if path.is_file():
                path.unlink()
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker").write_text(_DPKG_SLIM)
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(_APT_CLEAN)
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(_SOURCES)


def _base_tarball() -> Path:
    """Debian's minbase root file system as a tarball, made once per machine."""
    tarball = _cache_root() / f"debian-{_SUITE}-minbase-slim-{_BASE_REVISION}.tar"
    if tarball.exists():
        return tarball
    rootfs = _cache_root() / "rootfs.partial"
    shutil.rmtree(rootfs, ignore_errors=True)
    _log(f"debootstrap --variant=minbase {_SUITE} (about half a minute)")
    _run("debootstrap", "--variant=minbase", _SUITE, str(rootfs), _MIRROR, stdout=sys.stderr)
    _slim(rootfs)
    partial = tarball.with_suffix(".partial")
    _run("tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), ".")
    partial.rename(tarball)
    shutil.rmtree(rootfs)
    return tarball


def _ensure_base(name: str) -> None:
    """The Dockerfile's base under its own name: pulled by nobody, imported from debootstrap."""
    if _exists(name):
        labels = _docker("image", "inspect", "--format", "{{json .Config.Labels}}", name)
        if (json.loads(labels) or {}).get("io.kvbench.base-revision") == _BASE_REVISION:
            return
    tarball = _base_tarball()
    _log(f"docker import {tarball.name} as {name}")
    changes = [arg for change in _BASE_CONFIG for arg in ("--change", change)]
    _docker("import", *changes, str(tarball), name)


_SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
"""Debian's bundle, which pip is pointed at in /etc/pip.conf where no variable says so."""


def _pip_ca() -> Path | None:
    """The CA bundle this machine's pip trusts (a TLS-intercepting proxy's), if it has one:
    the environment's, else the system's (a CI shell may set no variable)."""
    for variable in ("PIP_CERT", "SSL_CERT_FILE"):
        value = os.environ.get(variable)
        if value and Path(value).is_file():
            return Path(value)
    return _SYSTEM_CA if _SYSTEM_CA.is_file() else None


def _build(tag: str, digest: str, target: ImageTarget) -> float:
    secret = [] if (ca := _pip_ca()) is None else ["--secret", f"id=pip-ca,src={ca}"]
    stage = [] if target == "kvbench" else ["--target", target]
    argv = [
        _DOCKER, "build", "--network", "host", *secret, *stage,
        "--label", f"io.kvbench.source-hash={digest}", "--tag", tag,
        "--file", str(DOCKERFILE), str(REPO),
    ]  # fmt: skip
    _log(f"{shlex.join(argv)} (a few minutes when nothing is cached)")
    start = time.monotonic()
    _run(*argv, stdout=sys.stderr, stdin=subprocess.DEVNULL,
         env={**os.environ, "DOCKER_BUILDKIT": "1"})  # fmt: skip
    return time.monotonic() - start


def _prune(repository: str, built: str) -> None:
    """Our older source-hash images, the one just `built` and the newest others kept; one a
    container uses refuses and stays. `built` is named, not found by age: a build whose
    every step was cached gets its image's old creation time, and sorts among the oldest."""
    listed = _docker(
        "images", "--filter", f"reference={repository}:{_TAG_PREFIX}*",
        "--format", "{{.Repository}}:{{.Tag}}",
    )  # fmt: skip
    others = [tag for tag in listed.split() if tag != built]  # newest first
    for tag in others[_KEEP_IMAGES - 1 :]:
        subprocess.run([_DOCKER, "rmi", tag], capture_output=True)


def _inspect(tag: str, build_seconds: float, built_now: bool) -> BuiltImage:
    (data,) = json.loads(_docker("image", "inspect", tag))
    config = data.get("Config") or {}
    return BuiltImage(
        tag=tag,
        size=int(data["Size"]),
        user=config.get("User", ""),
        env=config.get("Env") or [],
        workdir=config.get("WorkingDir") or "/",
        entrypoint=config.get("Entrypoint") or [],
        cmd=config.get("Cmd") or [],
        volumes=sorted(config.get("Volumes") or {}),
        build_seconds=build_seconds,
        built_now=built_now,
    )


def ensure_image(target: ImageTarget = "kvbench") -> BuiltImage:
    """The image of `target` of the repository as it is now, built (under a lock, with its
    base) only if no image has its source hash yet."""
    digest = source_hash()
    repository = IMAGE_REPOSITORIES[target]
    tag = f"{repository}:{_TAG_PREFIX}{digest}"
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    record = root / f"build-{target}-{digest}.json"
    with exclusive(root / ".build.lock", "image build"):  # a concurrent build finishes first
        if _exists(tag) and record.exists():
            return _inspect(tag, json.loads(record.read_text())["seconds"], built_now=False)
        _ensure_base(base_image_name())
        seconds = _build(tag, digest, target)
        record.write_text(json.dumps({"tag": tag, "seconds": round(seconds, 1)}))
        _prune(repository, tag)
    return _inspect(tag, seconds, built_now=True)


def _numeric_user(user: str) -> str:
    if not re.fullmatch(r"[1-9]\d*:[1-9]\d*", user):
        raise ValueError(f"image user {user!r} is not a numeric non-root UID:GID")
    return user


def run_argv(
    image: BuiltImage,
    args: Sequence[str] | None = None,
    volumes: Mapping[str, Path] | None = None,
    entrypoint: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    name: str | None = None,
) -> list[str]:
    """`docker run` of `image` as the chart runs it: its numeric non-root user, a read-only
    root file system, each declared volume a fresh one (Docker seeds it from the image's
    directory) unless `volumes` maps it to a host directory, which then gets that directory's
    owner and mode; `entrypoint` (default the image's) with `args` (default its CMD), `env`
    over the image's environment (as a pod's `env` is). On the host's network, as the tests'
    servers on loopback need."""
    host_dirs = dict(volumes or {})
    undeclared = set(host_dirs) - set(image.volumes)
    if undeclared:
        raise ValueError(f"not volumes of {image.tag}: {sorted(undeclared)}")
    argv = [_DOCKER, "run", "--rm", "--read-only", "--network", "host"]
    argv += ["--user", _numeric_user(image.user)]
    if name is not None:
        argv += ["--name", name]
    for volume, directory in host_dirs.items():
        uid, gid = (int(part) for part in image.user.split(":"))
        os.chown(directory, uid, gid)
        argv += ["--volume", f"{directory}:{volume}"]
    for key, value in (env or {}).items():
        argv += ["--env", f"{key}={value}"]
    program = [*(image.entrypoint if entrypoint is None else entrypoint)]
    if program:
        argv += ["--entrypoint", program[0]]
    argv.append(image.tag)
    return [*argv, *program[1:], *(image.cmd if args is None else args)]


if __name__ == "__main__":
    for name in IMAGE_REPOSITORIES:
        built = ensure_image(name)
        print(f"{built.tag} {built.size} bytes, built in {built.build_seconds:.0f} s")
