"""kvbench: LLM-serving benchmark experiments on Kubernetes, run as a careful engineer would."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kvbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
