"""The test cluster's real nodes: per node a network namespace with containerd, the kubelet and
kube-proxy (`node`, `network`, `cgroups`, `containerd`, `kubelet`), the images they hold
(`images`), and the cluster DNS (`clusterdns`). Importing this package starts nothing."""
