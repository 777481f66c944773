"""A local Kubernetes for tests: a real control plane, a node agent, a service proxy."""
