"""`kvbench testcluster up`: the local test cluster, started by hand for development.

It builds the Kubernetes binaries and the nodes' images on first use, starts the control
plane and real nodes (a kubelet, containerd and kube-proxy each, `kvbench.testing.node`),
prints how to reach them, and stops everything on Ctrl-C (or SIGTERM).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

__all__ = ["testcluster"]


@click.group("testcluster")
def testcluster() -> None:
    """A local Kubernetes (real control plane and nodes) for development."""


@testcluster.command("up")
@click.option("--gpu-nodes", default=2, show_default=True, help="Nodes with GPUs")
@click.option("--gpus-per-node", default=1, show_default=True, help="nvidia.com/gpu per GPU node")
@click.option("--gpu-product", default="NVIDIA-L4", show_default=True, help="GPU node label")
@click.option("--cpu-nodes", default=1, show_default=True, help="Nodes without GPUs")
@click.option("--keep", is_flag=True, help="Keep the working directory (logs) after stopping")
def up(
    gpu_nodes: int,
    gpus_per_node: int,
    gpu_product: str,
    cpu_nodes: int,
    keep: bool,
) -> None:
    """Start a test cluster and keep it running until Ctrl-C."""
    from kvbench.testing.cluster import TestCluster
    from kvbench.testing.config import NodeSpec

    nodes = [
        NodeSpec(name=f"gpu-node-{i}", gpus=gpus_per_node, gpu_product=gpu_product)
        for i in range(gpu_nodes)
    ] + [NodeSpec(name=f"cpu-node-{i}") for i in range(cpu_nodes)]
    if not nodes:
        raise click.UsageError("a cluster needs at least one node")
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    click.echo("starting the test cluster (the first run builds Kubernetes: a few minutes)...")
    cluster = TestCluster(nodes, keep_workdir=keep)
    try:
        try:
            cluster.start()
        except RuntimeError as err:
            raise click.ClickException(str(err)) from err
        assert cluster.binaries is not None
        kubectl = cluster.binaries.kubectl
        click.echo(f"\nkubeconfig: {cluster.kubeconfig}")
        click.echo(f"apiserver:  {cluster.access.server}")
        click.echo(f"kubectl:    {kubectl} (v1.20.2, matching the cluster)\n")
        click.echo(f"  export KUBECONFIG={cluster.kubeconfig}")
        click.echo(f"  {kubectl} get nodes -L nvidia.com/gpu.product")
        click.echo(f"  {kubectl} logs POD\n")
        assert cluster.fleet is not None
        plan = cluster.fleet.plan
        for index, (spec, node) in enumerate(zip(nodes, cluster.fleet.nodes, strict=True)):
            gpus = f"{spec.gpus} x {spec.gpu_product}" if spec.gpus else "no GPU"
            click.echo(f"node {node.name:<12} {node.ip:<13} pods {plan.pod_cidr(index):<16} {gpus}")
        click.echo(f"services {plan.service_cidr}, cluster DNS {plan.dns_service_ip}")
        click.echo(
            "pod addresses are routed from this machine; Service addresses from a node's "
            f"network namespace: ip netns exec {plan.netns(nodes[0].name)} curl ..."
        )
        click.echo(f"\nlogs: {cluster.workdir / 'logs'}")
        click.echo("Ctrl-C stops everything.", err=False)
        while not stop.wait(1.0):
            dead = [p for p in cluster.processes() if not p.running()]
            if dead:
                raise click.ClickException(
                    "a test-cluster process died:\n" + "\n".join(p.describe_failure() for p in dead)
                )
    finally:
        click.echo("stopping the test cluster...")
        cluster.stop()
        if keep:
            click.echo(f"kept {cluster.workdir}")
