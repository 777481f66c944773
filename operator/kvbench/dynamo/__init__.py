"""NVIDIA Dynamo (ai-dynamo 1.6.1) run locally: a frontend with a router mode in front of
GPU-less `dynamo.mocker` workers on loopback, with file discovery (no etcd, no NATS).

- `model_dir`: the tokenizer + chat template + Qwen3-shaped config both processes read;
- `capacity`: mocker block counts equal to a vLLM (or `kvbench sim`) KV cache size;
- `environment`: the processes' environment and the file discovery store;
- `processes`: start/stop a deployment, with per-worker metrics URLs;
- `metrics`: per-worker counters from a worker's `/metrics`;
- `nvext`, `client`: per-request worker id, timing and cached tokens.

Install Dynamo with `scripts/install-dynamo.sh` (see docs/dynamo.md).
"""

from kvbench.dynamo.capacity import QWEN3_0_6B, KVGeometry, mocker_blocks_for_bytes
from kvbench.dynamo.client import complete
from kvbench.dynamo.metrics import WorkerCounters, parse_worker_metrics, scrape_worker
from kvbench.dynamo.model_dir import ModelDir, ModelDirSpec, ensure_model_dir
from kvbench.dynamo.nvext import NVEXT_REQUEST, NvextTiming, NvextWorker, RequestOutcome
from kvbench.dynamo.processes import (
    DeploymentSpec,
    DynamoDeployment,
    MockerOptions,
    RouterMode,
    RouterOptions,
    WorkerEndpoint,
)

__all__ = [
    "NVEXT_REQUEST",
    "QWEN3_0_6B",
    "DeploymentSpec",
    "DynamoDeployment",
    "KVGeometry",
    "MockerOptions",
    "ModelDir",
    "ModelDirSpec",
    "NvextTiming",
    "NvextWorker",
    "RequestOutcome",
    "RouterMode",
    "RouterOptions",
    "WorkerCounters",
    "WorkerEndpoint",
    "complete",
    "ensure_model_dir",
    "mocker_blocks_for_bytes",
    "parse_worker_metrics",
    "scrape_worker",
]
