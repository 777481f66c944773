"""What balanced the Service arm (kube-proxy's mode) is in the report and held by `kvbench
compare`: two sides balanced differently are flagged (the record: tests/unit/runner)."""

import io
from pathlib import Path

from report_builders import example, record, store_of
from rich.console import Console

from kvbench.api import Point, RunRecord, ServiceBalancing
from kvbench.report import compare_table, compare_warnings, render_report, side_of
from kvbench.runner.cluster.local.cluster import LOCAL_BALANCING

P7 = Point(prefixes=7, concurrency=8)
IPTABLES = ServiceBalancing(
    mode="iptables", source="ConfigMap kube-system/kube-proxy, config.conf (mode unset)"
)
IPVS = ServiceBalancing(mode="ipvs", scheduler="rr", source="ConfigMap kube-system/kube-proxy")
UNKNOWN = ServiceBalancing(mode="unknown", source="ConfigMap kube-system/kube-proxy: absent")


def _records(balancing: ServiceBalancing | None) -> list[RunRecord]:
    runs = [record(t - 1, P7, t, request_hit_rate=0.5) for t in (1, 2, 3)]
    return [r.model_copy(update={"service_balancing": balancing}) for r in runs]


def _side(tmp: Path, balancing: ServiceBalancing | None):
    store = store_of(tmp, example("prefix-cache-service.yaml"), _records(balancing))
    return side_of(tmp.name, store, None)


def test_compare_flags_sides_whose_service_balanced_differently(tmp_path: Path) -> None:
    warnings = compare_warnings(_side(tmp_path / "a", IPTABLES), _side(tmp_path / "b", IPVS))
    assert warnings == [
        "Service balancing differ: A random per connection; B round robin per connection"
    ]


def test_compare_flags_a_side_whose_balancing_is_unknown(tmp_path: Path) -> None:
    warnings = compare_warnings(_side(tmp_path / "a", IPTABLES), _side(tmp_path / "b", UNKNOWN))
    assert warnings == ["Service balancing differ: A random per connection; B unknown"]


def test_the_local_stand_in_balances_as_iptables_does(tmp_path: Path) -> None:
    """Both pick a random worker per connection: nothing to flag."""
    a, b = _side(tmp_path / "a", IPTABLES), _side(tmp_path / "b", LOCAL_BALANCING)
    assert compare_warnings(a, b) == []


def test_results_from_before_the_record_had_it_are_not_flagged(tmp_path: Path) -> None:
    assert compare_warnings(_side(tmp_path / "a", IPVS), _side(tmp_path / "b", None)) == []


def test_the_report_says_what_balanced_the_service_and_where_it_was_read(tmp_path: Path) -> None:
    store = store_of(tmp_path, example("prefix-cache-service.yaml"), _records(IPVS))
    console = Console(record=True, width=300, file=io.StringIO())
    render_report(store, console, tmp_path)
    assert (
        "Service balancing (arm service, 3 runs): round robin per connection, by kube-proxy "
        "mode ipvs, scheduler rr (ConfigMap kube-system/kube-proxy)"
    ) in console.export_text()


def _caption(a, b) -> str:
    console = Console(record=True, width=300, file=io.StringIO())
    console.print(compare_table(a, b))
    return next(line for line in console.export_text().splitlines() if "Service bal" in line)


def test_compare_shows_each_sides_balancing(tmp_path: Path) -> None:
    a, b = _side(tmp_path / "a", IPTABLES), _side(tmp_path / "b", None)
    caption = _caption(a, b)
    assert "Service balancing: A random per connection; B not recorded" in caption
