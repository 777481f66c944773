"""`kvbench run` of an experiment whose every request fails exits 1 after the run's retries,
naming the commonest error, and does not call the window client-bound; over runs where only
some requests failed, `--max-error-rate` moves the bar.

Every request fails honestly: the model's config.json gives it a vocabulary of 1,000 tokens,
and the load generator draws prompt token ids up to 30,000, so the simulator refuses each
prompt as vLLM would ("Token id N is out of vocabulary")."""

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from kvbench.loadgen.results import read_result

KVBENCH = [sys.executable, "-m", "kvbench"]
_GEOMETRY = {
    "num_attention_heads": 16,
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 4096,
}


def _experiment(tmp_path: Path, vocab_size: int = _GEOMETRY["vocab_size"]) -> Path:
    model = tmp_path / "small-vocab"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**_GEOMETRY, "vocab_size": vocab_size}))
    document = {
        "apiVersion": "kvbench.io/v1alpha1",
        "kind": "BenchmarkExperiment",
        "metadata": {"name": "refused"},
        "spec": {
            "engine": {"model": str(model), "maxModelLen": 4096, "kvCacheMemoryBytes": "1Gi"},
            "workers": [
                {
                    "name": "gpu",
                    "replicas": 1,
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "simulation": {"profile": "qwen3-0.6b-24gb"},
                }
            ],
            "routing": [{"name": "service", "service": {}}],
            "workload": {
                "sharedPrefix": {
                    "prefixes": [2],
                    "prefixTokens": 64,
                    "suffixTokens": 16,
                    "outputTokens": 4,
                    "requestsPerPrefix": 200,
                    "minRequests": 400,
                }
            },
            # Refusals come back at once: 32 at a time keep the client busy, which is when
            # an all-failed run used to be judged client-bound.
            "load": {"concurrency": [32], "trials": 1, "seed": 1},
        },
    }
    path = tmp_path / "refused.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KVBENCH, "run", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_an_all_failed_run_fails_after_its_retries_naming_its_commonest_error(
    tmp_path: Path,
) -> None:
    """A window in which every request failed measured no server: each attempt fails
    (NoResponses), its document kept as evidence, and no record is made of it."""
    experiment, out = _experiment(tmp_path), tmp_path / "results"
    failed = _run(str(experiment), "--out", str(out))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 of 1 runs failed (each after 2 attempts)" in failed.stderr
    line = re.search(
        r"^  (\S+): NoResponses: 2 attempt\(s\) failed; last: (.*)$", failed.stderr, re.M
    )
    assert line is not None, failed.stderr
    said = re.fullmatch(
        r"every one of the 400 measured requests failed; commonest error \(400 of 400\): "
        r"HTTP 400 in the stream: Token id (\d+) is out of vocabulary",
        line.group(2),
    )
    assert said is not None and int(said.group(1)) >= _GEOMETRY["vocab_size"], line.group(2)
    (record_path,) = (out / "runs").glob("r*.json")
    record = json.loads(record_path.read_text())
    assert (record["id"], record["errorReason"]) == (line.group(1), "NoResponses")
    assert record["summary"]["requests"] == 0  # no figures from a window of failures
    kept = [attempt["rawResults"] for attempt in record["failedAttempts"]]
    assert kept == ["raw/r0-a1.json.gz", "raw/r0-a2.json.gz"]
    for name in kept:
        result = read_result((out / name).read_bytes())
        assert (result.summary.requests, result.summary.errors) == (400, 400)
        # refusals come back at once, yet that is not the client's fault
        assert (result.client.client_bound, result.client.reasons) == (False, [])
        assert any("no measured request succeeded" in w for w in result.warnings)


def test_max_error_rate_moves_the_bar_over_recorded_runs(tmp_path: Path) -> None:
    """Some prompts hold a token id above a vocabulary of 29,950 (ids are drawn below 30,000;
    this seed puts one in a prefix and in a few suffixes): about half the requests fail, the
    run is recorded, and the bar decides the exit code; a second call with the same results
    only judges again."""
    experiment, out = _experiment(tmp_path, vocab_size=29_950), tmp_path / "results"
    strict = _run(str(experiment), "--out", str(out), "--max-error-rate", "0")
    (record_path,) = (out / "runs").glob("r*.json")
    recorded = record_path.read_text()
    summary = json.loads(recorded)["summary"]
    assert 0 < summary["errors"] < summary["requests"], summary  # the premise
    assert strict.returncode == 1, strict.stdout + strict.stderr
    share = summary["errors"] / summary["requests"]
    assert f"{summary['errors']} of {summary['requests']} requests failed ({share:.0%})" in (
        strict.stderr
    )
    assert "out of vocabulary" in strict.stderr

    tolerated = _run(str(experiment), "--out", str(out), "--max-error-rate", f"{share + 0.01}")
    assert tolerated.returncode == 0, tolerated.stdout + tolerated.stderr
    assert "requests failed" not in tolerated.stderr
    assert record_path.read_text() == recorded  # judged again, not measured again
