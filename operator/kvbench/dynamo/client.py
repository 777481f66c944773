"""One completion through Dynamo's frontend, asking for `nvext` worker id and timing."""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx

from kvbench.dynamo.nvext import NVEXT_REQUEST, RequestOutcome, outcome_from_chunks, sse_data

__all__ = ["complete"]


async def complete(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    prompt: Sequence[int] | str,
    max_tokens: int,
    stream: bool = True,
) -> RequestOutcome:
    """POST /v1/completions (token ids or text) with `ignore_eos`, greedy, usage included."""
    body = {
        "model": model,
        "prompt": prompt if isinstance(prompt, str) else list(prompt),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": stream,
        "nvext": NVEXT_REQUEST,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
        async with client.stream("POST", f"{base_url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")
                raise httpx.HTTPStatusError(
                    f"HTTP {response.status_code}: {detail}",
                    request=response.request,
                    response=response,
                )
            lines = [line async for line in response.aiter_lines()]
        return outcome_from_chunks(sse_data(lines))
    response = await client.post(f"{base_url}/v1/completions", json=body)
    response.raise_for_status()
    return outcome_from_chunks([json.loads(response.text)])
