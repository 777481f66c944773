"""Seeded workloads: identical sequences from identical inputs, the article's shapes."""

from collections import Counter

import pytest

from kvbench.api.load import Warmup
from kvbench.api.status import Point
from kvbench.api.workload import Length, Workload
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload import build_sequence
from kvbench.loadgen.workload.tokens import WORDS, draw_length, rng_for

SPACE = TokenSpace()


def _shared(prefixes: int = 7, fmt: str = "token-ids", **kw) -> tuple[Workload, Point]:
    workload = Workload.model_validate(
        {"promptFormat": fmt, "sharedPrefix": {"prefixes": [prefixes], **kw}}
    )
    return workload, Point(concurrency=8, prefixes=prefixes)


def test_same_inputs_same_sequence_and_digest() -> None:
    workload, point = _shared()
    a = build_sequence(workload, point, 5, Warmup(), SPACE)
    b = build_sequence(workload, point, 5, Warmup(), SPACE)
    assert a.warmup == b.warmup and a.measured == b.measured
    assert a.digest == b.digest and a.digest.startswith("sha256:")
    c = build_sequence(workload, point, 6, Warmup(), SPACE)
    assert c.digest != a.digest and c.measured != a.measured


def test_the_sequence_is_pinned() -> None:
    """A changed generator would silently make new results incomparable with old ones: a
    deliberate change updates these values."""
    workload, point = _shared(2, requestsPerPrefix=2, minRequests=4, prefixTokens=8,
                              suffixTokens=4, outputTokens=2)  # fmt: skip
    seq = build_sequence(workload, point, 1, Warmup(), SPACE)
    assert seq.digest == "sha256:c04a5cd9ae61afb8e5a6afea848c8ed9c54568f8a82d477b09a5c88e0f6147ea"
    assert seq.measured[0].group == 1
    assert seq.measured[0].prompt[:4] == (24897, 12003, 29022, 1825)
    text = Workload.model_validate(
        {
            "promptFormat": "text",
            "random": {"inputTokens": {"mean": 5}, "outputTokens": {"mean": 3}, "requests": 3},
        }
    )
    seq = build_sequence(text, Point(concurrency=8), 1, Warmup(), SPACE)
    assert seq.measured[0].prompt == "take more take year some"
    assert seq.digest == "sha256:b9225c5bdc19cf84ccbe57ed5ac3f943488878daec9eb703969ec67f88ff3372"


def test_shared_prefix_shape() -> None:
    workload, point = _shared(7)
    seq = build_sequence(workload, point, 3, Warmup(requests_per_prefix=2), SPACE)
    spec = workload.shared_prefix
    assert spec is not None
    assert len(seq.warmup) == 14 and [r.group for r in seq.warmup[:4]] == [0, 0, 1, 1]
    assert len(seq.measured) == max(200, 7 * 20)
    counts = Counter(r.group for r in seq.measured)
    assert set(counts) == set(range(7)) and max(counts.values()) - min(counts.values()) <= 1
    heads: dict[int, tuple[int, ...]] = {}
    suffixes = set()
    for r in (*seq.warmup, *seq.measured):
        assert isinstance(r.prompt, tuple) and len(r.prompt) == r.prompt_tokens == 2371
        assert all(SPACE.low <= t < SPACE.high for t in r.prompt)
        head = heads.setdefault(r.group or 0, r.prompt[: spec.prefix_tokens])
        assert r.prompt[: spec.prefix_tokens] == head
        suffixes.add(r.prompt[spec.prefix_tokens :])
        assert r.max_tokens == 64
    assert len(suffixes) == len(seq.warmup) + len(seq.measured)
    assert len(set(heads.values())) == 7
    assert [r.group for r in seq.measured] != sorted(r.group or 0 for r in seq.measured)


def test_text_prompts_share_the_prefix_words() -> None:
    workload, point = _shared(2, fmt="text", prefixTokens=40, suffixTokens=10)
    seq = build_sequence(workload, point, 3, Warmup(), SPACE)
    by_group: dict[int, set[str]] = {}
    for r in seq.measured:
        assert isinstance(r.prompt, str)
        words = r.prompt.split(" ")
        assert len(words) == 50 and set(words) <= set(WORDS)
        by_group.setdefault(r.group or 0, set()).add(" ".join(words[:40]))
    assert all(len(v) == 1 for v in by_group.values())


