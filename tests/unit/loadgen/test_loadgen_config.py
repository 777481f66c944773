"""The RunConfig contract: camelCase JSON in, readable errors out."""

import json
from pathlib import Path

import pytest

from kvbench.loadgen.client import encode_body
from kvbench.loadgen.config import ConfigError, RunConfig, load_config
from kvbench.loadgen.workload import Request

BASE = {
    "model": "Qwen/Qwen3-0.6B",
    "target": {"kind": "url", "url": "http://svc.ns:8000"},
    "workload": {"sharedPrefix": {"prefixes": [7]}},
    "point": {"concurrency": 8, "prefixes": 7},
    "seed": 123,
}


def test_round_trip_in_camel_case(tmp_path: Path) -> None:
    config = RunConfig.model_validate(
        {**BASE, "metrics": {"kind": "prometheus", "url": "http://prom:9090",
                             "selector": {"namespace": "bench"}}, "requestTimeout": "30s"}
    )  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(config.model_dump_json(by_alias=True))
    raw = json.loads(path.read_text())
    assert {"requestTimeout", "connectTimeout", "timeScale", "schemaVersion"} <= set(raw)
    again = load_config(path)
    assert again == config and again.request_timeout_seconds == 30.0
    assert again.connection == "new" and again.path == "/v1/completions"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"api": "chat"}, "promptFormat text"),
        ({"point": {"concurrency": 8}}, "point.prefixes"),
        ({"target": {"kind": "prefix-affinity", "pods": {}}}, "at least 1"),
        ({"connection": "sometimes"}, "connection"),
        ({"tokens": {"low": 10, "high": 5}}, "tokens.high"),
        ({"extra": 1}, "extra"),
    ],
)
def test_invalid_configs(tmp_path: Path, change: dict, message: str) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({**BASE, **change}))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_bodies_ask_for_usage_and_exact_lengths() -> None:
    body = json.loads(encode_body(Request("measured", 0, (5, 6), 2, 64), "m", "completions"))
    assert body["prompt"] == [5, 6] and body["max_tokens"] == 64 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    chat = json.loads(encode_body(Request("measured", 0, "a b", 2, 8), "m", "chat"))
    assert chat["messages"] == [{"role": "user", "content": "a b"}] and "prompt" not in chat
