# syntax=docker/dockerfile:1
# kvbench: the operator, the load generator and the simulator in one image (`kvbench operator`,
# `kvbench loadgen`, `kvbench sim`). docs/image.md says how to build and run it.
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

FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/apt \
        /var/log/dpkg.log \
    && groupadd --gid 10001 kvbench \
    && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin kvbench \
    && install -d -o 10001 -g 10001 /data
COPY --from=venv /opt/kvbench /opt/kvbench
COPY --from=app /stage/opt/kvbench /opt/kvbench
# Read-only root: kvbench writes to the volumes only, /tmp (scratch, caches) and /data (results);
# bytecode is compiled at build time and never written at run time.
ENV PATH=/opt/kvbench/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/matplotlib
VOLUME ["/tmp", "/data"]
WORKDIR /data
USER 10001:10001
ENTRYPOINT ["kvbench"]
CMD ["--help"]
