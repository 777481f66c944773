"""A vLLM general plugin for `bench/real_vllm_steps.py --real`: logs every engine step to
/tmp/steptrace-<pid>.tsv when `update_from_output` receives it. Columns: monotonic time,
scheduled tokens, scheduled requests, decoding requests (one token), context tokens after
the step, waiting requests; then where a step's time went, to tell a stalled step's cause:
milliseconds in `Scheduler.schedule`, milliseconds of Python garbage collection and
collections of generation 2 in this process since the last row, requests preempted and
requests newly admitted by the schedule calls since the last row (under async scheduling,
the next step's), and the running requests after the step. Put this folder on PYTHONPATH;
vLLM finds the plugin through its entry point. KVBENCH_STEPTRACE_NO_GC=1 also turns
Python's collector off in every process that loads the plugin (a check of whether
collections stall steps). The per-step Python loop slows an H200 server by about 12 %. Rows
are written 50 at a time: the last ones of a server's life are lost (send it more requests
after the window that matters)."""

import gc
import os
import time


class _Spent:
    """Time accumulated between two rows, by what spent it."""

    def __init__(self) -> None:
        self.schedule = self.gc = 0.0
        self.full_collections = 0
        self.preempted = self.admitted = 0
        self._gc_began = 0.0

    def on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
            return
        self.gc += time.perf_counter() - self._gc_began
        self.full_collections += info.get("generation") == 2

    def row_and_reset(self) -> str:
        row = (
            f"\t{1000 * self.schedule:.3f}\t{1000 * self.gc:.3f}\t{self.full_collections}"
            f"\t{self.preempted}\t{self.admitted}"
        )
        self.__init__()
        return row


def register() -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    if getattr(Scheduler, "_kvbench_traced", False):
        return
    spent = _Spent()
    gc.callbacks.append(spent.on_gc)
    if os.environ.get("KVBENCH_STEPTRACE_NO_GC") == "1":
        gc.disable()
    original_update = Scheduler.update_from_output
    original_schedule = Scheduler.schedule
    rows: list[str] = []
    path = f"/tmp/steptrace-{os.getpid()}.tsv"

    def schedule(self, *args, **kwargs):
        began = time.perf_counter()
        output = original_schedule(self, *args, **kwargs)
        spent.schedule += time.perf_counter() - began
        spent.preempted += len(getattr(output, "preempted_req_ids", None) or ())
        spent.admitted += len(getattr(output, "scheduled_new_reqs", None) or ())
        return output

    def traced(self, scheduler_output, model_runner_output):
        now = time.monotonic()
        scheduled = scheduler_output.num_scheduled_tokens
        decodes = sum(1 for n in scheduled.values() if n == 1)
        context = sum(self.requests[r].num_computed_tokens for r in scheduled if r in self.requests)
        result = original_update(self, scheduler_output, model_runner_output)
        rows.append(
            f"{now:.6f}\t{scheduler_output.total_num_scheduled_tokens}\t"
            f"{len(scheduled)}\t{decodes}\t{context}\t{len(self.waiting)}"
            f"{spent.row_and_reset()}\t{len(self.running)}\n"
        )
        if len(rows) >= 50:
            with open(path, "a") as f:
                f.writelines(rows)
            rows.clear()
        return result

    Scheduler.schedule = schedule
    Scheduler.update_from_output = traced
    Scheduler._kvbench_traced = True
