"""Article 000's chunk-size test: one long decoding stream, then long prompts injected.

The stream is sent at offset 0 and each prompt at `injectAfter + k * injectInterval` (server
seconds); the stream's inter-token gaps are the result, so all of them run at once whatever
the point's concurrency.
"""

from kvbench.api.units import parse_duration
from kvbench.api.workload import InterferenceWorkload
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload.request import Request, Sequence
from kvbench.loadgen.workload.tokens import render_text, rng_for, token_ids

__all__ = ["interference_sequence"]


def interference_sequence(
    spec: InterferenceWorkload, seed: int, warmups: int, space: TokenSpace, text: bool
) -> Sequence:
    """Warm-ups shaped like the injected prompts, then the stream and the injections."""
    rng = rng_for(seed, "interference")

    def prompt(n: int) -> tuple[int, ...] | str:
        ids = token_ids(rng, n, space)
        return render_text(ids) if text else tuple(ids)

    warm = [
        Request(
            "warmup", i, prompt(spec.prompt_tokens), spec.prompt_tokens, spec.prompt_output_tokens
        )
        for i in range(warmups)
    ]
    after, interval = parse_duration(spec.inject_after), parse_duration(spec.inject_interval)
    measured = [
        Request(
            "measured",
            0,
            prompt(spec.stream_input_tokens),
            spec.stream_input_tokens,
            spec.stream_output_tokens,
            role="stream",
            offset=0.0,
        )
    ]
    measured += [
        Request(
            "measured",
            k + 1,
            prompt(spec.prompt_tokens),
            spec.prompt_tokens,
            spec.prompt_output_tokens,
            role="inject",
            offset=after + k * interval,
        )
        for k in range(spec.prompts)
    ]
    return Sequence(warmup=warm, measured=measured)
