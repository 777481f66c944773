"""Proof of the load generator against a real (small) server on loopback: connections,
identical sequences, warm-up exclusion, errors as data, and the SSE shapes servers send."""

import gzip
import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_openai import Behaviour, FakeOpenAI
from loadgen_helpers import small_config

from kvbench.cli.loadgen import loadgen
from kvbench.loadgen.measure import run_sync
from kvbench.loadgen.results import LoadgenResult, read_result

WARMUPS, MEASURED = 3, 12


def test_a_new_tcp_connection_for_every_request(fake: FakeOpenAI) -> None:
    result = run_sync(small_config(fake.url))
    assert len(fake.bodies) == WARMUPS + MEASURED
    assert fake.connections == len(fake.bodies)
    assert result.conditions.connection == "new"
    assert result.summary.succeeded == MEASURED and result.summary.errors == 0


def test_keep_alive_reuses_connections(fake: FakeOpenAI) -> None:
    run_sync(small_config(fake.url, connection="keep-alive"))
    assert len(fake.bodies) == WARMUPS + MEASURED
    assert fake.connections <= 4  # at most one per concurrent slot


def test_one_seed_sends_the_identical_sequence(make_fake) -> None:
    first, second, other = (make_fake(Behaviour()) for _ in range(3))
    one = {"point": {"concurrency": 1, "prefixes": 3}}
    a = run_sync(small_config(first.url, **one))
    b = run_sync(small_config(second.url, **one))
    c = run_sync(small_config(other.url, seed=12, **one))
    assert first.bodies == second.bodies
    assert a.conditions.digest == b.conditions.digest
    assert other.bodies != first.bodies and c.conditions.digest != a.conditions.digest
    # at concurrency 4 the same requests go out; only their interleaving may differ
    third = make_fake(Behaviour())
    d = run_sync(small_config(third.url))
    assert d.conditions.digest == a.conditions.digest
    as_set = sorted(json.dumps(body, sort_keys=True) for body in third.bodies)
    assert as_set == sorted(json.dumps(body, sort_keys=True) for body in first.bodies)
    assert len(set(as_set)) == len(as_set)


def test_the_digest_does_not_depend_on_the_target(make_fake) -> None:
    a, b = make_fake(Behaviour()), make_fake(Behaviour())
    pods = {"pod-a": a.url, "pod-b": b.url}
    affinity = run_sync(small_config(a.url, target={"kind": "prefix-affinity", "pods": pods}))
    plain = run_sync(small_config(a.url))
    assert affinity.conditions.digest == plain.conditions.digest
    assert affinity.conditions.target == "prefix-affinity"
    by_group: dict[int, set[str]] = {}
    for record in affinity.records():
        by_group.setdefault(record.group or 0, set()).add(record.endpoint)
    assert all(len(endpoints) == 1 for endpoints in by_group.values())


@pytest.mark.parametrize("count_delay", [0.0, 0.05])
def test_warmup_requests_are_absent_from_every_figure(make_fake, count_delay: float) -> None:
    # The server reports a cache hit (and counts hit tokens) only for the first WARMUPS
    # requests it receives: the warm-ups, which run first and to completion. With a delay,
    # /metrics counts a request only 50 ms after its response, as vLLM can be a moment late.
    server = make_fake(
        Behaviour(cached_tokens=lambda n, body: 10 if n < WARMUPS else 0, count_delay=count_delay)
    )
    metrics = {"kind": "direct", "pods": {"fake": f"{server.url}/metrics"}}
    result = run_sync(small_config(server.url, metrics=metrics))
    s = result.summary
    assert s.requests == MEASURED and s.succeeded == MEASURED
    assert s.hit_rates.request_hit_rate == 0.0
    assert s.hit_rates.token_hit_rate_counters == 0.0 and s.hit_rates.agree is True
    (pod,) = result.counters.pods or []
    measured = [r for r in result.records() if r.phase == "measured"]
    assert pod.requests == MEASURED
    assert pod.prefix_cache_hits == 0
    assert pod.prompt_tokens == sum(r.prompt_tokens or 0 for r in measured)
    assert pod.generation_tokens == sum(r.output_tokens or 0 for r in measured)
    warm = [r for r in result.records() if r.phase == "warmup"]
    assert len(warm) == WARMUPS and all(r.hit for r in warm)


def test_a_failing_server_yields_counted_errors(make_fake) -> None:
    # concurrency 1: arrival n = 0..2 are the warm-ups, 3..14 the measured requests
    server = make_fake(
        Behaviour(
            status=lambda n: 500 if n % 4 == 1 else 200,
            cut_after_tokens=lambda n: 3 if n % 4 == 2 else None,
        )
    )
    result = run_sync(small_config(server.url, point={"concurrency": 1, "prefixes": 3}))
    measured = range(WARMUPS, WARMUPS + MEASURED)
    http = sum(1 for n in measured if n % 4 == 1)
    cut = sum(1 for n in measured if n % 4 == 2)
    s = result.summary
    assert s.requests == MEASURED
    assert s.errors_by_kind == {"http": http, "incomplete": cut}
    assert s.errors == http + cut and s.succeeded == MEASURED - http - cut
    assert len(result.records()) == WARMUPS + MEASURED  # nothing dropped
    failed = [r for r in result.records() if r.error_kind == "http"]
    assert all(r.status == 500 and "injected failure" in (r.error or "") for r in failed)


