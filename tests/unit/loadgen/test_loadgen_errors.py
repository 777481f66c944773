"""A failed run's commonest error, worded as a person reads it, and the warning of a run
without a single success."""

import json

from kvbench.loadgen.errors import commonest_error, error_message
from kvbench.loadgen.records import RequestRecord
from kvbench.loadgen.summary import summarize_records, warnings


def _failed(index: int, kind: str, error: str, phase: str = "measured") -> RequestRecord:
    return RequestRecord(
        phase=phase, index=index, endpoint="e", due=0, start=0, end=1, error_kind=kind, error=error
    )


def _ok(index: int) -> RequestRecord:
    return RequestRecord(phase="measured", index=index, endpoint="e", due=0, start=0, end=1)


def _vllm_400(message: str) -> str:
    body = {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}
    return f"HTTP 400: {json.dumps(body)}"


def test_an_http_error_is_its_status_and_the_message_of_its_body() -> None:
    assert (
        error_message(_failed(0, "http", _vllm_400("Token id 40012 is out of vocabulary")))
        == "HTTP 400 Token id 40012 is out of vocabulary"
    )
    assert error_message(_failed(0, "http", "HTTP 502: Bad\n gateway")) == "HTTP 502 Bad gateway"
    stream = json.dumps({"message": "Token id 40012 is out of vocabulary", "code": 400})
    assert (
        error_message(_failed(0, "stream", stream))
        == "HTTP 400 in the stream: Token id 40012 is out of vocabulary"
    )
    uncoded = json.dumps({"message": "engine dead"})
    assert error_message(_failed(0, "stream", uncoded)) == "in the stream: engine dead"
    assert error_message(_failed(0, "timeout", "request timed out")) == "request timed out"


def test_the_commonest_error_counts_messages_that_differ_only_in_numbers_as_one() -> None:
    records = [
        _failed(0, "http", _vllm_400("Token id 40012 is out of vocabulary")),
        _failed(1, "timeout", "request timed out"),
        _failed(2, "http", _vllm_400("Token id 51234 is out of vocabulary")),
        _failed(3, "timeout", "request timed out", phase="warmup"),
        _failed(4, "timeout", "request timed out", phase="warmup"),
        _ok(5),
    ]
    common = commonest_error(records)
    assert common is not None
    assert (common.message, common.count, common.failed, common.requests) == (
        "HTTP 400 Token id 40012 is out of vocabulary",
        2,
        3,
        4,
    )
    assert commonest_error([_ok(0), _failed(1, "timeout", "x", phase="warmup")]) is None


def test_a_run_without_a_success_says_nothing_was_measured() -> None:
    refused = summarize_records([_failed(i, "http", "HTTP 400: no") for i in range(3)], None, 1.0)
    half = summarize_records([_failed(0, "http", "HTTP 400: no"), _ok(1)], None, 1.0)
    said = [w for w in warnings(refused, [], 1.0, None) if "no measured request succeeded" in w]
    assert len(said) == 1
    assert not any("no measured request succeeded" in w for w in warnings(half, [], 1.0, None))
