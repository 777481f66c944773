"""Article 002 reproduced on the local back end: the outcome, not just that it ran.

1 GiB of KV per worker (~9,360 tokens), 2,371-token requests (2,032 shared), one warm-up per
prefix, a new connection per request, concurrency 8, requests = max(200, 20 x prefixes).
"""

import pytest

from kvbench.api import RunRecord

HELD = 3.95  # requests of 2,371 tokens one worker's 9,360 KV tokens hold (the article's figure)


def _point(records: list[RunRecord], arm: str, prefixes: int) -> RunRecord:
    [record] = [r for r in records if r.arm == arm and r.point.prefixes == prefixes]
    return record


@pytest.mark.parametrize("prefixes", [7, 12, 24])
@pytest.mark.parametrize("layout", ["6w", "3w"])
def test_hit_rate_follows_the_capacity_model(layout, prefixes, capacity_points) -> None:
    record = _point(capacity_points[layout], "service", prefixes)
    predicted = min(1.0, HELD / prefixes)
    assert record.summary.errors == 0 and record.summary.requests == 1200
    assert record.summary.request_hit_rate == pytest.approx(predicted, abs=0.06), (
        f"{layout}, {prefixes} prefixes: measured {record.summary.request_hit_rate:.3f}, "
        f"model {predicted:.3f}"
    )


@pytest.mark.parametrize(("layout", "workers"), [("six_workers", 6), ("three_workers", 3)])
def test_two_prefixes_miss_exactly_the_unwarmed_pairs(layout, workers, request) -> None:
    record = _point(request.getfixturevalue(layout), "service", 2)
    misses = round(record.summary.requests * (1 - record.summary.request_hit_rate))
    assert record.summary.requests == 200
    assert misses == workers * 2 - 2


def test_prefix_affinity_lifts_24_prefixes_far_above_the_service(six_workers) -> None:
    service = _point(six_workers, "service", 24).summary.request_hit_rate
    affinity = _point(six_workers, "affinity", 24).summary.request_hit_rate
    assert service == pytest.approx(HELD / 24, abs=0.06)
    assert affinity > 2.5 * service
    assert affinity > 0.5


def test_both_hit_measures_agree(six_workers) -> None:
    """The article's two counts (responses' cached tokens, servers' counters) agree."""
    for record in six_workers:
        pods = record.pods
        hits = sum(p.prefix_cache_hits for p in pods)
        queries = sum(p.prefix_cache_queries for p in pods)
        assert record.summary.token_hit_rate == pytest.approx(hits / queries)
        assert record.summary.requests == sum(p.requests for p in pods)


def test_every_start_records_its_kv_size(six_workers) -> None:
    for record in six_workers:
        assert len(record.pods) == 6
        assert {p.kv_cache_tokens for p in record.pods} == {9360}
        assert all(p.startup_seconds and p.startup_seconds > 0 for p in record.pods)


def test_identical_sequences_across_arms(six_workers) -> None:
    for prefixes in (2, 24):
        digests = {_point(six_workers, arm, prefixes).digest for arm in ("service", "affinity")}
        assert len(digests) == 1