def test_unreadable_counters_keep_the_measured_requests(fake: FakeOpenAI) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    metrics = {"kind": "direct", "pods": {"gone": f"http://127.0.0.1:{closed}/metrics"}}
    result = run_sync(small_config(fake.url, metrics=metrics))
    assert result.summary.succeeded == MEASURED
    assert result.counters.error and result.counters.pods is None
    assert result.warnings[0].startswith("counters not read")
    assert result.summary.hit_rates.token_hit_rate_counters is None


def test_refused_connections_are_errors(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_sync(small_config(f"http://127.0.0.1:{port}"))
    assert result.summary.requests == MEASURED
    assert result.summary.errors_by_kind == {"connect": MEASURED}


def test_a_stalled_request_times_out_as_an_error(make_fake) -> None:
    server = make_fake(Behaviour(stall=lambda n: n == WARMUPS + 1))
    result = run_sync(
        small_config(server.url, point={"concurrency": 1, "prefixes": 3}, requestTimeout="500ms")
    )
    assert result.summary.errors_by_kind == {"timeout": 1}
    assert result.summary.succeeded == MEASURED - 1


def test_crlf_event_separators(make_fake) -> None:
    server = make_fake(Behaviour(crlf=True))
    result = run_sync(small_config(server.url))
    assert result.summary.errors == 0
    assert all(len(r.itl) == 7 and r.output_tokens == 8 for r in result.records())


def _chat_stream(n: int, body: dict) -> list[bytes]:
    """OpenAI's chat shape: a role chunk without content first, spaces after colons."""
    tokens = body["max_tokens"]
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{"choices": [{"index": 0, "delta": {"content": f" w{i}"}}]} for i in range(tokens)]
    chunks.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": tokens}})
    events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    return [*events, b"data: [DONE]\n\n"]


def test_chat_role_chunk_is_not_a_token(make_fake) -> None:
    server = make_fake(Behaviour(raw_stream=_chat_stream))
    workload = {
        "promptFormat": "text",
        "sharedPrefix": small_config("http://x").workload.shared_prefix,
    }
    result = run_sync(small_config(server.url, api="chat", workload=workload))
    assert result.summary.errors == 0
    assert all(len(r.itl) == 7 for r in result.records())
    assert all(r.cached_tokens is None for r in result.records())
    assert result.summary.hit_rates.request_hit_rate is None
    assert any("--enable-prompt-tokens-details" in w for w in result.warnings)
    assert server.bodies[0]["messages"][0]["role"] == "user"


def test_an_error_event_in_the_stream_is_an_error(make_fake) -> None:
    def broken(n: int, body: dict) -> list[bytes]:
        return [b'data: {"error":{"message":"engine died","code":500}}\n\n', b"data: [DONE]\n\n"]

    result = run_sync(small_config(make_fake(Behaviour(raw_stream=broken)).url))
    assert result.summary.errors_by_kind == {"stream": MEASURED}
    assert "engine died" in (result.records()[-1].error or "")


def test_poisson_arrivals_are_seeded(make_fake) -> None:
    point = {"concurrency": 4, "prefixes": 3, "requestRate": 200.0}
    a = run_sync(small_config(make_fake(Behaviour()).url, point=point))
    b = run_sync(small_config(make_fake(Behaviour()).url, point=point))
    assert a.conditions.schedule == "poisson"
    due_a = [r.due for r in a.records() if r.phase == "measured"]
    due_b = [r.due for r in b.records() if r.phase == "measured"]
    # the same gaps between due times in both runs (the runs' origins differ)
    gaps_a = [x - due_a[0] for x in due_a]
    assert gaps_a == pytest.approx([x - due_b[0] for x in due_b], abs=3e-6)
    assert due_a == sorted(due_a)
    assert a.client.lateness_p99 is not None


def test_cli_writes_the_result_document(fake: FakeOpenAI, tmp_path: Path) -> None:
    config, out = tmp_path / "run.json", tmp_path / "result.json"
    config.write_text(small_config(fake.url).model_dump_json(by_alias=True))
    outcome = CliRunner().invoke(loadgen, ["--config", str(config), "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    result = LoadgenResult.load(out)
    assert result.schema_version == 2 and result.kind == "LoadgenResult"
    assert result.summary.requests == MEASURED
    assert result.conditions.versions.event_loop.startswith("uvloop")
    raw = json.loads(out.read_text())
    assert {"conditions", "window", "summary", "client", "counters"} <= set(raw)
    assert "runSummary" not in raw and len(raw["requests"]["phase"]) == WARMUPS + MEASURED


def test_cli_writes_gzip_for_a_gz_name(fake: FakeOpenAI, tmp_path: Path) -> None:
    config, out = tmp_path / "run.json", tmp_path / "result.json.gz"
    config.write_text(small_config(fake.url).model_dump_json(by_alias=True))
    outcome = CliRunner().invoke(loadgen, ["--config", str(config), "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    data = out.read_bytes()
    assert json.loads(gzip.decompress(data))["kind"] == "LoadgenResult"
    result = LoadgenResult.load(out)
    assert result == read_result(data) and len(result.records()) == WARMUPS + MEASURED


def test_the_command_is_registered() -> None:
    import click

    from kvbench.cli import main

    assert main.get_command(click.Context(main), "loadgen") is loadgen


def test_cli_rejects_an_invalid_config(tmp_path: Path) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"model": "m", "seed": -1}))
    outcome = CliRunner().invoke(loadgen, ["--config", str(config), "--out", str(tmp_path / "o")])
    assert outcome.exit_code == 1
    assert "seed" in outcome.output and "target" in outcome.output
