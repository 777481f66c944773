"""HTTP routes of ``kvbench sim``: vLLM's OpenAI-compatible API over the simulated engine.

Routes (as vLLM serves them):

- ``POST /v1/completions`` (prompt as text or token ids) and ``POST /v1/chat/completions``,
  both with ``stream`` (SSE ``data: {...}`` events, ``stream_options.include_usage``
  adds a final chunk with ``choices: []`` and ``usage``, then ``data: [DONE]``);
- ``POST /tokenize`` (a prompt or chat messages; ``{"count", "max_model_len", "tokens",
  "token_strs"}``), which vllm-router's ``kv_aware`` policy calls on every worker to
  learn a request's token ids (after ``/v1/completions/render``, which vLLM serves only
  with ``VLLM_ENABLE_SCALE_OUT_ENDPOINTS=1`` and the simulator not at all);
- ``GET /health``, ``GET /v1/models``, ``GET /version``, ``GET /metrics``;
- ``POST /reset_prefix_cache`` only when ``VLLM_SERVER_DEV_MODE=1`` (else 404).

``usage.prompt_tokens_details.cached_tokens`` is present only with
``--enable-prompt-tokens-details`` (else ``prompt_tokens_details`` is null);
``stream_options.continuous_usage_stats`` (with ``include_usage``) puts the running usage
in every chunk; ``logprobs`` (completions) and ``logprobs``/``top_logprobs`` (chat) are
answered in vLLM's shapes (``kvbench.sim.responses``).

Every error, aiohttp's 404, 405 and 413 included, is vLLM's body ``{"error": {"message",
"type", "param", "code"}}``, typed and worded as vLLM 0.31 words it
(``kvbench.sim.api_errors``, ``kvbench.sim.api_checks``). A client that goes away aborts
its request, streamed or not, as vLLM's ``with_cancellation`` does: its KV blocks and slot
are freed at once, it is not counted in ``vllm:request_success_total`` (vLLM counts only
requests the engine finished), and it logs one line. Request bodies and slow clients are
bounded by ``--max-request-body-bytes``, ``--request-body-timeout`` and
``--http-timeout-keep-alive`` (``kvbench.sim.http_body``, docs/simulator.md).

Simulator extension, ignored by OpenAI clients: the non-streaming body and the final
streamed chunk (the usage chunk when ``include_usage`` is set, otherwise the chunk with
``finish_reason``) carry a top-level object::

    "kvbench": {"worker": "<--worker-id or host:port>",
                "arrival_time": <virtual s>, "first_scheduled_time": <virtual s>,
                "first_token_time": <virtual s>, "token_times": [<virtual s>, ...],
                "finish_time": <virtual s>, "num_preemptions": <n>,
                "cached_tokens": <n>, "time_scale": <S>}

Virtual seconds count from the server's start on the engine clock; TTFT is
``first_token_time - arrival_time`` and inter-token latencies are the differences of
``token_times``, exact whatever the time scale. ``GET /version`` returns
``{"version": ..., "kvbench_sim": {...}}`` with the kvbench version, profile, time
scale, block count, block size, KV cache tokens, seed, prefix-caching hash algorithm,
tokenizer (a path, or null for the stand-in) and the bound KV events endpoint (null
without ``--kv-events-config``; with ``tcp://HOST:*`` it is how a runner learns the port).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from kvbench import __version__
from kvbench.sim import api_checks
from kvbench.sim.api_errors import ApiError, from_pydantic, json_error_middleware
from kvbench.sim.api_models import (
    ChatCompletionRequest,
    CompletionRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
)
from kvbench.sim.clock import EngineClock
from kvbench.sim.factory import SimEngine
from kvbench.sim.http_body import read_json
from kvbench.sim.kv_events import ZmqEventPublisher
from kvbench.sim.metrics import render_metrics
from kvbench.sim.request import SimRequest, greedy_salt
from kvbench.sim.responses import DONE, LogprobEncoder, ResponseWriter, error_event
from kvbench.sim.tokenizer import load_tokenizer

__all__ = ["VLLM_COMPAT_VERSION", "RunningServer", "SimServer", "start_server"]

logger = logging.getLogger("kvbench.sim.server")
http_logger = logging.getLogger("kvbench.sim.http")

VLLM_COMPAT_VERSION = "0.31.0+kvbench.sim"
_MASK64 = (1 << 64) - 1
_TEXT_IN_THREAD = 64 * 1024
"""Texts at least this long are tokenized in a worker thread, off the event loop."""
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_LINGERING_S = 2.0


class _OneLine(logging.Filter):
    """aiohttp logs an error with a traceback for every request it could not handle
    (malformed HTTP from a hostile client); one warning line says the same, as uvicorn's
    "Invalid HTTP request received." does."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = " ".join(f"{record.getMessage()}: {record.exc_info[1]!r}".split())
            record.args = ()
            record.exc_info = None
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


