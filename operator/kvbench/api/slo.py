"""Service-level objectives: what a request must meet to count toward goodput.

The convention of `vllm bench serve --goodput` and aiperf's `--goodput`: a request is good when
it meets every objective set; goodput is good requests per second of the measured window. TPOT
is the request's mean gap after its first token, (e2e - TTFT) / (output tokens - 1), as both
tools compute it; `itl` is stricter, every gap of the request (what a reader of a stream
feels). Latencies are compared on the clock the run reports (the simulator's own under it).
"""

from pydantic import Field, model_validator

from kvbench.api.base import SpecModel
from kvbench.api.units import Duration, parse_duration

__all__ = ["OBJECTIVES", "Objectives"]

OBJECTIVES = ("ttft", "tpot", "itl", "e2e")


class Objectives(SpecModel):
    """Latency objectives per request; at least one."""

    model_config = SpecModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.ttft) || has(self.tpot) || has(self.itl) || has(self.e2e)",
                    "message": "slo needs at least one of ttft, tpot, itl, e2e",
                }
            ]
        }
    }

    ttft: Duration | None = Field(None, description="Time to first token, at most")
    tpot: Duration | None = Field(
        None, description="Mean time per output token after the first, at most"
    )
    itl: Duration | None = Field(None, description="Every gap between tokens, at most")
    e2e: Duration | None = Field(None, description="Request latency, first byte sent to last")

    @model_validator(mode="after")
    def _at_least_one(self) -> "Objectives":
        if not self.limits():
            raise ValueError("slo needs at least one of ttft, tpot, itl, e2e")
        return self

    def limits(self) -> dict[str, float]:
        """The objectives set, in seconds, in the order of `OBJECTIVES`."""
        return {
            name: parse_duration(value)
            for name in OBJECTIVES
            if (value := getattr(self, name)) is not None
        }

    @property
    def label(self) -> str:
        """ttft 500ms, tpot 50ms: the objectives as written."""
        return ", ".join(f"{name} {getattr(self, name)}" for name in self.limits())
