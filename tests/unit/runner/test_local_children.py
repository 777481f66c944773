"""The local back end's registry of processes: a process this runner started counts as running
until it is reaped (so its exit code and its whole log are known when it is reported), a
failed start names its log and quotes its last meaningful lines, and a worker's KV-event
publisher is registered with it, for a later runner too."""

import asyncio
import sys
import time
from pathlib import Path

import pytest

from kvbench.runner.cluster.local.children import KvEventSource, LocalChildren, log_excerpt
from kvbench.runner.cluster.local.workers import wait_serving

# The main thread ends first (vLLM's API server does, while its other threads still shut down):
# the PID then reads as a zombie, though the process is neither ended nor reapable. The last
# thread writes the error once RELEASE exists, then exits with 3.
LEADER_EXITS_FIRST = """
import ctypes, os, sys, threading, time
from pathlib import Path

def last_thread():
    while not Path(sys.argv[1]).exists():
        time.sleep(0.01)
    print("Loading weights:  50%|#####     | 1/2 [00:01<00:01]", end="\\r", flush=True)
    print("Loading weights: 100%|##########| 2/2 [00:02<00:00]", flush=True)
    print("Traceback (most recent call last):", flush=True)
    print('  File "sampler.py", line 3, in <module>', flush=True)
    print("\\x1b[31mModuleNotFoundError: No module named 'flashinfer'\\x1b[0m", flush=True)
    print("\\n\\n", flush=True)
    os._exit(3)

threading.Thread(target=last_thread).start()
print("INFO starting", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def _until_zombie(pid: int) -> None:
    deadline = time.monotonic() + 30
    while _state(pid) != "Z":
        assert time.monotonic() < deadline, "the main thread never ended"
        await asyncio.sleep(0.01)


def test_a_start_that_fails_reports_its_exit_code_and_its_last_lines(tmp_path: Path) -> None:
    """Issue 19, defect 13: `exited (code None) before serving:` and nothing after it."""
    release = tmp_path / "release"
    script = tmp_path / "leader_exits_first.py"
    script.write_text(LEADER_EXITS_FIRST)
    children = LocalChildren(tmp_path / "children")
    log = tmp_path / "logs" / "gpu-0.log"

    async def scenario() -> str:
        child = children.spawn("gpu-0", "worker", [sys.executable, str(script), str(release)], log)
        await _until_zombie(child.pid)
        assert children.alive(child), "a zombie PID whose threads still run is not ended yet"
        assert children.exit_code(child) is None
        waiting = asyncio.create_task(
            wait_serving(children, child, "http://127.0.0.1:9/health", timeout=60)
        )
        release.touch()
        with pytest.raises(RuntimeError) as failed:
            await waiting
        assert children.exit_code(child) == 3
        return str(failed.value)

    message = asyncio.run(scenario())
    assert message.startswith(f"gpu-0 exited with code 3 before serving; the end of its log {log}")
    quoted = message.split(":\n", 1)[1].splitlines()
    assert quoted[-1] == "ModuleNotFoundError: No module named 'flashinfer'"
    assert quoted[-3] == "Traceback (most recent call last):"
    assert not [line for line in quoted if "%|" in line or not line.strip()], quoted


def test_a_start_killed_by_a_signal_says_which(tmp_path: Path) -> None:
    children = LocalChildren(tmp_path / "children")
    log = tmp_path / "gpu-1.log"
    script = "import os, signal; print('loading', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    child = children.spawn("gpu-1", "worker", [sys.executable, "-c", script], log)
    with pytest.raises(RuntimeError) as failed:
        asyncio.run(wait_serving(children, child, "http://127.0.0.1:9/health", timeout=60))
    assert str(failed.value) == (
        f"gpu-1 was killed by signal 9 (Killed) before serving; the end of its log {log}:\nloading"
    )


def test_log_excerpt_keeps_the_lines_worth_reading() -> None:
    text = (
        "INFO one\n"
        "\x1b[32mINFO two\x1b[0m\n"
        "Shards:   0%|          | 0/4 [00:00<?, ?it/s]\rShards:  25%|##5       | 1/4\r\n"
        "   \n"
        "Traceback (most recent call last):\n"
        "ValueError: bad\n"
        "\n\n"
    )
    assert log_excerpt(text, 3) == "INFO two\nTraceback (most recent call last):\nValueError: bad"
    assert log_excerpt("\n \n", 5) == ""


def test_log_excerpt_keeps_the_root_cause_above_the_last_lines() -> None:
    """vLLM's engine fails first; its API server's traceback then fills the end of the log."""
    engine = "(EngineCore_DP0 pid=7) ERROR [core.py:708]"
    text = "\n".join(
        [
            f"{engine} Traceback (most recent call last):",
            f'{engine}   File "sampler.py", line 3, in <module>',
            f"{engine} ModuleNotFoundError: No module named 'flashinfer'",
            *(f'  File "api_server.py", line {i}, in run' for i in range(20)),
            "RuntimeError: Engine core initialization failed. See root cause above.",
        ]
    )
    excerpt = log_excerpt(text, 4).splitlines()
    assert excerpt[:3] == [
        "exceptions further up:",
        f"{engine} ModuleNotFoundError: No module named 'flashinfer'",
        "last lines:",
    ]
    assert excerpt[-1] == "RuntimeError: Engine core initialization failed. See root cause above."
    assert len(excerpt) == 3 + 4


def test_log_tail_says_why_it_quotes_nothing(tmp_path: Path) -> None:
    children = LocalChildren(tmp_path / "children")
    log = tmp_path / "w.log"
    child = children.spawn("w", "worker", [sys.executable, "-c", "print()"], log)
    asyncio.run(children.wait_exit(child, 30))
    assert child.log_tail() == "(the log is empty)"
    log.write_text("\n\rLoading:  10%|#         | 1/10\r\n")
    assert child.log_tail() == "(the log holds only blank lines and progress bars)"
    log.unlink()
    assert child.log_tail() == f"(no log at {log})"
    asyncio.run(children.stop(child))


def test_a_workers_kv_event_publisher_is_registered_for_the_next_runner(tmp_path: Path) -> None:
    """Defect 15: a runner that adopts running workers must still find where they publish."""
    source = KvEventSource(host="127.0.0.5", port=41000, block_size=16, model="Qwen/Qwen3-0.6B")
    first = LocalChildren(tmp_path / "children")
    child = first.spawn(
        "gpu-0", "worker", [sys.executable, "-c", "pass"], tmp_path / "w.log", kv_events=source
    )
    adopted = LocalChildren(tmp_path / "children").get("gpu-0")
    assert adopted is not None and adopted.kv_events == source
    assert (source.endpoint, source.bind_endpoint) == ("tcp://127.0.0.5:41000", "tcp://*:41000")
    asyncio.run(first.stop(child))
