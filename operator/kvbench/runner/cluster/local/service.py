"""The local Service stand-in as its own process: `kvbench.netbalance` in front of the
workers, a random worker per new connection, seeded, as kube-proxy does for a ClusterIP.

A process of its own (not a task of the runner) so that it outlives a killed runner, like a
Service on a cluster, and an adopted load generator keeps reaching the workers.
"""

import argparse
import asyncio
import random
import signal
import sys

from kvbench.netbalance import Backend, TcpBalancer

__all__ = ["main", "service_command"]


def service_command(host: str, port: int, seed: str, backends: list[Backend]) -> list[str]:
    """The command line of a Service stand-in (`python -m` of this module)."""
    argv = [sys.executable, "-m", __name__, "--host", host, "--port", str(port), "--seed", seed]
    for backend_host, backend_port in backends:
        argv += ["--backend", f"{backend_host}:{backend_port}"]
    return argv


async def _serve(host: str, port: int, seed: str, backends: list[Backend]) -> None:
    balancer = TcpBalancer(host, port, lambda: backends, random.Random(seed))
    await balancer.start()
    print(f"balancing {host}:{balancer.port} over {len(backends)} backends", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await balancer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", required=True)
    parser.add_argument("--backend", action="append", default=[], help="HOST:PORT")
    args = parser.parse_args()
    backends = [(b.rsplit(":", 1)[0], int(b.rsplit(":", 1)[1])) for b in args.backend]
    asyncio.run(_serve(args.host, args.port, args.seed, backends))


if __name__ == "__main__":
    main()
