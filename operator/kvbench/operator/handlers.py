"""The operator's kopf handlers: thin, each hands the resource to the ExperimentController.

kopf keeps its own progress in annotations (the status schema would prune `status.kopf`).
One daemon per experiment runs it; the daemon stops when the operator exits (the children
keep running, the next operator adopts them) or when the resource is deleted (then the
children are torn down before kopf's finalizer lets the resource go). Given namespaces, the
operator also tells experiments elsewhere that it does not run them (`unwatched`).
"""

import logging
from typing import Any

import kopf
import kubernetes

from kvbench.api import GROUP, PLURAL, VERSION
from kvbench.operator.diffbase import DigestDiffBaseStorage
from kvbench.operator.experiments import ExperimentController
from kvbench.operator.metrics import OperatorMetrics
from kvbench.operator.unwatched import NotWatchedReporter, own_namespace

__all__ = ["configure_operator"]

_controller: list[ExperimentController] = []
_reporter: list[NotWatchedReporter] = []


def configure_operator(
    client: kubernetes.client.ApiClient,
    metrics: OperatorMetrics,
    watched: list[str] | None = None,
) -> None:
    """Set the API client the handlers act through and the metrics they keep (before kopf
    starts); `watched`, the namespaces served (None: all)."""
    _controller[:] = [ExperimentController(client, metrics=metrics)]
    _reporter[:] = [NotWatchedReporter(client, watched, own_namespace())] if watched else []


@kopf.on.startup()
def _settings(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kvbench.io")
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(
        prefix="kvbench.io", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300


@kopf.on.startup()
def _tell_unwatched(**_: Any) -> None:
    for reporter in _reporter:
        reporter.start()


@kopf.on.cleanup()
def _stop_telling(**_: Any) -> None:
    for reporter in _reporter:
        reporter.stop()


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=120.0)
async def _experiment(body: kopf.Body, stopped: kopf.DaemonStopped, **_: Any) -> None:
    async def wait_stopped() -> bool:
        await stopped.wait()
        return bool(stopped.reason and kopf.DaemonStoppingReason.RESOURCE_DELETED in stopped.reason)

    await _controller[0].run(dict(body), wait_stopped)


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def _spec_changed(body: kopf.Body, **_: Any) -> None:
    _controller[0].spec_changed(dict(body))


@kopf.on.delete(GROUP, VERSION, PLURAL)
def _deleted(name: str, namespace: str, logger: kopf.Logger, **_: Any) -> None:
    logger.info("experiment %s/%s deleted: its children go with it", namespace, name)
    _controller[0].deleted(namespace, name)
