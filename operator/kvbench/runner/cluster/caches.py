"""Emptying the workers' prefix caches (freshness: reset-cache), the same on every back end:
vLLM serves `POST /reset_prefix_cache` only with VLLM_SERVER_DEV_MODE=1."""

import httpx

from kvbench.runner.cluster.base import WorkerInfo

__all__ = ["reset_prefix_caches"]


async def reset_prefix_caches(workers: list[WorkerInfo]) -> None:
    """Reset every worker's prefix cache; an answer other than 200 is an error naming it."""
    async with httpx.AsyncClient() as client:
        for worker in workers:
            response = await client.post(f"{worker.base_url}/reset_prefix_cache", timeout=30)
            if response.status_code != 200:
                raise RuntimeError(
                    f"{worker.name}: /reset_prefix_cache answered {response.status_code}: "
                    f"{response.text[:200]}"
                )
