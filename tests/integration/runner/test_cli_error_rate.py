"""`kvbench run` of an experiment whose every request fails exits 1, names the commonest
error of the run, and does not call the run client-bound; `--max-error-rate` moves the bar.

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


def _experiment(tmp_path: Path) -> Path:
    model = tmp_path / "small-vocab"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(_GEOMETRY))
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


def test_an_all_failed_run_exits_1_with_its_commonest_error(tmp_path: Path) -> None:
    experiment, out = _experiment(tmp_path), tmp_path / "results"
    failed = _run(str(experiment), "--out", str(out))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 of 1 runs failed more than 5% of their requests" in failed.stderr
    line = re.search(r"^  (\S+): 400 of 400 requests failed \(100%\); (.*)$", failed.stderr, re.M)
    assert line is not None, failed.stderr
    said = re.fullmatch(
        r"commonest error \(400 of 400\): HTTP 400 in the stream: Token id (\d+) is out of "
        r"vocabulary",
        line.group(2),
    )
    assert said is not None and int(said.group(1)) >= _GEOMETRY["vocab_size"], line.group(2)

    (record_path,) = (out / "runs").glob("r*.json")
    record = json.loads(record_path.read_text())
    assert (record["id"], record["summary"]["requests"], record["summary"]["errors"]) == (
        line.group(1),
        400,
        400,
    )
    assert record["summary"]["clientBound"] is False
    result = read_result((out / record["rawResults"]).read_bytes())
    assert (result.client.client_bound, result.client.reasons) == (False, [])
    assert any("no measured request succeeded" in w for w in result.warnings)

    tolerated = _run(str(experiment), "--out", str(out), "--max-error-rate", "1")
    assert tolerated.returncode == 0, tolerated.stdout + tolerated.stderr
    assert "requests failed" not in tolerated.stderr
