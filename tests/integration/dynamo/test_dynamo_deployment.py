"""A kv-routed deployment of three mockers, through the load generator's client: streaming,
nvext worker ids and cached tokens, per-worker counters, chat and text prompts."""

from __future__ import annotations

import random
from collections.abc import Iterator

import httpx
import pytest
from dynamo_helpers import one_by_one

from kvbench.dynamo import (
    DeploymentSpec,
    DynamoDeployment,
    MockerOptions,
    ModelDir,
    RouterOptions,
    scrape_worker,
)
from kvbench.dynamo.environment import registered_instance_ids

pytestmark = pytest.mark.timeout(180)

BLOCK = 16


@pytest.fixture(scope="module")
def deployment(
    model_dir: ModelDir, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DynamoDeployment]:
    spec = DeploymentSpec(
        model_path=model_dir.path,
        workers=3,
        mocker=MockerOptions(block_size=BLOCK, num_gpu_blocks=2048, speedup_ratio=10),
        router=RouterOptions(mode="kv"),
    )
    with DynamoDeployment(spec, tmp_path_factory.mktemp("dynamo-kv")) as running:
        yield running


def tokens(seed: str, count: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, 30000) for _ in range(count)]


def test_the_workers_are_the_registered_instances(deployment: DynamoDeployment) -> None:
    ids = {worker.instance_id for worker in deployment.workers}
    assert len(ids) == 3
    assert registered_instance_ids(deployment.scratch) == ids
    assert len({worker.metrics_url for worker in deployment.workers}) == 3
    models = httpx.get(f"{deployment.base_url}/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["qwen3-mock"]


def test_completion_streams_with_the_serving_worker(deployment: DynamoDeployment) -> None:
    [record] = one_by_one(deployment, [tokens("stream", 100)], max_tokens=6)
    assert (record.prompt_tokens, record.output_tokens) == (100, 6)
    assert len(record.itl) == 5
    assert record.worker_id in {w.instance_id for w in deployment.workers}
    assert record.ttft is not None and 0 < record.ttft <= record.e2e


def test_repeated_prompt_reports_cached_whole_blocks(deployment: DynamoDeployment) -> None:
    prompt = tokens("repeat", 100)
    first, second = one_by_one(deployment, [prompt, prompt])
    assert first.cached_tokens == 0
    assert second.cached_tokens == (100 // BLOCK) * BLOCK
    assert second.worker_id == first.worker_id


def test_kv_router_keeps_a_shared_prefix_on_one_worker(deployment: DynamoDeployment) -> None:
    prefix = tokens("shared", 256)
    prompts = [prefix + tokens(f"suffix-{i}", 16) for i in range(12)]
    records = one_by_one(deployment, prompts)
    assert len({r.worker_id for r in records}) == 1
    assert all((r.cached_tokens or 0) >= 256 for r in records[1:])


def test_worker_counters_agree_with_nvext(deployment: DynamoDeployment) -> None:
    before = {w.instance_id: scrape_worker(w.metrics_url) for w in deployment.workers}
    records = one_by_one(deployment, [tokens(f"count-{i}", 64) for i in range(9)])
    served = {w.instance_id: 0 for w in deployment.workers}
    for record in records:
        assert record.worker_id is not None
        served[record.worker_id] += 1
    deployment.wait_idle()
    for worker in deployment.workers:
        delta = scrape_worker(worker.metrics_url).minus(before[worker.instance_id])
        assert delta.requests_total == served[worker.instance_id]


def test_text_and_chat_prompts_use_the_tokenizer(deployment: DynamoDeployment) -> None:
    [text] = one_by_one(deployment, ["a prompt in plain words for the trained tokenizer"])
    assert text.prompt_tokens and text.prompt_tokens > 0 and text.output_tokens == 4
    response = httpx.post(
        f"{deployment.base_url}/v1/chat/completions",
        json={
            "model": "qwen3-mock",
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 3,
            "ignore_eos": True,
        },
        timeout=60,
    )
    response.raise_for_status()
    body = response.json()
    assert body["choices"][0]["message"]["content"]
    assert body["usage"]["completion_tokens"] == 3
