"""The perfetto API imported light for the command line: pandas, http.client and urllib.request go in
``sys.modules`` unrun (``_LazyModule``), run on first use, so ``as_pandas_dataframe`` still works."""

from __future__ import annotations

import importlib.util
import sys
import threading
import types

LAZY = ("pandas", "http.client", "urllib.request")


class _LazyModule(types.ModuleType):
    """A module whose code runs when an attribute it lacks is first read; unlike ``LazyLoader``, reading
    ``__spec__`` (as ``import`` does once in ``sys.modules``) does not run it."""

    # Reentrant: running one lazy module reads another (urllib.request uses http.client).
    _lock = threading.RLock()

    def __getattr__(self, attr: str):
        with _LazyModule._lock:  # another thread waits here until the module has run
            if not self.__dict__.get("_traceaug_ran"):
                self.__dict__["_traceaug_ran"] = True
                self.__spec__.loader.exec_module(self)
                self.__class__ = types.ModuleType  # only once whole: no half-run module seen
        try:
            return self.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}") from None


def _import_lazily(name: str) -> None:
    """Put ``name`` in ``sys.modules`` (and on its package) unrun, as a ``_LazyModule``."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _LazyModule
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def perfetto_light() -> None:
    """Import the perfetto API with its heavy imports made lazy (once, before any engine)."""
    if "perfetto.common.query_result_iterator" in sys.modules:
        return
    for name in LAZY:
        _import_lazily(name)
    import perfetto.common.query_result_iterator  # noqa: F401