http_logger.addFilter(_OneLine())


class SimServer:
    """The aiohttp application around one ``SimEngine``."""

    def __init__(
        self,
        sim: SimEngine,
        *,
        dev_mode: bool | None = None,
        kv_events_endpoint: str | None = None,
    ) -> None:
        self.sim = sim
        self.config = sim.config
        self.tokenizer = load_tokenizer(self.config.tokenizer, sim.geometry.vocab_size)
        self.kv_events_endpoint = kv_events_endpoint
        self.runner = EngineClock(sim.core, time_scale=self.config.time_scale)
        self.worker = self.config.worker_id or ""
        self.dev_mode = (
            os.environ.get("VLLM_SERVER_DEV_MODE") == "1" if dev_mode is None else dev_mode
        )
        self.model_names = set(sim.served_model_names)
        self.default_model = sim.served_model_names[0]
        self._salts = itertools.count(1)
        _, self._render = render_metrics(
            sim.core.stats, sim.core.gauges,
            model_name=self.default_model, cache_info=sim.cache_config_info(),
        )  # fmt: skip
        self.body_limit = self.config.body_limit(sim.max_model_len)
        self.app = web.Application(
            client_max_size=self.body_limit, middlewares=[json_error_middleware]
        )
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/version", self.version)
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_post("/v1/chat/completions", self.chat_completions)
        self.app.router.add_post("/tokenize", self.tokenize)
        if self.dev_mode:
            self.app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        self.app.on_startup.append(self._on_startup)
        self.app.on_cleanup.append(self._on_cleanup)

    async def _on_startup(self, _app: web.Application) -> None:
        self.runner.start()

    async def _on_cleanup(self, _app: web.Application) -> None:
        await self.runner.stop()

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, _request: web.Request) -> web.Response:
        created = int(time.time())
        data = [
            {
                "id": name, "object": "model", "created": created, "owned_by": "vllm",
                "root": self.config.model, "parent": None,
                "max_model_len": self.sim.max_model_len, "permission": [],
            }
            for name in self.sim.served_model_names
        ]  # fmt: skip
        return web.json_response({"object": "list", "data": data})

    async def version(self, _request: web.Request) -> web.Response:
        sim, cap = self.sim, self.sim.capacity
        return web.json_response(
            {
                "version": VLLM_COMPAT_VERSION,
                "kvbench_sim": {
                    "kvbench_version": __version__, "profile": sim.profile.name,
                    "time_scale": self.config.time_scale, "num_gpu_blocks": cap.num_gpu_blocks,
                    "block_size": cap.block_size, "kv_cache_tokens": cap.num_tokens,
                    "seed": self.config.seed, "worker": self.worker,
                    "max_num_seqs": sim.max_num_seqs,
                    "max_num_batched_tokens": sim.max_num_batched_tokens,
                    "prefix_caching_hash_algo": self.config.prefix_caching_hash_algo,
                    "scheduler_reserve_full_isl": self.config.scheduler_reserve_full_isl,
                    "async_scheduling": self.config.async_scheduling,
                    "prefix_cache_stats_at": self.config.prefix_cache_stats_at,
                    "tokenizer": self.config.tokenizer,
                    "kv_events_endpoint": self.kv_events_endpoint,
                },
            }
        )  # fmt: skip

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=self._render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def reset_prefix_cache(self, _request: web.Request) -> web.Response:
        if self.sim.core.reset_prefix_cache():
            return web.Response(status=200)
        return ApiError("Failed to reset prefix cache: some blocks are still in use").response()

    def _check_model(self, model: str | None) -> str:
        if model is None:
            return self.default_model
        if model not in self.model_names:
            raise ApiError(
                f"The model `{model}` does not exist.",
                code=404, err_type="NotFoundError", param="model",
            )  # fmt: skip
        return model

    async def _read_json(self, request: web.Request) -> Any:
        return await read_json(
            request, limit=self.body_limit, timeout=self.config.request_body_timeout
        )

    async def _encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; a long text is tokenized in a thread, so that other
        clients' requests go on meanwhile (vLLM tokenizes in a thread pool too)."""
        if len(text) < _TEXT_IN_THREAD:
            return self.tokenizer.encode(text, add_special_tokens)
        return await asyncio.to_thread(self.tokenizer.encode, text, add_special_tokens)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        received = self.runner.now()
        limit = self.sim.max_model_len
        try:
            raw = await self._read_json(request)
            if isinstance(raw, dict):
                raw = api_checks.before_completion(raw)
            body = CompletionRequest.model_validate(raw)
            model = self._check_model(body.model)
            prompt = body.single_prompt()
            if prompt is None:
                raise ApiError("the simulator serves one prompt per request", param="prompt")
            max_output = body.max_tokens or 0
            api_checks.output_limit(limit, max_output, "max_tokens")
            is_text = isinstance(prompt, str)
            tokens = await self._encode(prompt) if is_text else list(prompt)  # type: ignore[arg-type]
            api_checks.prompt_length(len(tokens), limit, max_output, text=is_text)
            max_tokens = min(limit - len(tokens), max_output)
            api_checks.sampling(body, max_tokens)
        except ValidationError as exc:
            return from_pydantic(exc).response()
        except ApiError as exc:
            return exc.response()
        top = body.logprobs
        error = api_checks.engine_input(tokens, self.tokenizer.vocab_size, top)
        return await self._generate(request, body, model, tokens, max_tokens, top, error, received)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        received = self.runner.now()
        limit = self.sim.max_model_len
        try:
            raw = await self._read_json(request)
            if isinstance(raw, dict):
                raw = api_checks.before_chat(raw)
            body = ChatCompletionRequest.model_validate(raw)
            model = self._check_model(body.model)
            if body.max_completion_tokens is not None:
                requested, param = body.max_completion_tokens, "max_completion_tokens"
            else:
                requested, param = body.max_tokens, "max_tokens"
            max_output = requested or 0
            api_checks.output_limit(limit, max_output, param)
            text = self.tokenizer.render_chat((m.role, m.text()) for m in body.messages)
            tokens = await self._encode(text, add_special_tokens=False)
            api_checks.prompt_length(len(tokens), limit, max_output, text=True)
            room = limit - len(tokens)
            max_tokens = room if requested is None else min(room, requested)
            api_checks.sampling(body, max_tokens)
        except ValidationError as exc:
            return from_pydantic(exc).response()
        except ApiError as exc:
            return exc.response()
        top = body.top_logprobs if body.logprobs else None
        error = api_checks.engine_input(tokens, self.tokenizer.vocab_size, top)
        return await self._generate(request, body, model, tokens, max_tokens, top, error, received)

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's ``/tokenize``: the token ids the completion endpoints would compute."""
        try:
            raw = await self._read_json(request)
            body: TokenizeCompletionRequest | TokenizeChatRequest
            if isinstance(raw, dict) and "messages" in raw:
                body = TokenizeChatRequest.model_validate(raw)
                text = self.tokenizer.render_chat(
                    ((m.role, m.text()) for m in body.messages), body.add_generation_prompt
                )
            else:
                body = TokenizeCompletionRequest.model_validate(raw)
                text = body.prompt
            self._check_model(body.model)
        except ValidationError as exc:
            return from_pydantic(exc).response()
        except ApiError as exc:
            return exc.response()
        tokens = await self._encode(text, body.add_special_tokens)
        strs = [self.tokenizer.decode_one(t) for t in tokens] if body.return_token_strs else None
        response = TokenizeResponse(
            count=len(tokens), max_model_len=self.sim.max_model_len, tokens=tokens, token_strs=strs
        )
        return web.Response(body=response.model_dump_json(), content_type="application/json")

    def _salt(self, tokens: list[int], body: CompletionRequest | ChatCompletionRequest) -> int:
        """Greedy requests with equal prompts generate equal tokens; sampled ones do not."""
        salt = greedy_salt(tokens, body.seed)
        if body.seed is None and body.temperature is not None and body.temperature > 0:
            salt ^= next(self._salts) * 0x9E3779B97F4A7C15
        return salt & _MASK64

    def _abort(self, sim_request: SimRequest) -> None:
        """The client went away: free the request's blocks and slot, in one log line."""
        if sim_request.finished:
            return
        self.runner.abort(sim_request)
        logger.info("Request %s aborted: the client disconnected", sim_request.request_id)

    async def _generate(
        self,
        request: web.Request,
        body: CompletionRequest | ChatCompletionRequest,
        model: str,
        tokens: list[int],
        max_tokens: int,
        top_logprobs: int | None,
        error: ApiError | None,
        received: float,
    ) -> web.StreamResponse:
        """Run one request; ``error`` is a refusal of the engine's input processor, which
        vLLM sends inside the stream when the request streams. ``received`` is the virtual
        time the request reached the server, its arrival (``EngineClock.submit``): vLLM
        stamps arrival before tokenizing (``BaseRenderer.render_cmpl_async``), and the
        simulator's tokenizing, reading and validating take wall time that its clock does
        not model, so they count as part of the modelled frontend latency."""
        if error is not None:
            return await self._stream_error(request, error) if body.stream else error.response()
        chat = isinstance(body, ChatCompletionRequest)
        request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        options = body.stream_options
        include_usage = bool(body.stream and options and options.include_usage)
        vocab = self.tokenizer.vocab_size
        writer = ResponseWriter(
            chat=chat, request_id=request_id, model=model, worker=self.worker,
            time_scale=self.config.time_scale,
            include_details=self.config.enable_prompt_tokens_details,
            prompt_tokens=len(tokens),
            logprobs=(
                None if top_logprobs is None
                else LogprobEncoder(top_logprobs, self.tokenizer.decode_one, vocab)
            ),
            continuous_usage=include_usage and bool(options and options.continuous_usage_stats),
        )  # fmt: skip
        sim_request = SimRequest(
            request_id, tokens, max_tokens, arrival_time=0.0,
            salt=self._salt(tokens, body), vocab_size=vocab,
            answer_ids=self.tokenizer.answer_ids,
        )  # fmt: skip
        if body.stream:
            return await self._stream(request, sim_request, writer, include_usage, received)
        done = asyncio.get_running_loop().create_future()

        def notify(r: SimRequest) -> None:
            if r.finished and not done.done():
                done.set_result(None)

        sim_request.notify = notify
        self.runner.submit(sim_request, received)
        try:
            await done
        except asyncio.CancelledError:
            self._abort(sim_request)
            raise
        ids = sim_request.output_token_ids()
        texts = [self.tokenizer.decode_one(t) for t in ids] if writer.logprobs else []
        text = self.tokenizer.decode(ids)
        return web.Response(
            body=writer.body(sim_request, text, ids, texts), content_type="application/json"
        )

    async def _stream_error(self, request: web.Request, error: ApiError) -> web.StreamResponse:
        response = web.StreamResponse(headers=_SSE_HEADERS)
        try:
            await response.prepare(request)
            await response.write(error_event(error.body()))
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    async def _stream(
        self,
        request: web.Request,
        sim_request: SimRequest,
        writer: ResponseWriter,
        include_usage: bool,
        received: float,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=_SSE_HEADERS)
        try:
            await response.prepare(request)
        except ConnectionResetError:
            return response
        ready = asyncio.Event()
        released = [0, False]
        """Tokens and the end as of the step that was released: by the time this task runs
        the engine may have computed the next step (its tokens are due later)."""

        def notify(r: SimRequest) -> None:
            released[:] = [r.num_output_tokens, r.finished]
            ready.set()

        sim_request.notify = notify
        self.runner.submit(sim_request, received)
        decode = self.tokenizer.decode_one
        parts = [writer.role_chunk()] if writer.chat else []
        sent = 0
        try:
            while True:
                await ready.wait()
                ready.clear()
                upto, finished = released
                ids = sim_request.output_token_ids(sent, upto)
                sent += len(ids)
                last = [ids.pop()] if finished and ids else []
                if ids:
                    parts.extend(writer.content_chunks(ids, [decode(t) for t in ids]))
                if finished:
                    text = decode(last[0]) if last else ""
                    parts.append(writer.last_chunk(sim_request, last, text, not include_usage))
                    if include_usage:
                        parts.append(writer.usage_chunk(sim_request))
                    parts.append(DONE)
                if parts:
                    await response.write(b"".join(parts))
                    parts = []
                if finished:
                    break
            await response.write_eof()
        except asyncio.CancelledError:
            self._abort(sim_request)
            raise
        except ConnectionResetError:
            self._abort(sim_request)
        return response


