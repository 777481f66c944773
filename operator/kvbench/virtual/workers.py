"""A simulated worker without a server: `kvbench sim`'s engine, tokenizer and counters, fed the
requests the HTTP server would have made from the same bodies.

A virtual worker is built from the very command line the local back end gives a `kvbench sim`
process (`parse_sim_args`, `build_engine`), so a variant, a pool's profile and a start's seed
mean the same here; `admit` turns a load-generator request into the engine request the
server's completions handlers would (the same tokenizing, chat template, output limit and
salt), and `counters` reads what the server's `/metrics` page would have said.
"""

from __future__ import annotations

from collections.abc import Callable

from kvbench.loadgen.counters import PodCounters
from kvbench.loadgen.workload import Request
from kvbench.sim.args import parse_sim_args
from kvbench.sim.factory import SimEngine, build_engine
from kvbench.sim.gpu_share import InProcessGpu
from kvbench.sim.request import SimRequest, greedy_salt
from kvbench.sim.timing import TimingProfile
from kvbench.sim.tokenizer import Tokenizer, load_tokenizer

__all__ = ["VirtualWorker"]


class VirtualWorker:
    """One simulated server start: engine, tokenizer and metrics, on no clock of its own."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        profile: TimingProfile | None = None,
        gpus: dict[str, InProcessGpu] | None = None,
    ) -> None:
        """`argv`: `kvbench sim serve`'s arguments (from `serve` on); `profile` replaces the
        named timing profile (a fitted one, `kvbench predict`); `gpus` holds the shared GPUs
        of one start by their `--shared-gpu` name, where this worker takes its slot."""
        config, self.ignored_flags = parse_sim_args(argv)
        self.name = name
        gpu = None
        if config.shared_gpu is not None and config.shared_gpu_slot is not None:
            if gpus is None:
                raise ValueError(f"{name}: --shared-gpu without the start's shared GPUs")
            gpu = gpus.setdefault(config.shared_gpu, InProcessGpu()).member(config.shared_gpu_slot)
        self.engine: SimEngine = build_engine(config, profile=profile, gpu=gpu)
        self.engine.core.stats.observe_latencies = False  # no /metrics page to render
        self.config = config
        vocab = self.engine.geometry.vocab_size
        self.tokenizer: Tokenizer = load_tokenizer(config.tokenizer, vocab)
        self.model = self.engine.served_model_names[0]

    @property
    def kv_cache_tokens(self) -> int:
        return self.engine.capacity.num_tokens

    def counters(self) -> PodCounters:
        """The counters a scrape of this worker's `/metrics` would read now, taken from the
        engine's own tallies (what the page renders) rather than rendered and parsed."""
        core = self.engine.core
        gauges, stats = core.gauges(), core.stats
        values: dict[str, float | None] = {
            "prefix_cache_queries": float(gauges.prefix_queries),
            "prefix_cache_hits": float(gauges.prefix_hits),
            "preemptions": float(gauges.num_preemptions),
            "prompt_tokens": float(stats.prompt_tokens),
            "generation_tokens": float(stats.generation_tokens),
            "requests": float(sum(stats.request_success.values())),
        }
        return PodCounters(pod=self.name, values=values, kv_cache_tokens=self.kv_cache_tokens)

    def admit(
        self,
        request: Request,
        chat: list[tuple[str, str]] | None,
        notify: Callable[[SimRequest], None] | None = None,
    ) -> SimRequest:
        """The engine request for `request`, as the server makes it from the load generator's
        body: a completion's text or token ids, or a chat turn's messages (`chat`, rendered
        with the chat template); the output limit clipped to the context; the greedy salt.
        Raises ValueError where the server answers 400 (a prompt longer than the context)."""
        limit = self.engine.max_model_len
        if chat is not None:
            text = self.tokenizer.render_chat(chat)
            tokens = self.tokenizer.encode(text, add_special_tokens=False)
        elif isinstance(request.prompt, str):
            tokens = self.tokenizer.encode(request.prompt)
        else:
            tokens = list(request.prompt)
        if len(tokens) + request.max_tokens > limit:
            raise ValueError(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{request.max_tokens} output tokens and your prompt contains {len(tokens)} "
                "input tokens"
            )
        return SimRequest(
            f"{self.name}-{request.phase}-{request.index}",
            tokens,
            request.max_tokens,
            arrival_time=0.0,
            salt=greedy_salt(tokens, None),
            vocab_size=self.tokenizer.vocab_size,
            answer_ids=self.tokenizer.answer_ids,
            notify=notify,
        )

    def answer_text(self, request: SimRequest) -> str:
        """The text a client reads from the stream: each token decoded on its own, joined."""
        decode = self.tokenizer.decode_one
        return "".join(decode(t) for t in request.output_token_ids())
