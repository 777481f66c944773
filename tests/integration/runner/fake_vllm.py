"""A stand-in for `vllm serve` where vLLM is not installed: writes what it was started with
(its arguments, CUDA_VISIBLE_DEVICES, the engine's variables, the variables kvbench sets for
vLLM, the time) to RECORD_DIR, then becomes `kvbench sim` with exactly those arguments (the
simulator takes vLLM's flags).

    python fake_vllm.py RECORD_DIR serve MODEL [vLLM flags]
"""

import json
import os
import sys
import time
from pathlib import Path

ENV = ("CUDA_VISIBLE_DEVICES", "FAKE_VLLM_MARK", "VLLM_SERVER_DEV_MODE", "VLLM_PORT",
       "VLLM_USE_FLASHINFER_SAMPLER")  # fmt: skip


def main() -> None:
    record_dir, argv = Path(sys.argv[1]), sys.argv[2:]
    record = {"argv": argv, "env": {k: os.environ.get(k) for k in ENV}, "time": time.time()}
    record_dir.mkdir(parents=True, exist_ok=True)
    (record_dir / f"{os.getpid()}.json").write_text(json.dumps(record))
    os.execv(sys.executable, [sys.executable, "-m", "kvbench", "sim", *argv])


if __name__ == "__main__":
    main()
