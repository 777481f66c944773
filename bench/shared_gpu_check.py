"""Workers sharing one GPU, real vLLM against the simulator: fit the timing profile on some
busy-worker counts of a measured results directory, predict the others.

The measured directory is `bench/real-vllm-experiments/real-vllm-shared-gpu-6w.yaml` run with
`kvbench run FILE --engine vllm --gpus 0` (six workers time-sliced on one H200; prefix affinity
gives each of P prefixes its own worker, so P workers are busy). The fit
(`kvbench.predict.fit_profile`) is in two stages: the step costs (the weights' bandwidth, the
attention's, the per-step overhead: only a shared GPU tells the first from the last) on ITL and
throughput at P in --fit; then the prefill FLOP/s and the frontend latency on the TTFT of one
request at a time, hits and misses (`real-vllm-h200-one-at-a-time.yaml`, given as --first-
token). Every run is then replayed in virtual time with the fitted profile, with the GPU shared
as the file says and, for comparison, with a GPU per worker (the simulator before GPU sharing).
Prints the table and the constants.

    .venv/bin/python bench/shared_gpu_check.py bench/results/real-vllm-shared-gpu-6w \
        --first-token bench/results/real-vllm-h200-one-at-a-time
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from kvbench.api import BenchmarkExperiment
from kvbench.predict.figures import Figures
from kvbench.predict.fit import FREE, SHARED_GPU_FREE, ParallelReplayer, base_profile, fit_profile
from kvbench.predict.measured import load_measured
from kvbench.sim.timing import resolve_profile

COLUMNS = ("ttft_p50", "itl_p50", "output_tokens_per_second")
STEP_COSTS = {
    n: SHARED_GPU_FREE[n] for n in ("bandwidth", "attention_bandwidth", "step_overhead_s")
}
FIRST_TOKEN = {n: FREE[n] for n in ("flops", "frontend_s")}


def _alone(experiment: BenchmarkExperiment) -> BenchmarkExperiment:
    """The experiment with a GPU per worker."""
    spec = experiment.spec
    pools = [
        p.model_copy(update={"simulation": p.simulation.model_copy(update={"workers_per_gpu": 1})})
        if p.simulation is not None
        else p
        for p in spec.workers
    ]
    return experiment.model_copy(update={"spec": spec.model_copy(update={"workers": pools})})


def _cell(name: str, measured: float | None, predicted: float | None) -> str:
    if measured is None or predicted is None:
        return "-"
    scale = 1 if name == "output_tokens_per_second" else 1000
    error = (predicted - measured) / measured
    return f"{measured * scale:7.1f} {predicted * scale:7.1f} {100 * error:+5.0f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measured", type=Path)
    parser.add_argument(
        "--fit",
        default="1,6",
        help="prefix counts (busy workers) whose ITL and throughput "
        "the step costs are fitted on (the ends: one busy worker and all six tell the step's "
        "shared GPU time from its host time best)",
    )
    parser.add_argument(
        "--first-token",
        type=Path,
        required=True,
        help="a results directory of one request "
        "at a time (hits and misses) whose TTFT the prefill and frontend costs are fitted on",
    )
    parser.add_argument(
        "--profile",
        help="the timing profile the fit starts from (default: the one the "
        "measured experiment's pools run with)",
    )
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    fit_on = {int(p) for p in args.fit.split(",")}
    first = load_measured(args.first_token)
    data = load_measured(args.measured)
    experiment = data.experiment
    runs = list(data.runs)
    steps = [r for r in runs if r.run.point.prefixes in fit_on]
    start = resolve_profile(args.profile) if args.profile else base_profile(experiment)
    with ProcessPoolExecutor(args.jobs) as pool:
        replayer = ParallelReplayer(pool)
        # The step costs from ITL and throughput, then the prefill and frontend from TTFT.
        stepped = fit_profile(
            experiment, steps, start, budget=args.budget,
            replayer=replayer, name="fitted-shared", free=STEP_COSTS,
            figures=("itl_p50", "output_tokens_per_second"),
        )  # fmt: skip
        result = fit_profile(
            first.experiment, first.runs, stepped.profile, budget=args.budget,
            replayer=replayer, name="fitted-shared", free=FIRST_TOKEN, figures=("ttft_p50",),
        )  # fmt: skip
        jobs = [(r.run, result.profile) for r in data.runs]
        shared = replayer(experiment, jobs)
        alone = replayer(_alone(experiment), jobs)
    print(f"measured: {args.measured}; step costs fitted on ITL and throughput at P in "
          f"{sorted(fit_on)} ({len(steps)} runs, rms log error {stepped.rms_log_error:.3f}), "
          f"prefill and frontend on the TTFT of {args.first_token} ({len(first.runs)} runs, "
          f"{result.rms_log_error:.3f})")  # fmt: skip
    for fit in (stepped, result):
        for name, value in fit.constants.items():
            print(f"  {name} = {value:.4g}  (start {fit.start[name]:.4g})")
    header = "  ".join(f"{c:>22}" for c in COLUMNS)
    print(f"\n{'run':28} {'busy':>4}  {header}")
    print(f"{'':28} {'':>4}  " + "  ".join(f"{'real    sim    err':>22}" for _ in COLUMNS))
    for measured, ours, single in zip(data.runs, shared, alone, strict=True):
        fitted = "fit " if measured.run.point.prefixes in fit_on else "pred"
        cells = "  ".join(_cell(c, measured.figures.get(c), ours.get(c)) for c in COLUMNS)
        print(f"{measured.run.id:28} {measured.run.point.prefixes:>4}  {cells}  {fitted}")
        lone = "  ".join(_cell(c, measured.figures.get(c), single.get(c)) for c in COLUMNS)
        print(f"{'  a GPU per worker':28} {'':>4}  {lone}")
    _errors("shared GPU", data.runs, shared, fit_on)
    _errors("a GPU per worker", data.runs, alone, fit_on)
    return 0


def _errors(label: str, runs, replayed: list[Figures], fit_on: set[int]) -> None:
    """Mean |error| of the predicted (not fitted) runs, per figure."""
    out = []
    for name in COLUMNS:
        errors = [
            abs(got.get(name) / m.figures.get(name) - 1)
            for m, got in zip(runs, replayed, strict=True)
            if m.run.point.prefixes not in fit_on and got.get(name) and m.figures.get(name)
        ]
        out.append(f"{name} {100 * sum(errors) / max(len(errors), 1):.0f} %")
    print(f"predicted runs, mean |error|, {label}: " + ", ".join(out))


if __name__ == "__main__":
    sys.exit(main())
