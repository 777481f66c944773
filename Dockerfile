# kvbench: the operator, the load generator and the simulator in one image (`kvbench operator`,
# `kvbench loadgen`, `kvbench sim`), the default target. docs/image.md says how to build and run
# it. `--target router` builds the router arms' image instead: vllm-router's Python launcher
# from the pinned wheel (docs/operator.md, "Router image", says why not upstream's image).
#
# The base is pinned by its exact dated tag, which Docker Hub serves to a `docker build`. The
# tests, offline, build a local stand-in under the same name (debootstrap minbase, see
# kvbench.testing.image) and build with `--pull=never`.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-20261005-slim

# The locked dependencies in a venv, the layer that changes only with requirements.lock.
FROM ${BASE_IMAGE} AS deps
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv binutils \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/kvbench
COPY requirements.lock /src/
# Behind a TLS-intercepting proxy, pass its CA as the optional build secret `pip-ca`
# (`--secret id=pip-ca,src=CA.pem`): pip trusts it in this step only, and no layer keeps it.
# Extension modules lose their debug sections (about 40 MB); bundled libraries stay as shipped.
RUN --mount=type=secret,id=pip-ca,required=false \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && /opt/kvbench/bin/pip install --require-hashes --no-deps --only-binary=:all: \
        -r /src/requirements.lock \
    && /opt/kvbench/bin/pip check \
    && find /opt/kvbench -name '*.so' -not -path '*.libs/*' -exec strip --strip-debug {} +

# What the runtime copies: the venv without the build tools (setuptools, wheel, pip).
FROM deps AS venv
RUN /opt/kvbench/bin/pip uninstall --yes setuptools wheel pip

# kvbench itself, built with the locked setuptools and staged under /stage for its own layer.
FROM deps AS app
COPY pyproject.toml README.md /src/
COPY operator /src/operator
RUN /opt/kvbench/bin/pip install --no-deps --no-build-isolation --no-index --no-compile \
        --no-warn-script-location --root /stage /src \
    && PYTHONPATH=/stage/opt/kvbench/lib/python3.11/site-packages /opt/kvbench/bin/pip check \
    && /opt/kvbench/bin/python -m compileall -q -s /stage -p / /stage/opt/kvbench

# What both images run on: Debian's python3, the user 10001 and the locked venv (one layer
# that the two images share).
FROM ${BASE_IMAGE} AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/apt \
        /var/log/dpkg.log \
    && groupadd --gid 10001 kvbench \
    && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin kvbench
COPY --from=venv /opt/kvbench /opt/kvbench
# Read-only root: bytecode is compiled at build time and never written at run time; HOME and
# every cache are in the /tmp volume.
ENV PATH=/opt/kvbench/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp

# The router image: the pinned vllm-router wheel's launcher (`vllm_router.launch_router`, which
# has the kv_aware policy and `--kv-event-source`), as user 10001 on a read-only root.
FROM runtime AS router
VOLUME ["/tmp"]
WORKDIR /tmp
USER 10001:10001
ENTRYPOINT ["vllm-router"]
CMD ["--help"]

# The project image (the default target: the last stage).
FROM runtime
RUN install -d -o 10001 -g 10001 /data
COPY --from=app /stage/opt/kvbench /opt/kvbench
# kvbench writes to the volumes only, /tmp (scratch, caches) and /data (results).
ENV XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/matplotlib
VOLUME ["/tmp", "/data"]
WORKDIR /data
USER 10001:10001
ENTRYPOINT ["kvbench"]
CMD ["--help"]
