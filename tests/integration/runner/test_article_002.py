"""Article 002 reproduced on the local back end: the outcome, not just that it ran.

1 GiB of KV per worker (~9,360 tokens), 2,371-token requests (2,032 shared), one warm-up per
prefix, a new connection per request, concurrency 8, requests = max(200, 20 x prefixes).
"""

import pytest

HELD = 3.95  # requests of 2,371 tokens one worker's 9,360 KV tokens hold (the article's figure)


@pytest.mark.parametrize("prefixes", [7, 12, 24])
@pytest.mark.parametrize("layout", ["6w", "3w"])
def test_hit_rate_follows_the_capacity_model(layout, prefixes, capacity_points) -> None:
    record = capacity_points[layout].point("service", prefixes)
    predicted = min(1.0, HELD / prefixes)
    assert record.summary.errors == 0 and record.summary.requests == 1200
    assert record.summary.request_hit_rate == pytest.approx(predicted, abs=0.06), (
        f"{layout}, {prefixes} prefixes: measured {record.summary.request_hit_rate:.3f}, "
        f"model {predicted:.3f}"
    )


@pytest.mark.parametrize(("layout", "workers"), [("six_workers", 6), ("three_workers", 3)])
def test_two_prefixes_miss_exactly_the_unwarmed_pairs(layout, workers, request) -> None:
    record = request.getfixturevalue(layout).point("service", 2)
    misses = round(record.summary.requests * (1 - record.summary.request_hit_rate))
    assert record.summary.requests == 200
    assert misses == workers * 2 - 2


def test_prefix_affinity_lifts_24_prefixes_far_above_the_service(six_workers) -> None:
    service = six_workers.point("service", 24).summary.request_hit_rate
    affinity = six_workers.point("affinity", 24).summary.request_hit_rate
    assert service == pytest.approx(HELD / 24, abs=0.06)
    assert affinity > 2.5 * service
    assert affinity > 0.5


def test_both_hit_measures_agree(six_workers) -> None:
    """The article's two counts agree to 3 decimals: the responses' cached tokens over their
    prompt tokens (per request, from the raw records) and the servers' prefix-cache counters
    (hits over queries, summed over the pods' deltas in the run record)."""
    for record in six_workers.records:
        measured = [r for r in six_workers.result(record).records() if r.phase == "measured"]
        assert measured and all(r.ok for r in measured)
        assert all(r.cached_tokens is not None and r.prompt_tokens for r in measured)
        responses = sum(r.cached_tokens or 0 for r in measured) / sum(
            r.prompt_tokens or 0 for r in measured
        )
        hits = sum(p.prefix_cache_hits for p in record.pods)
        queries = sum(p.prefix_cache_queries for p in record.pods)
        assert queries > 0
        assert responses == pytest.approx(hits / queries, abs=0.001), (
            f"{record.id}: responses {responses:.4f}, counters {hits / queries:.4f}"
        )
        assert len(measured) == sum(p.requests for p in record.pods) == record.summary.requests


def test_every_start_records_its_kv_size(six_workers) -> None:
    for record in six_workers.records:
        assert len(record.pods) == 6
        assert {p.kv_cache_tokens for p in record.pods} == {9360}
        assert {p.configured_kv_cache_tokens for p in record.pods} == {None}  # they report it
        assert all(p.startup_seconds and p.startup_seconds > 0 for p in record.pods)
    # freshness restart: every run's workers are starts of their own
    uids = [p.uid for record in six_workers.records for p in record.pods]
    assert all(uids) and len(set(uids)) == len(uids) == 6 * len(six_workers.records)


def test_identical_sequences_across_arms(six_workers) -> None:
    for prefixes in (2, 24):
        digests = {six_workers.point(arm, prefixes).digest for arm in ("service", "affinity")}
        assert len(digests) == 1
