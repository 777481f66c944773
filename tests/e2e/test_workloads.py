"""The workloads production sees, end to end on the test cluster's real nodes: skewed prefix
popularity judged against objectives (goodput), multi-turn conversations with session
affinity, and a Mooncake trace replayed from a ConfigMap. The operator, the load generator
Job and the workers run the images built from this checkout; each workload's requests are the
same in every arm."""

import kubernetes
import pytest
from e2e_helpers import (
    CPU_NODE_SHARE,
    GPU,
    ROOT,
    apply,
    experiment_document,
    results_store,
    wait_phase,
)

from kvbench.kube.trace import trace_configmap
from kvbench.loadgen.results import read_result
from kvbench.testing.cluster import TestCluster

pytestmark = pytest.mark.slow
TRACE = ROOT / "examples" / "traces" / "small-mooncake.jsonl"
BLOCK = 16
WORKERS = [{"name": "gpu", "replicas": 2, "nodeSelector": GPU,
            "simulation": {"profile": "qwen3-0.6b-24gb"}}]  # fmt: skip


def _on_the_cluster(document: dict) -> dict:
    spec = document["spec"]
    spec["workers"] = WORKERS
    spec["load"].update(trials=1)
    spec["simulator"] = {"onCluster": True}
    spec["loadGenerator"] = {"resources": CPU_NODE_SHARE}
    return document


@pytest.mark.timeout(1200)
def test_zipf_popularity_and_goodput_and_conversations_on_real_nodes(
    cluster: TestCluster, namespace: str, operator: dict
) -> None:
    zipf = _on_the_cluster(experiment_document("prefix-cache-service.yaml", "zipf"))
    zipf["spec"]["routing"] = [{"name": "service", "service": {}},
                               {"name": "affinity", "prefixAffinity": {}}]  # fmt: skip
    zipf["spec"]["workload"]["sharedPrefix"].update(
        prefixes=[8], requestsPerPrefix=10, minRequests=80, popularity={"zipf": {"s": 1.2}}
    )
    zipf["spec"]["load"]["concurrency"] = [4]
    zipf["spec"]["slo"] = {"ttft": "2s", "tpot": "100ms"}
    chats = _on_the_cluster(experiment_document("multi-turn.yaml", "chats"))
    chats["spec"]["routing"] = [{"name": "service", "service": {}},
                                {"name": "session", "sessionAffinity": {}}]  # fmt: skip
    chats["spec"]["workload"]["conversation"].update(conversations=6, turns=3, thinkTime="0s")
    chats["spec"]["load"]["concurrency"] = [2]
    replay = _on_the_cluster(experiment_document("trace-replay.yaml", "replay"))
    replay["spec"]["workload"]["trace"] = {"configMap": {"name": "trace"}, "maxRows": 60,
                                           "timing": "closed"}  # fmt: skip
    replay["spec"]["load"]["concurrency"] = [4]
    kubernetes.client.CoreV1Api(cluster.api_client()).create_namespaced_config_map(
        namespace, trace_configmap(TRACE.read_bytes(), "trace")
    )
    apply(cluster, namespace, zipf)
    apply(cluster, namespace, chats)
    apply(cluster, namespace, replay)
    for name in ("zipf", "chats", "replay"):
        body = wait_phase(cluster, namespace, name, {"Succeeded", "Failed"}, 900)
        assert body["status"]["phase"] == "Succeeded", body["status"]

    store = results_store(cluster, namespace, "zipf")
    records = {r.arm: r for r in store.records()}
    assert len({r.digest for r in records.values()}) == 1
    for record in records.values():
        s = record.summary
        print(f"zipf {record.arm}: hit rate {s.request_hit_rate:.3f}, goodput {s.goodput}, "
              f"attainment {s.slo_attainment}, met {s.slo_met}")  # fmt: skip
        assert s.errors == 0 and s.requests == 80
        assert set(s.slo_met) == {"ttft", "tpot"} and s.goodput is not None
        assert s.slo_attainment is not None and s.slo_attainment <= min(s.slo_met.values())
    groups = [r.group for r in read_result(store.read_raw(records["service"].raw_results)).records()
              if r.phase == "measured"]  # fmt: skip
    assert groups.count(0) > 3 * groups.count(7)  # prefix 1 asked 8^1.2 = 12 times prefix 8
    [point] = [p for p in store.aggregate() if p.arm == "service"]
    assert point.popularity == "zipf s=1.2" and point.predicted_hit_rate is not None

    store = results_store(cluster, namespace, "chats")
    records = {r.arm: r for r in store.records()}
    assert len({r.digest for r in records.values()}) == 1
    session = records["session"]
    rows = {(r.conversation, r.turn): r
            for r in read_result(store.read_raw(session.raw_results)).records()
            if r.phase == "measured"}  # fmt: skip
    assert len(rows) == 18 and all(r.ok for r in rows.values())
    for (conversation, turn), row in rows.items():
        if turn > 1:  # the previous turn's prompt and answer, met on the same pod
            before = rows[(conversation, turn - 1)]
            assert row.endpoint == before.endpoint
            computed = (before.prompt_tokens or 0) + (before.output_tokens or 0) - 1
            assert row.cached_tokens == computed // BLOCK * BLOCK, (conversation, turn)
    assert [t.turn for t in session.summary.turns] == [1, 2, 3]

    store = results_store(cluster, namespace, "replay")
    records = {r.arm: r for r in store.records()}
    assert len({r.digest for r in records.values()}) == 1
    assert all(r.summary.requests == 60 and r.summary.errors == 0 for r in records.values())
    assert records["affinity"].summary.token_hit_rate >= records["service"].summary.token_hit_rate
