"""`kvbench operator`: the kopf operator that runs BenchmarkExperiments on the cluster."""

import json
import logging

import click

__all__ = ["operator"]


class _JsonLines(logging.Formatter):
    """One JSON object per log line: what log collectors parse without a pattern."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("k8s_skip", "k8s_ref"):
            value = getattr(record, key, None)
            if isinstance(value, dict) and value.get("name"):
                line["object"] = f"{value.get('namespace')}/{value['name']}"
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def _address(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[str, int] | None:
    """HOST:PORT as (host, port), checked before anything starts."""
    if value is None:
        return None
    from kvbench.operator.metrics import parse_address

    try:
        return parse_address(value)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None


@click.command()
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Watch this namespace")
@click.option("--all-namespaces", is_flag=True, help="Watch every namespace")
@click.option(
    "--liveness",
    default="http://0.0.0.0:8080/healthz",
    show_default=True,
    help="Liveness/readiness endpoint",
)
@click.option(
    "--metrics",
    metavar="HOST:PORT",
    callback=_address,
    help="Serve the operator's Prometheus metrics at http://HOST:PORT/metrics (default: none)",
)
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Default: in-cluster")
def operator(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    liveness: str,
    metrics: tuple[str, int] | None,
    kubeconfig: str | None,
) -> None:
    """Watch BenchmarkExperiments in NAMESPACEs (or all) and run each one: fresh workers per
    run, the routing arm, the load-generator Job, per-pod results in the status."""
    if bool(namespaces) == all_namespaces:
        raise click.UsageError("give --namespace NS (repeatable) or --all-namespaces")
    import kopf
    import kubernetes

    from kvbench.operator.handlers import configure_operator
    from kvbench.operator.metrics import OperatorMetrics, serve_metrics

    handler = logging.StreamHandler()
    handler.setFormatter(_JsonLines())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    for chatty in ("aiohttp.access", "httpx"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    if kubeconfig:
        kubernetes.config.load_kube_config(kubeconfig)
    else:
        kubernetes.config.load_incluster_config()
    kept = OperatorMetrics()
    if metrics is not None:
        serve_metrics(kept, *metrics)
    configure_operator(kubernetes.client.ApiClient(), kept, list(namespaces) or None)

    @kopf.on.login()
    def _login(**kwargs):  # the same credentials as the back end's client
        return kopf.login_via_client(**kwargs)

    kopf.run(
        standalone=True,
        clusterwide=all_namespaces,
        namespaces=list(namespaces),
        liveness_endpoint=liveness,
    )
