"""Multi-turn conversations on the local back end: with session affinity every turn meets,
token for token, the cache its previous turn left (its prompt and the answer the server
gave, resent as a chat client resends it); through the Service a turn finds it only where
the random choice lands on the same worker."""

import copy

import pytest
import yaml

from conftest import ROOT, run_experiment
from kvbench.api import parse_experiment

pytestmark = pytest.mark.slow
BLOCK = 16


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    document = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "multi-turn.yaml").read_text()))
    spec = document["spec"]
    spec["workers"][0]["replicas"] = 2
    spec["routing"] = [
        {"name": "service", "service": {}},
        {"name": "session", "sessionAffinity": {}},
    ]
    spec["workload"]["conversation"].update(conversations=8, turns=3, thinkTime="0s")
    spec["load"]["concurrency"] = [2]
    return run_experiment(parse_experiment(document), tmp_path_factory.mktemp("chats"))


def _turns(ran, arm):
    record = ran.point(arm)
    rows = [r for r in ran.result(record).records() if r.phase == "measured"]
    assert len(rows) == 24 and all(r.ok for r in rows)
    return record, {(r.conversation, r.turn): r for r in rows}


def test_a_turn_meets_its_previous_turn_and_answer_on_the_same_worker(chats) -> None:
    record, turns = _turns(chats, "session")
    for (conversation, turn), row in turns.items():
        if turn == 1:
            continue
        before = turns[(conversation, turn - 1)]
        assert row.endpoint == before.endpoint and row.sim.worker == before.sim.worker
        assert before.prompt_tokens and before.output_tokens and row.prompt_tokens
        # all of the previous turn's computed KV: its prompt and every answer token but the
        # last (never computed), in whole blocks
        computed = before.prompt_tokens + before.output_tokens - 1
        assert row.cached_tokens == computed // BLOCK * BLOCK, (conversation, turn)
        assert row.prompt_tokens > computed
    by_turn = {t.turn: t for t in record.summary.turns}
    assert set(by_turn) == {1, 2, 3} and all(t.requests == 8 for t in by_turn.values())
    assert by_turn[3].token_hit_rate > by_turn[2].token_hit_rate > by_turn[1].token_hit_rate


def test_the_service_spreads_turns_and_loses_their_history(chats) -> None:
    service, turns = _turns(chats, "service")
    session = chats.point("session")
    moved = sum(  # turns served by another worker than their previous turn
        1
        for (c, t), row in turns.items()
        if t > 1 and row.sim.worker != turns[(c, t - 1)].sim.worker
    )
    assert moved > 0
    later = [t.token_hit_rate for t in service.summary.turns if t.turn > 1]
    best = [t.token_hit_rate for t in session.summary.turns if t.turn > 1]
    assert sum(later) < sum(best)
    assert service.digest == session.digest  # the same planned conversations
