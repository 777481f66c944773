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
``--enable-prompt-tokens-details`` (else ``prompt_tokens_details`` is null). Errors use
vLLM's body ``{"error": {"message", "type", "param", "code"}}``: 400 BadRequestError for
bad JSON, invalid fields or prompts too long for ``--max-model-len``; 404 NotFoundError
for an unknown model, as vLLM answers.

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
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from kvbench import __version__
from kvbench.sim.api_models import (
    ChatCompletionRequest,
    CompletionRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
)
from kvbench.sim.clock import EngineClock
from kvbench.sim.factory import SimEngine
from kvbench.sim.kv_events import ZmqEventPublisher
from kvbench.sim.metrics import render_metrics
from kvbench.sim.request import SimRequest
from kvbench.sim.responses import DONE, ResponseWriter, error_body
from kvbench.sim.tokenizer import load_tokenizer

__all__ = ["VLLM_COMPAT_VERSION", "RunningServer", "SimServer", "start_server"]

logger = logging.getLogger("kvbench.sim.server")

VLLM_COMPAT_VERSION = "0.31.0+kvbench.sim"
_MASK64 = (1 << 64) - 1


class _BadRequest(Exception):
    def __init__(self, message: str, err_type: str = "BadRequestError", code: int = 400):
        super().__init__(message)
        self.err_type = err_type
        self.code = code


