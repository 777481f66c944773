"""What the operator's ServiceAccount may do, asked of the API server itself: exactly what
the operator needs, nothing beyond (listed here independently of the chart)."""

from kvbench.testing.cluster import TestCluster

ACCOUNT = "system:serviceaccount:kvbench-system:kvbench-operator"

NEEDED = {
    "benchmarkexperiments.kvbench.io": {"get", "list", "watch", "patch", "update"},
    "benchmarkexperiments.kvbench.io/status": {"get", "patch", "update"},
    "benchmarkexperiments.kvbench.io/finalizers": {"update"},
    "pods": {"get", "list", "watch", "delete"},
    "pods/log": {"get"},
    "endpointslices.discovery.k8s.io": {"list", "watch"},
    "statefulsets.apps": {"get", "list", "watch", "create", "patch", "update", "delete"},
    "deployments.apps": {"get", "list", "watch", "create", "patch", "update", "delete"},
    "services": {"get", "list", "watch", "create", "patch", "update", "delete"},
    "configmaps": {"get", "list", "watch", "create", "patch", "update", "delete"},
    "jobs.batch": {"get", "list", "watch", "create", "delete"},
    "serviceaccounts": {"get", "list", "create", "patch", "delete"},
    "roles.rbac.authorization.k8s.io": {"get", "list", "create", "patch", "delete"},
    "rolebindings.rbac.authorization.k8s.io": {"get", "list", "create", "patch", "delete"},
    "events": {"create", "patch"},
    "events.events.k8s.io": {"create", "patch"},
    "customresourcedefinitions.apiextensions.k8s.io": {"list", "watch"},
    "nodes": {"get", "list"},
}
"""Granted to every authenticated account by Kubernetes itself, not by the chart."""
BUILTIN = {
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
}


def _rules(cluster: TestCluster, namespace: str) -> dict[str, set[str]]:
    listed = cluster.kubectl("auth", "can-i", "--list", f"--as={ACCOUNT}", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    rules: dict[str, set[str]] = {}
    for line in listed.stdout.splitlines()[1:]:
        resource = line.split()[0]
        if resource.startswith(("/", "[/")) or resource in BUILTIN:
            continue  # non-resource URLs (discovery) every account may read
        verbs = line[line.rindex("[") + 1 : line.rindex("]")].split()
        rules.setdefault(resource, set()).update(verbs)
    return rules


def test_the_operator_may_do_what_it_needs_and_nothing_more(
    cluster: TestCluster, namespace: str, operator: dict
) -> None:
    rules = _rules(cluster, namespace)
    beyond = {r: v - NEEDED.get(r, set()) for r, v in rules.items() if v - NEEDED.get(r, set())}
    assert beyond == {}, f"granted beyond the need: {beyond}"
    missing = {r: v - rules.get(r, set()) for r, v in NEEDED.items() if v - rules.get(r, set())}
    assert missing == {}, f"needed but not granted: {missing}"
    for verb, resource in (("get", "secrets"), ("create", "pods"), ("delete", "nodes"),
                           ("create", "clusterroles")):  # fmt: skip
        answer = cluster.kubectl("auth", "can-i", verb, resource, f"--as={ACCOUNT}", "-n",
                                 namespace)  # fmt: skip
        assert answer.stdout.strip() == "no", f"may {verb} {resource}"
