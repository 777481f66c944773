"""One way to write a share and a latency, everywhere: tables, progress lines, the loadgen."""

from loadgen_documents import make_result, make_rows

from kvbench.cli.loadgen import outcome_line
from kvbench.report.formats import milliseconds, percent


def test_percent_and_milliseconds() -> None:
    assert (percent(None), milliseconds(None)) == ("-", "-")
    assert percent(0.5549) == "55.5 %" and percent(1.0) == "100.0 %"
    assert milliseconds(0.0456) == "46" and milliseconds(1.2346) == "1,235"


def test_the_loadgen_line_quotes_the_reported_clock() -> None:
    result = make_result(make_rows(40))
    s = result.summary
    line = outcome_line(result)
    assert line.startswith(f"40 requests, {s.errors} errors, hit rate ")
    assert f"hit rate {percent(s.hit_rates.request_hit_rate)} (requests) / - (tokens" in line
    assert f"TTFT p50 {milliseconds(s.wall.ttft.p50)} ms (wall clock)" in line
    assert "CLIENT-BOUND" not in line
    bound = result.model_copy(
        update={"client": result.client.model_copy(update={"client_bound": True})}
    )
    assert outcome_line(bound).endswith(", CLIENT-BOUND")
