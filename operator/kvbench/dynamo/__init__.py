"""NVIDIA Dynamo (ai-dynamo 1.6.1) run locally: a frontend with a router mode in front of
GPU-less `dynamo.mocker` workers on loopback, with file discovery (no etcd, no NATS).

- `model_dir`: the tokenizer + chat template + config.json (the served model's geometry)
  both processes read;
- `capacity`: mocker block counts equal to a `kvbench sim` (or vLLM) KV cache size;
- `environment`: the processes' environment and the file discovery store;
- `processes`: start/stop a deployment, with per-worker metrics URLs and start-up times;
- `metrics`: per-worker counters from a worker's `/metrics`;
- `routing_check`: one seeded shared-prefix sequence through a deployment, per worker.

Requests go through the load generator's client (`kvbench.loadgen.client`), which asks the
frontend for `nvext.worker_id`. Install Dynamo with `scripts/install-dynamo.sh` (see
docs/dynamo.md).
"""

from kvbench.dynamo.capacity import mocker_kv_blocks
from kvbench.dynamo.metrics import WorkerCounters, parse_worker_metrics, scrape_worker
from kvbench.dynamo.model_dir import ModelDir, ModelDirSpec, ensure_model_dir
from kvbench.dynamo.processes import (
    DeploymentSpec,
    DynamoDeployment,
    MockerOptions,
    RouterMode,
    RouterOptions,
    WorkerEndpoint,
)

__all__ = [
    "DeploymentSpec",
    "DynamoDeployment",
    "MockerOptions",
    "ModelDir",
    "ModelDirSpec",
    "RouterMode",
    "RouterOptions",
    "WorkerCounters",
    "WorkerEndpoint",
    "ensure_model_dir",
    "mocker_kv_blocks",
    "parse_worker_metrics",
    "scrape_worker",
]
