"""Prefix-affinity hashing and the arrival schedules."""

import asyncio
from collections import Counter

from kvbench.api.status import Point
from kvbench.loadgen.arrivals import Schedule, drive, measured_schedule, warmup_schedule
from kvbench.loadgen.config import PrefixAffinityTarget, UrlTarget
from kvbench.loadgen.routing import bounded_assignment, make_router
from kvbench.loadgen.workload import Request


def _req(index: int, group: int | None = None, offset: float | None = None) -> Request:
    return Request("measured", index, (1, 2), 2, 1, group=group, offset=offset)


def test_url_target_sends_everything_to_one_url() -> None:
    router = make_router(UrlTarget(url="http://svc:8000/"), "/v1/completions")
    routes = {router.route(_req(i, i % 3)) for i in range(10)}
    assert {(r.endpoint, r.url) for r in routes} == {
        ("http://svc:8000/", "http://svc:8000/v1/completions")
    }


def test_rendezvous_hashing_is_consistent() -> None:
    """Without a known group count: plain rendezvous hashing of each key."""
    pods = {f"pod-{i}": f"http://10.0.0.{i}:8000" for i in range(6)}
    router = make_router(PrefixAffinityTarget(pods=pods), "/v1/completions")
    owner = {g: router.route(_req(g, g)).endpoint for g in range(600)}
    assert all(router.route(_req(1000 + g, g)).endpoint == owner[g] for g in range(600))
    load = Counter(owner.values())
    assert set(load) == set(pods) and min(load.values()) > 60  # roughly even
    # removing one pod moves only the groups it owned
    del pods["pod-3"]
    smaller = make_router(PrefixAffinityTarget(pods=pods), "/v1/completions")
    moved = [g for g in range(600) if smaller.route(_req(g, g)).endpoint != owner[g]]
    assert moved and all(owner[g] == "pod-3" for g in moved)


def test_bounded_loads_keep_a_few_prefixes_balanced() -> None:
    pods = {f"pod-{i}": f"http://10.0.0.{i}:8000" for i in range(3)}
    target = PrefixAffinityTarget(pods=pods)
    plain = Counter(make_router(target, "/p").route(_req(g, g)).endpoint for g in range(12))
    bounded = make_router(target, "/p", groups=12)
    owners = {g: bounded.route(_req(100 + g, g)).endpoint for g in range(12)}
    assert Counter(owners.values()) == {p: 4 for p in pods}
    assert owners == bounded_assignment(12, list(pods)) == bounded.owners
    assert max(plain.values()) >= 4  # the plain hash is at best as even
    # 7 prefixes over 6 pods: one pod takes two, none takes more
    six = {f"p{i}": f"http://h{i}:1" for i in range(6)}
    assert max(Counter(bounded_assignment(7, list(six)).values()).values()) == 2


def test_requests_without_a_group_spread_over_pods() -> None:
    pods = {f"p{i}": f"http://h{i}:1" for i in range(3)}
    router = make_router(PrefixAffinityTarget(pods=pods), "/v1/completions")
    assert len({router.route(_req(i)).endpoint for i in range(60)}) == 3


def test_poisson_schedule_is_seeded_and_scaled() -> None:
    requests = [_req(i) for i in range(4000)]
    point = Point(concurrency=8, request_rate=10.0)
    a = measured_schedule(requests, point, 1, 1.0)
    b = measured_schedule(requests, point, 1, 1.0)
    c = measured_schedule(requests, point, 2, 1.0)
    assert a == b and a.offsets != c.offsets and a.kind == "poisson" and a.cap == 8
    assert a.offsets is not None and a.offsets[0] == 0.0
    mean_gap = a.offsets[-1] / (len(requests) - 1)
    assert 0.95 < mean_gap * 10.0 < 1.05
    fast = measured_schedule(requests, point, 1, 0.05)
    assert fast.offsets is not None
    assert all(abs(f - s * 0.05) < 1e-9 for f, s in zip(fast.offsets, a.offsets, strict=True))


def test_closed_loop_and_scheduled() -> None:
    closed = measured_schedule([_req(i) for i in range(5)], Point(concurrency=3), 1, 1.0)
    assert closed == Schedule("closed", cap=3)
    timed = measured_schedule(
        [_req(0, offset=0.0), _req(1, offset=2.0)], Point(concurrency=1), 1, 0.5
    )
    assert timed.kind == "scheduled" and timed.offsets == (0.0, 1.0) and timed.cap == 2
    assert warmup_schedule(Point(concurrency=4), scheduled=True).cap == 1
    assert warmup_schedule(Point(concurrency=4), scheduled=False).cap == 4


def _peak_in_flight(schedule: Schedule, n: int) -> tuple[int, list[int]]:
    in_flight = peak = 0
    order: list[int] = []

    async def send(request: Request, due: float) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        order.append(request.index)
        await asyncio.sleep(0.001)
        in_flight -= 1

    asyncio.run(drive([_req(i) for i in range(n)], schedule, send))
    return peak, order


def test_drive_respects_the_concurrency_cap() -> None:
    peak, order = _peak_in_flight(Schedule("closed", cap=3), 20)
    assert peak == 3 and order == list(range(20))
    peak, order = _peak_in_flight(Schedule("poisson", cap=2, offsets=(0.0,) * 10), 10)
    assert peak == 2 and order == list(range(10))