def _error(exc: _BadRequest) -> web.Response:
    return web.Response(
        status=exc.code, body=error_body(str(exc), exc.err_type, exc.code),
        content_type="application/json",
    )  # fmt: skip


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


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
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
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
        return _error(_BadRequest("Failed to reset prefix cache: some blocks are still in use"))

    def _check_model(self, model: str | None) -> str:
        if model is None:
            return self.default_model
        if model not in self.model_names:
            raise _BadRequest(
                f"The model `{model}` does not exist.", err_type="NotFoundError", code=404
            )
        return model

    def _check_length(self, num_tokens: int, max_tokens: int | None) -> int:
        limit = self.sim.max_model_len
        if num_tokens >= limit:
            raise _BadRequest(
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {num_tokens} input tokens. Please reduce the length of the "
                f"input messages."
            )
        if max_tokens is None:
            return limit - num_tokens
        if num_tokens + max_tokens > limit:
            raise _BadRequest(
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                f"model's maximum context length is {limit} tokens and your request has "
                f"{num_tokens} input tokens ({max_tokens} > {limit} - {num_tokens})."
            )
        return max_tokens

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = CompletionRequest.model_validate_json(await request.read())
            model = self._check_model(body.model)
            prompt = body.prompt
            if isinstance(prompt, str):
                tokens = self.tokenizer.encode(prompt)
            else:
                tokens = list(prompt)  # type: ignore[arg-type]
                vocab = self.tokenizer.vocab_size
                if any(not isinstance(t, int) or t < 0 or t >= vocab for t in tokens):
                    raise _BadRequest(f"Token id out of vocabulary (size {vocab}).")
            if not tokens:
                raise _BadRequest("The prompt cannot be empty.")
            max_tokens = self._check_length(len(tokens), body.max_tokens)
        except ValidationError as exc:
            return _error(_BadRequest(_validation_message(exc)))
        except _BadRequest as exc:
            return _error(exc)
        return await self._generate(request, body, model, tokens, max_tokens, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = ChatCompletionRequest.model_validate_json(await request.read())
            model = self._check_model(body.model)
            text = self.tokenizer.render_chat((m.role, m.text()) for m in body.messages)
            tokens = self.tokenizer.encode(text, add_special_tokens=False)
            max_tokens = self._check_length(
                len(tokens), body.max_completion_tokens or body.max_tokens
            )
        except ValidationError as exc:
            return _error(_BadRequest(_validation_message(exc)))
        except _BadRequest as exc:
            return _error(exc)
        return await self._generate(request, body, model, tokens, max_tokens, chat=True)

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's ``/tokenize``: the token ids the completion endpoints would compute."""
        try:
            raw = json.loads(await request.read())
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
        except json.JSONDecodeError as exc:
            return _error(_BadRequest(f"invalid JSON: {exc}"))
        except ValidationError as exc:
            return _error(_BadRequest(_validation_message(exc)))
        except _BadRequest as exc:
            return _error(exc)
        tokens = self.tokenizer.encode(text, add_special_tokens=body.add_special_tokens)
        strs = [self.tokenizer.decode_one(t) for t in tokens] if body.return_token_strs else None
        response = TokenizeResponse(
            count=len(tokens), max_model_len=self.sim.max_model_len, tokens=tokens, token_strs=strs
        )
        return web.Response(body=response.model_dump_json(), content_type="application/json")

    def _salt(self, tokens: list[int], body: CompletionRequest | ChatCompletionRequest) -> int:
        """Greedy requests with equal prompts generate equal tokens; sampled ones do not."""
        salt = hash((len(tokens), tuple(tokens[-64:]), body.seed or 0))
        if body.seed is None and body.temperature is not None and body.temperature > 0:
            salt ^= next(self._salts) * 0x9E3779B97F4A7C15
        return salt & _MASK64

    async def _generate(
        self,
        request: web.Request,
        body: CompletionRequest | ChatCompletionRequest,
        model: str,
        tokens: list[int],
        max_tokens: int,
        *,
        chat: bool,
    ) -> web.StreamResponse:
        request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        sim_request = SimRequest(
            request_id, tokens, max_tokens, arrival_time=0.0,
            salt=self._salt(tokens, body), vocab_size=self.tokenizer.vocab_size,
        )  # fmt: skip
        writer = ResponseWriter(
            chat=chat, request_id=request_id, model=model, worker=self.worker,
            time_scale=self.config.time_scale,
            include_details=self.config.enable_prompt_tokens_details,
        )  # fmt: skip
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return await self._stream(request, sim_request, writer, include_usage)
        done = asyncio.get_running_loop().create_future()

        def notify(r: SimRequest) -> None:
            if r.finished and not done.done():
                done.set_result(None)

        sim_request.notify = notify
        self.runner.submit(sim_request)
        try:
            await done
        except asyncio.CancelledError:
            self.runner.abort(sim_request)
            raise
        text = self.tokenizer.decode(sim_request.output_token_ids())
        return web.Response(body=writer.body(sim_request, text), content_type="application/json")

    async def _stream(
        self,
        request: web.Request,
        sim_request: SimRequest,
        writer: ResponseWriter,
        include_usage: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        ready = asyncio.Event()
        sim_request.notify = lambda _r: ready.set()
        self.runner.submit(sim_request)
        decode = self.tokenizer.decode_one
        parts = [writer.role_chunk()] if writer.chat else []
        sent = 0
        try:
            while True:
                await ready.wait()
                ready.clear()
                finished = sim_request.finished
                ids = sim_request.output_token_ids(sent)
                sent += len(ids)
                last = decode(ids.pop()) if finished and ids else ""
                parts.extend(writer.content_chunk(decode(t)) for t in ids)
                if finished:
                    parts.append(writer.last_chunk(sim_request, last, not include_usage))
                    if include_usage:
                        parts.append(writer.usage_chunk(sim_request))
                    parts.append(DONE)
                if parts:
                    await response.write(b"".join(parts))
                    parts = []
                if finished:
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            self.runner.abort(sim_request)
            raise
        await response.write_eof()
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
    """Bind and start serving (port 0 picks a free port); returns the bound port."""
    app_runner = web.AppRunner(server.app, access_log=None, handle_signals=False)
    await app_runner.setup()
    site = web.TCPSite(app_runner, host, port, backlog=2048, reuse_address=True)
    await site.start()
    bound = app_runner.addresses[0][1]
    if not server.worker:
        server.worker = f"{host}:{bound}"
    return RunningServer(server, app_runner, host, bound, publisher)