@dataclass
class RunningServer:
    """A started server: its bound port and how to stop it."""

    server: SimServer
    runner: web.AppRunner
    host: str
    port: int
    publisher: ZmqEventPublisher | None = None

    async def close(self) -> None:
        await self.runner.cleanup()
        if self.publisher is not None:
            self.publisher.close()


async def start_server(
    server: SimServer, host: str, port: int, publisher: ZmqEventPublisher | None = None
) -> RunningServer:
    """Bind and start serving (port 0 picks a free port); returns the bound port.

    A client that disconnects cancels its handler (``handler_cancellation``), which aborts
    its request. aiohttp's keep-alive timer starts when a connection opens and again after
    each response, and closes a connection still waiting for a complete request: the idle
    timeout of vLLM's uvicorn, and the header timeout uvicorn lacks. After a refusal that
    left a body unread (413, 408, a wrong content type) aiohttp reads and drops the rest
    for up to ``_LINGERING_S``, so that the client, still sending, gets the answer instead
    of a reset; a server shutting down waits for that too."""
    app_runner = web.AppRunner(
        server.app, access_log=None, handle_signals=False, handler_cancellation=True,
        keepalive_timeout=server.config.http_timeout_keep_alive, logger=http_logger,
        lingering_time=_LINGERING_S,
    )  # fmt: skip
    await app_runner.setup()
    site = web.TCPSite(app_runner, host, port, backlog=2048, reuse_address=True)
    await site.start()
    bound = app_runner.addresses[0][1]
    if not server.worker:
        server.worker = f"{host}:{bound}"
    return RunningServer(server, app_runner, host, bound, publisher)
