"""The Kubernetes back end: manifests, the cluster, the results store in ConfigMaps."""
