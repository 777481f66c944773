"""vLLM v1's FCFS scheduler: one token budget per step shared by decodes and prefill chunks.

From ``vllm/v1/core/sched/scheduler.py`` (FCFS policy):

1. Running requests first, in order: each gets ``min(remaining, budget)`` tokens (a
   decode needs one, an unfinished prefill a chunk). When its blocks cannot be
   allocated, the newest running request is preempted (``running.pop()``): its blocks
   are freed (they stay cached), ``num_computed_tokens`` drops to 0 and it goes back to
   the front of the waiting queue; if the victim is the request itself, scheduling of
   running requests stops.
2. Waiting requests only if nobody was preempted this step, while the budget lasts and
   fewer than ``max_num_seqs`` run: prefix-cache lookup, then allocation of the chunk
   (chunked prefill is on), admitted only if the whole sequence fits when
   ``scheduler_reserve_full_isl`` is on (vLLM's default); a request that does not fit
   stops the loop (FCFS), and waiting requests never preempt. The lookup enters the
   prefix-cache statistics once, at admission (vLLM since #48860), or at every lookup
   (vLLM 0.25). Until its first output token a request reports the cached tokens of its
   latest admission (vLLM sets ``prefill_stats`` at each lookup until then), so one
   preempted before its first token reports what its re-admission found.
3. After the step a request whose computed tokens reach its length samples one token;
   it finishes at ``max_tokens`` or at ``max_model_len``. With async scheduling (vLLM's
   default, ``AsyncScheduler``) the next step was scheduled before this step's outputs
   came back, so a finished request's blocks return to the pool only after that next
   decision: ``update_from_output`` holds them until ``release_finished``.
"""

from __future__ import annotations

import contextlib
from collections import deque

from kvbench.sim.kv_cache import KVCacheManager
from kvbench.sim.request import FinishReason, RequestStatus, SimRequest

__all__ = ["Batch", "Scheduler"]


class Batch:
    """What one step computes, plus the numbers the cost model needs."""

    __slots__ = (
        "attention_pairs",
        "context_tokens",
        "num_preempted",
        "num_tokens",
        "requests",
        "tokens",
    )

    def __init__(self) -> None:
        self.requests: list[SimRequest] = []
        self.tokens: list[int] = []
        self.num_tokens = 0
        self.context_tokens = 0
        self.attention_pairs = 0.0
        self.num_preempted = 0

    def add(self, request: SimRequest, num_new: int, num_computed: int) -> None:
        self.requests.append(request)
        self.tokens.append(num_new)
        self.num_tokens += num_new
        self.context_tokens += num_computed + num_new
        self.attention_pairs += num_new * num_computed + num_new * (num_new + 1) * 0.5


class Scheduler:
    """Waiting queue, running list and the per-step scheduling decision."""

    def __init__(
        self,
        kv: KVCacheManager,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        reserve_full_isl: bool = True,
        stats_at_lookup: bool = False,
        hold_finished: bool = False,
    ) -> None:
        self.kv = kv
        self.reserve_full_isl = reserve_full_isl
        self.stats_at_lookup = stats_at_lookup
        self.hold_finished = hold_finished
        self._held: list[SimRequest] = []
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.num_preemptions = 0

    def add_request(self, request: SimRequest) -> None:
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _preempt(self, request: SimRequest) -> None:
        self.kv.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def schedule(self, now: float) -> Batch:
        """Decide the next step (see the module docstring); may preempt."""
        kv = self.kv
        batch = Batch()
        budget = self.max_num_batched_tokens
        running = self.running
        limit = self.max_model_len - 1
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            request = running[i]
            computed = request.num_computed_tokens
            num_new = request.num_prompt_tokens + request.num_output_tokens - computed
            if num_new > budget:
                num_new = budget
            if num_new > limit - computed:
                num_new = limit - computed
            if num_new <= 0:
                i += 1
                continue
            scheduled = True
            while not kv.allocate_slots(request, num_new):
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                batch.num_preempted += 1
                if victim is request:
                    scheduled = False
                    break
            if not scheduled:
                break
            batch.add(request, num_new, computed)
            budget -= num_new
            i += 1

        if not preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < self.max_num_seqs:
                request = waiting[0]
                hit_blocks, num_hit = kv.get_computed_blocks(request)
                if self.stats_at_lookup:
                    kv.record_prefix_cache_stats(request, num_hit)
                num_new = request.num_tokens - num_hit
                if num_new > budget:
                    num_new = budget
                if not kv.allocate_slots(
                    request, num_new, num_hit, hit_blocks, self.reserve_full_isl
                ):
                    break
                if not self.stats_at_lookup:
                    kv.record_prefix_cache_stats(request, num_hit)
                waiting.popleft()
                running.append(request)
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_hit
                if request.num_output_tokens == 0:
                    request.num_cached_tokens = num_hit
                if request.first_scheduled_time is None:
                    request.first_scheduled_time = now
                batch.add(request, num_new, num_hit)
                budget -= num_new
        return batch

    def update_from_output(
        self, batch: Batch, now: float
    ) -> tuple[list[SimRequest], list[SimRequest]]:
        """Advance computed tokens, sample where due; returns (got a token, finished)."""
        produced: list[SimRequest] = []
        finished: list[SimRequest] = []
        max_model_len = self.max_model_len
        for request, num_new in zip(batch.requests, batch.tokens, strict=True):
            if request.status is RequestStatus.FINISHED:
                continue  # aborted while its step ran (a long step on a shared GPU)
            request.num_computed_tokens += num_new
            num_tokens = request.num_prompt_tokens + request.num_output_tokens
            if request.num_computed_tokens < num_tokens:
                continue
            request.num_output_tokens += 1
            request.token_times.append(now)
            if request.first_token_time is None:
                request.first_token_time = now
            produced.append(request)
            if request.num_output_tokens >= request.max_tokens or num_tokens + 1 >= max_model_len:
                self._finish(request, now, FinishReason.LENGTH, hold=self.hold_finished)
                finished.append(request)
        if finished:
            self.running = [r for r in self.running if r.status is not RequestStatus.FINISHED]
        return produced, finished

    def release_finished(self) -> None:
        """Free the blocks of requests that finished in the last step (see step 3 above)."""
        for request in self._held:
            self.kv.free(request)
        self._held.clear()

    def _finish(
        self, request: SimRequest, now: float, reason: FinishReason, *, hold: bool = False
    ) -> None:
        if hold:
            self._held.append(request)
        else:
            self.kv.free(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
        request.finish_time = now

    def abort(self, request: SimRequest, now: float) -> bool:
        """Drop an unfinished request (client went away); True if it was still queued."""
        if request.status is RequestStatus.FINISHED:
            return False
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(request)
        self._finish(request, now, FinishReason.ABORT)
        return True
