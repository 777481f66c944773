"""Every Service run's record says what balanced the Service (the arm's, as the back end read
it when the arm opened); other arms' records say nothing of it."""

import asyncio
from pathlib import Path

import yaml
from fake_cluster import FakeCluster

from kvbench.api import ServiceBalancing, parse_experiment
from kvbench.runner import DirectoryStore, ExperimentRunner
from kvbench.runner.cluster import UrlEndpoint

ROOT = Path(__file__).resolve().parents[3]
IPVS = ServiceBalancing(mode="ipvs", scheduler="rr", source="ConfigMap kube-system/kube-proxy")


class BalancedCluster(FakeCluster):
    """A cluster whose Service arm says how it balances, as the Kubernetes one does."""

    async def open_arm(self, spec, arm, workers, names):
        endpoint = await super().open_arm(spec, arm, workers, names)
        if arm.service is None:
            return endpoint
        return UrlEndpoint(arm=endpoint.arm, url=endpoint.url, balancing=IPVS)


def test_every_service_run_records_its_balancing_and_only_those(tmp_path: Path) -> None:
    """The bug: the arm knew the mode, the record (what the report reads) did not."""
    document = yaml.safe_load((ROOT / "examples" / "prefix-cache-service.yaml").read_text())
    document["spec"]["routing"].append({"name": "affinity", "prefixAffinity": {}})
    experiment = parse_experiment(document)
    store = DirectoryStore(tmp_path)
    asyncio.run(ExperimentRunner(experiment, BalancedCluster(), store).run())
    records = store.records()
    assert {r.arm for r in records} == {"service", "affinity"}
    for r in records:
        assert r.service_balancing == (IPVS if r.arm == "service" else None), r.id
