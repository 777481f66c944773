"""Skewed prefix popularity on article 002's 6-worker layout: the measured hit rates of the
Service and of prefix affinity land on the hit-rate model (Che's approximation) the report
prints beside them, and the Service's gain from skew is real, not the uniform model's."""

import pytest

from conftest import SERVICE, article_002, run_experiment
from kvbench.runner import aggregate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zipf(tmp_path_factory):
    arms = [*SERVICE, {"name": "affinity", "prefixAffinity": {}}]
    experiment = article_002("6w", arms, [24], requests=1200, popularity={"zipf": {"s": 1.0}})
    return run_experiment(experiment, tmp_path_factory.mktemp("zipf"))


def test_zipf_hit_rates_follow_the_model(zipf) -> None:
    points = {p.arm: p for p in aggregate(zipf.experiment.spec, zipf.records)}
    for arm, model in (
        ("service", points["service"].predicted_hit_rate),
        ("affinity", points["affinity"].predicted_affinity_hit_rate),
    ):
        measured = points[arm].request_hit_rate
        print(f"{arm}: measured {measured:.3f}, model {model:.3f}")
        assert model is not None and measured is not None
        assert measured == pytest.approx(model, abs=0.03), arm
    assert points["service"].popularity == "zipf s=1"
    # uniform popularity at 24 prefixes holds about held / 24 = 16 %: skew more than doubles it
    assert points["service"].request_hit_rate > 2 * 9360 / 2371 / 24
