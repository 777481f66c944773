"""Fixtures of the load generator's proof tests: fake servers, simulators, run configs."""

from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import Behaviour, FakeOpenAI
from loadgen_helpers import Sim


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture
def make_fake() -> Iterator[Any]:
    servers: list[FakeOpenAI] = []

    def make(behaviour: Behaviour) -> FakeOpenAI:
        servers.append(FakeOpenAI(behaviour=behaviour).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def start_sim() -> Iterator[Any]:
    sims: list[Sim] = []

    def start(name: str, *flags: str) -> Sim:
        sims.append(Sim(name, *flags))
        return sims[-1]

    yield start
    for sim in sims:
        sim.stop()
