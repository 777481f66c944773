"""The result document: columns that give the rows back, microseconds, gzip, schema 2 only."""

import gzip
import json
import random
from pathlib import Path

import pytest
from loadgen_documents import make_record, make_result, make_rows, make_sim
from pydantic import ValidationError

from kvbench.loadgen.columns import RequestColumns, SimColumns
from kvbench.loadgen.records import RequestRecord, SimTiming
from kvbench.loadgen.results import (
    LoadgenResult,
    ResultError,
    read_result,
)


def test_the_columns_give_every_row_back() -> None:
    rng = random.Random(1)
    records = [make_record(i, rng) for i in range(6)]
    records[1] = records[1].model_copy(update={"sim": make_sim(rng)})
    records[4] = records[4].model_copy(update={"sim": make_sim(rng), "worker_id": 7})
    columns = RequestColumns.from_records(records)
    assert columns.sim is not None and columns.sim.rows == [1, 4]
    back = columns.records()
    assert [r.sim is not None for r in back] == [False, True, False, False, True, False]
    assert back[4].worker_id == 7 and back[4].sim is not None
    assert back[4].sim.itl == [0.012346, 0.0125]  # microseconds
    rounded = RequestColumns.from_records(back).records()
    assert rounded == back
    assert back[0].start == round(records[0].start, 6) and back[0].start != records[0].start
    assert [r.hit for r in back] == [r.hit for r in records]
    # a field added to the records must get a column, or it would be dropped silently
    assert set(RequestColumns.model_fields) == set(RequestRecord.model_fields)
    assert set(SimColumns.model_fields) == {"rows", *SimTiming.model_fields}


def test_columns_of_different_lengths_are_refused() -> None:
    data = json.loads(RequestColumns.from_records(make_rows(2)).model_dump_json(by_alias=True))
    data["start"].pop()
    with pytest.raises(ValidationError, match="different lengths"):
        RequestColumns.model_validate(data)


def test_the_document_is_columnar_gzip_and_schema_2() -> None:
    result = make_result(make_rows(30))
    encoded = result.encode()
    assert encoded[:2] == b"\x1f\x8b" and encoded == result.encode()  # no mtime inside
    text = gzip.decompress(encoded).decode()
    assert text == result.to_json() and "\n" not in text
    raw = json.loads(text)
    assert raw["schemaVersion"] == 2 and "runSummary" not in raw
    assert text.count('"endpoint"') == 1  # a key per column, not per request
    assert len(raw["requests"]["start"]) == 42 and isinstance(raw["requests"]["itl"][0], list)
    assert raw["counters"]["pods"] == [
        {"pod": "sim-0", "prefixCacheQueries": 0.0, "prefixCacheHits": 0.0, "preemptions": 0.0,
         "requests": 3.0, "promptTokens": 0.0, "generationTokens": 0.0}
    ]  # fmt: skip
    back = read_result(encoded)
    assert back == read_result(text.encode()) == result
    assert back.records() == result.records()


def _keys(value: object) -> set[str]:
    """Every key of a JSON document, at any depth."""
    if isinstance(value, dict):
        return set(value).union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


def test_end_to_end_latency_is_keyed_e2e_and_documents_keyed_e2E_still_read() -> None:
    rng = random.Random(3)
    rows = make_rows(4)
    rows[-1] = rows[-1].model_copy(update={"sim": make_sim(rng)})
    result = make_result(rows)
    raw = json.loads(result.to_json())
    assert ("e2e" in _keys(raw), "e2E" in _keys(raw)) == (True, False)
    assert [raw["requests"]["sim"]["e2e"], raw["summary"]["wall"]["e2e"]["count"]] == [
        [rows[-1].sim.e2e],
        sum(1 for r in rows if r.phase == "measured" and r.e2e is not None),
    ]
    old = result.to_json().replace('"e2e"', '"e2E"')
    assert old != result.to_json()
    assert read_result(old.encode()) == result


def test_save_and_load_by_suffix(tmp_path: Path) -> None:
    result = make_result(make_rows(5))
    packed, plain = tmp_path / "r.json.gz", tmp_path / "r.json"
    result.save(packed)
    result.save(plain)
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(plain.read_text())["kind"] == "LoadgenResult"
    assert LoadgenResult.load(packed) == LoadgenResult.load(plain) == result


def test_schema_1_and_strangers_are_refused_with_a_reason() -> None:
    old = json.loads(make_result(make_rows(2)).to_json())
    old["schemaVersion"] = 1
    with pytest.raises(ResultError, match=r"schema version 1: .* reads version 2 only"):
        read_result(json.dumps(old).encode())
    with pytest.raises(ResultError, match="not a LoadgenResult"):
        read_result(b'{"kind": "RunConfig"}')
    with pytest.raises(ResultError, match="gzip or JSON"):
        read_result(b"\x1f\x8b not gzip")
    with pytest.raises(ResultError, match="gzip or JSON"):
        read_result(b"<html>")


def test_a_run_of_1200_requests_fits_a_kubernetes_object() -> None:
    """Schema 1 wrote this run as rows of indented JSON, well over a MB."""
    result = make_result(make_rows(1200))
    rows = json.loads(result.to_json())
    rows["requests"] = [r.model_dump(mode="json", by_alias=True) for r in result.records()]
    schema_1 = len(json.dumps(rows, indent=1))
    assert schema_1 > 1_300_000
    assert len(result.encode()) < min(schema_1 / 4, 400_000)
