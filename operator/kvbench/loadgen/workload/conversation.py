"""Multi-turn conversations: C conversations of T turns, each turn new user text.

What is planned, and digested, is the user side: every turn's text, the shared system prompt,
and the answer length asked for. The assistant side is whatever the server answers, taken
from the response when the next turn is sent (`loadgen.conversations`), as a chat client
resends it. Each request's `group` is its conversation, so affinity keeps a conversation on
one pod; warm-ups are single turns of their own, with the system prompt.
"""

from kvbench.api.workload import ConversationWorkload
from kvbench.loadgen.config import TokenSpace
from kvbench.loadgen.workload.request import ChatTurn, Phase, Request, Sequence
from kvbench.loadgen.workload.tokens import render_text, rng_for, token_ids

__all__ = ["conversation_sequence"]


def conversation_sequence(
    spec: ConversationWorkload, seed: int, warmups: int, space: TokenSpace
) -> Sequence:
    """Warm-up single turns, then the measured conversations turn by turn (conversation
    c, turn t is measured request c x turns + t - 1)."""
    system = None
    if spec.system_prompt_tokens:
        system = render_text(token_ids(rng_for(seed, "system"), spec.system_prompt_tokens, space))

    def turn(phase: Phase, index: int, conversation: int, number: int) -> Request:
        rng = rng_for(seed, "user", phase, conversation, number)
        return Request(
            phase=phase,
            index=index,
            prompt=render_text(token_ids(rng, spec.user_tokens, space)),
            prompt_tokens=spec.user_tokens,
            max_tokens=spec.assistant_tokens,
            group=conversation if phase == "measured" else None,
            chat=ChatTurn(conversation=conversation, turn=number, system=system),
        )

    warmup = [turn("warmup", i, i, 1) for i in range(warmups)]
    measured = [
        turn("measured", c * spec.turns + t - 1, c, t)
        for c in range(spec.conversations)
        for t in range(1, spec.turns + 1)
    ]
    return Sequence(warmup=warmup, measured=measured, groups=spec.conversations)
