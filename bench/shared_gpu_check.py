"""Workers sharing one GPU, real vLLM against the simulator: fit the timing profile on some
busy-worker counts of a measured results directory, predict the others.

The measured directory is `bench/real-vllm-experiments/real-vllm-shared-gpu-6w.yaml` run with
`kvbench run FILE --engine vllm --gpus 0` (six workers time-sliced on one H200; prefix
affinity gives each of P prefixes its own worker, so P workers are busy). The fit
(`kvbench.predict.fit_profile` with the weights' bandwidth free as well, which only a shared
GPU tells from the per-step overhead) uses the runs with P in --fit; every run is then
replayed in virtual time with the fitted profile, with the GPU shared as the file says and,
for comparison, with a GPU per worker (the simulator before GPU sharing). Prints the table
and the fitted profile.

    .venv/bin/python bench/shared_gpu_check.py bench/results/real-vllm-shared-gpu-6w --fit 2,4
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from kvbench.api import BenchmarkExperiment
from kvbench.predict.figures import Figures
from kvbench.predict.fit import (
    SHARED_GPU_FREE,
    ParallelReplayer,
    base_profile,
    fit_profile,
)
from kvbench.predict.measured import load_measured

COLUMNS = ("ttft_p50", "itl_p50", "output_tokens_per_second")


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
    parser.add_argument("--fit", default="2,4", help="prefix counts (busy workers) fitted on")
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    fit_on = {int(p) for p in args.fit.split(",")}
    data = load_measured(args.measured)
    experiment = data.experiment
    runs = [r for r in data.runs if r.run.point.prefixes in fit_on]
    with ProcessPoolExecutor(args.jobs) as pool:
        replayer = ParallelReplayer(pool)
        result = fit_profile(
            experiment,
            runs,
            base_profile(experiment),
            budget=args.budget,
            replayer=replayer,
            name="fitted-shared",
            free=SHARED_GPU_FREE,
        )
        jobs = [(r.run, result.profile) for r in data.runs]
        shared = replayer(experiment, jobs)
        alone = replayer(_alone(experiment), jobs)
    print(f"measured: {args.measured}; fitted on P in {sorted(fit_on)} ({len(runs)} runs, "
          f"{result.replays} replays), rms log error {result.rms_log_error:.3f}")  # fmt: skip
    for name, value in result.constants.items():
        print(f"  {name} = {value:.4g}  (start {result.start[name]:.4g})")
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
