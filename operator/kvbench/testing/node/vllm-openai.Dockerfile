# The test cluster's stand-in for vllm/vllm-openai (kvbench.testing.node.images), the one image
# that is not what it is named: built FROM the project image, its `vllm` runs `kvbench sim` with
# the arguments it was given (`vllm serve MODEL FLAGS` -> `kvbench sim serve MODEL FLAGS`), as
# root with `vllm serve` as entry point, as vLLM's image is (docker/Dockerfile, vllm-openai).
ARG PROJECT_IMAGE
FROM ${PROJECT_IMAGE}
USER 0:0
RUN printf '#!/bin/sh\nexec kvbench sim "$@"\n' >/usr/local/bin/vllm \
    && chmod 755 /usr/local/bin/vllm
WORKDIR /
ENTRYPOINT ["vllm", "serve"]
CMD []
