"""On the lent GPU machine (bench/device_bundle.sh): kvbench's own dependencies come last on
sys.path, so the machine's packages (vLLM's torch, numpy, tokenizers...) always win; and
`import kubernetes` / `import kopf`, which `kvbench.cli` imports but `kvbench run --engine vllm`
never calls, get stand-ins when the machine lacks them."""

import importlib.abc
import importlib.machinery
import os
import sys
import types

_FALLBACK = os.environ.get("KVBENCH_DEVICE_FALLBACK")
if _FALLBACK and _FALLBACK not in sys.path:
    sys.path.append(_FALLBACK)


class _StandIn(type):
    """Any attribute, call or decorator of the missing client: a class (so `except` and base
    classes work) whose calls return another, or the decorated function itself."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandIn(name, (Exception,), {})

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _StandIn(cls.__name__, (Exception,), {})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandIn(name, (Exception,), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    ROOTS = ("kubernetes", "kopf")

    def find_spec(self, name, path=None, target=None):
        root = name.split(".")[0]
        if root not in self.ROOTS:
            return None
        if name == root:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                if finder.find_spec(name, path, target) is not None:
                    return None  # the real package is there
        elif not isinstance(sys.modules.get(root), _StandInModule):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
