"""Results stores: where run states, records, raw results and the aggregate live."""

from kvbench.runner.stores.base import RunStore, StoreMismatch
from kvbench.runner.stores.directory import DirectoryStore

__all__ = ["DirectoryStore", "RunStore", "StoreMismatch"]
