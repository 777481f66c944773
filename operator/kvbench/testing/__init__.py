"""A local Kubernetes for tests: a real control plane, a node agent and a service proxy.

`cluster.TestCluster` starts the whole of it (`kvbench testcluster up` from a shell);
`controlplane` runs etcd and the Kubernetes binaries that `build` makes from Debian's
source; `nodeagent` stands in for the kubelet (pods as local processes: `podrunner`,
`container`, `images`, `podenv`, `volumes`, `probes`, `kubeletapi`, `nodes`);
`serviceproxy` stands in for kube-proxy with `kvbench.netbalance`. Beside the cluster:
`operator_install` puts the chart's operator into it, `experiments` applies and follows
experiments as a user does, `gitops` reads their health as Argo CD and kstatus do, `readiness`
takes a pod out of its Service for a while by its own readiness probe, and `image` builds the
project's container image with podman and runs programs inside it.
Importing this package starts nothing.
"""

__all__: list[str] = []
