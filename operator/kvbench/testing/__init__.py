"""A local Kubernetes for tests: a real control plane and real nodes.

`cluster.TestCluster` starts the whole of it (`kvbench testcluster up` from a shell):
`controlplane` runs etcd and the Kubernetes binaries that `build` makes from Debian's source,
`node` runs the nodes (per node a network namespace with containerd, a kubelet and kube-proxy;
a CNI bridge; dnsmasq as the cluster DNS; the images built with Docker), `slots` keeps clusters
of one machine apart. Beside the cluster: `operator_install` puts the chart's operator into it,
`experiments` applies and follows experiments as a user does, `gitops` reads their health as
Argo CD and kstatus do, `readiness` takes a pod out of its Service for a while by its own
readiness probe, and `image` builds the project's container images.
Importing this package starts nothing.
"""

__all__: list[str] = []