def test_random_prompts_are_distinct_even_when_tiny() -> None:
    workload = Workload.model_validate(
        {"random": {"inputTokens": {"mean": 1}, "outputTokens": {"mean": 4}, "requests": 50}}
    )
    space = TokenSpace(low=0, high=60)
    seq = build_sequence(workload, Point(concurrency=4), 9, Warmup(requests=5), space)
    prompts = [r.prompt for r in (*seq.warmup, *seq.measured)]
    assert len(prompts) == 55 and len(set(prompts)) == 55
    tight = TokenSpace(low=0, high=10)
    with pytest.raises(ValueError, match="distinct prompts"):
        build_sequence(workload, Point(concurrency=4), 9, Warmup(requests=5), tight)


def test_random_lengths_follow_the_distribution() -> None:
    workload = Workload.model_validate(
        {
            "random": {
                "inputTokens": {"distribution": "uniform", "mean": 100, "min": 50, "max": 150},
                "outputTokens": {"distribution": "lognormal", "mean": 64, "stddev": 32, "max": 300},
                "requestsPerConcurrency": 100,
            }
        }
    )
    seq = build_sequence(workload, Point(concurrency=4), 1, Warmup(), SPACE)
    assert len(seq.measured) == 400
    inputs = [r.prompt_tokens for r in seq.measured]
    outputs = [r.max_tokens for r in seq.measured]
    assert min(inputs) >= 50 and max(inputs) <= 150
    assert all(len(r.prompt) == r.prompt_tokens for r in seq.measured)
    assert min(outputs) >= 1 and max(outputs) <= 300
    assert 0.85 < (sum(outputs) / len(outputs)) / 64 < 1.15


def test_lengths_are_clipped() -> None:
    rng = rng_for(0, "t")
    normal = Length(distribution="normal", mean=10, stddev=100, min=5, max=12)
    values = [draw_length(rng, normal) for _ in range(500)]
    assert min(values) == 5 and max(values) == 12
    assert draw_length(rng, Length(mean=7)) == 7


def test_interference_schedule() -> None:
    workload = Workload.model_validate(
        {"interference": {"prompts": 3, "injectAfter": "1s", "injectInterval": "250ms"}}
    )
    seq = build_sequence(workload, Point(concurrency=1), 2, Warmup(requests=2), SPACE)
    stream, *injected = seq.measured
    assert stream.role == "stream" and stream.offset == 0.0 and stream.max_tokens == 1024
    assert [r.offset for r in injected] == [1.0, 1.25, 1.5]
    assert all(r.role == "inject" and r.prompt_tokens == 3500 for r in injected)
    assert len(seq.warmup) == 2


def test_shared_prefix_needs_the_prefix_count() -> None:
    workload, _ = _shared()
    with pytest.raises(ValueError, match="prefixes"):
        build_sequence(workload, Point(concurrency=8), 1, Warmup(), SPACE)


def test_zipf_popularity_shares_the_requests_by_weight() -> None:
    """Prefix k gets its 1 / k^s share of the requests (largest remainders, so the run holds
    exactly its expected counts); the order is the seed's, the counts are not."""
    workload, point = _shared(6, popularity={"zipf": {"s": 1.0}})
    seq = build_sequence(workload, point, 3, Warmup(), SPACE)
    counts = Counter(r.group for r in seq.measured)
    harmonic = sum(1 / k for k in range(1, 7))
    for group in range(6):
        assert abs(counts[group] - 200 / (group + 1) / harmonic) < 1
    assert sum(counts.values()) == 200
    other = build_sequence(workload, point, 4, Warmup(), SPACE)
    assert Counter(r.group for r in other.measured) == counts
    assert other.digest != seq.digest
    uniform = build_sequence(*_shared(6), 3, Warmup(), SPACE)
    assert uniform.digest != seq.digest
    assert [r.group for r in seq.warmup] == [r.group for r in uniform.warmup]  # all warmed


def test_explicit_weights_and_equal_weights_are_uniform() -> None:
    workload, point = _shared(4, popularity={"weights": [3, 1, 0, 1]})
    seq = build_sequence(workload, point, 3, Warmup(), SPACE)
    assert Counter(r.group for r in seq.measured) == {0: 120, 1: 40, 3: 40}
    equal = build_sequence(*_shared(4, popularity={"weights": [2, 2, 2, 2]}), 3, Warmup(), SPACE)
    assert equal.digest == build_sequence(*_shared(4), 3, Warmup(), SPACE).digest
