"""Dynamo arms on the local back end: Dynamo's frontend in front of `dynamo.mocker` workers.

The mockers get the engine's KV cache as a block count (the same tokens a `kvbench sim` or
vLLM worker holds) and run at the experiment's time scale (`--speedup-ratio` is its
inverse), so a Dynamo arm meets the same traffic under the same capacity as the other arms.
"""

import asyncio
import os
from pathlib import Path

from kvbench.api import EngineSpec, ExperimentSpec
from kvbench.api.routing import DynamoArm
from kvbench.dynamo import (
    DeploymentSpec,
    DynamoDeployment,
    MockerOptions,
    ModelDirSpec,
    RouterOptions,
    ensure_model_dir,
    mocker_kv_blocks,
)
from kvbench.runner.cluster.base import WorkerInfo
from kvbench.sim.geometry import resolve_geometry

__all__ = ["model_cache_dir", "start_dynamo"]


def model_cache_dir() -> Path:
    """Where the generated tokenizer/config directory is kept between runs."""
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "kvbench" / "dynamo-models"


def deployment_spec(
    spec: ExperimentSpec, engine: EngineSpec, arm: DynamoArm, host: str, model_path: Path
) -> DeploymentSpec:
    """The Dynamo deployment standing in for the experiment's workers under this arm."""
    if engine.kv_cache_memory_bytes is None:
        raise ValueError(
            "a dynamo arm runs dynamo.mocker locally, which takes a KV block count: set "
            "engine.kvCacheMemoryBytes so the mockers hold what the other arms' workers hold"
        )
    scale = spec.simulator.time_scale
    return DeploymentSpec(
        model_path=model_path,
        model_name=engine.served_model_name or engine.model,
        workers=spec.total_workers,
        mocker=MockerOptions(
            block_size=engine.block_tokens,
            num_gpu_blocks=mocker_kv_blocks(
                engine.model,
                engine.kv_cache_memory_bytes,
                engine.block_tokens,
                engine.kv_cache_dtype,
                engine.dtype,
            ),
            speedup_ratio=1 / scale if scale > 0 else 0,
            max_num_seqs=engine.max_num_seqs,
            max_num_batched_tokens=engine.max_num_batched_tokens,
            enable_prefix_caching=engine.enable_prefix_caching is not False,
        ),
        router=RouterOptions(
            mode=arm.router_mode,
            overlap_score_credit=arm.overlap_score_credit,
            prefill_load_scale=arm.prefill_load_scale,
            temperature=arm.temperature,
            kv_events=arm.kv_events,
        ),
        host=host,
    )


async def start_dynamo(
    spec: ExperimentSpec,
    engine: EngineSpec,
    arm: DynamoArm,
    host: str,
    scratch: Path,
) -> tuple[DynamoDeployment, list[WorkerInfo], dict[str, int]]:
    """Start the deployment; its workers as the runner sees them (one per pod of the spec),
    and the id the frontend reports for each. A mocker reports no KV size of its own, so the
    size it was given is recorded as configured, not measured."""
    model = await asyncio.to_thread(
        ensure_model_dir, model_cache_dir(), ModelDirSpec(geometry=resolve_geometry(engine.model))
    )
    dspec = deployment_spec(spec, engine, arm, host, model.path)
    deployment = DynamoDeployment(dspec, scratch)
    await asyncio.to_thread(deployment.start)
    workers = [
        WorkerInfo(
            name=f"dynamo-{w.index}",
            pool="dynamo",
            uid=f"{w.pid}-{w.instance_id}",
            node="local",
            image="dynamo.mocker",
            base_url=deployment.base_url,
            metrics_url=w.metrics_url,
            configured_kv_cache_tokens=dspec.mocker.num_gpu_blocks * dspec.mocker.block_size,
            startup_seconds=round(w.startup_seconds, 3),
        )
        for w in deployment.workers
    ]
    ids = {f"dynamo-{w.index}": w.instance_id for w in deployment.workers}
    return deployment, workers, ids
