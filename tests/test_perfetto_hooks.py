"""The engine backend (traceaug/engine/backend.py) relies on private parts of the pinned
``perfetto`` API. An upgrade that removes or reshapes one fails here, naming the hook and
what traceaug does with it, rather than somewhere deep in a load."""

from __future__ import annotations

import inspect
import re
from importlib import import_module
from types import SimpleNamespace

import pytest
from conftest import ROOT

BACKEND = ROOT / "traceaug" / "engine" / "backend.py"

# (module, class, name, what traceaug does with it). "attr" names are set by upstream's
# __init__ (checked in its source); the others must be callables of the class.
HOOKS = [
    ("perfetto.trace_processor.api", "TraceProcessor", "_create_backend",
     "TraceProcessor._create_backend is overridden to plug in the wasm or native backend"),
    ("perfetto.trace_processor.api", "TraceProcessor", "attr:_backend",
     "TraceProcessor.backend returns upstream's self._backend"),
    ("perfetto.trace_processor.api", "TraceProcessor", "attr:platform_delegate",
     "_create_backend hands self.platform_delegate to the native shell"),
    ("perfetto.trace_processor.api", "TraceProcessor", "attr:protos",
     "_create_backend hands self.protos to either backend"),
    ("perfetto.trace_processor.api", "TraceProcessor", "attr:config",
     "_create_backend hands self.config to the native shell"),
    ("perfetto.trace_processor.rpc", "TraceProcessorRpc", "_check_envelope",
     "_RpcLoading._call / WasmBackend.parse check every reply with it"),
    ("perfetto.trace_processor.rpc", "TraceProcessorRpc", "_read_payload",
     "WasmBackend._exchange reads each reply with it"),
    ("perfetto.trace_processor.rpc", "TraceProcessorRpc", "attr:transport",
     "WasmBackend._exchange sends through self.transport (the wasm instance)"),
    ("perfetto.trace_processor.rpc", "TraceProcessorRpc", "execute_query",
     "queries on the wasm engine go through upstream's streaming client"),
    ("perfetto.trace_processor.http", "TraceProcessorHttp", "attr:conn",
     "NativeBackend._exchange posts /rpc on upstream's self.conn"),
    ("perfetto.trace_processor.shell", "TraceProcessorHttpSubprocess", "__init__",
     "NativeBackend(config, platform_delegate, protos) starts the user's shell"),
]
SIGNATURES = {  # the parameters traceaug passes, by position
    ("perfetto.trace_processor.rpc", "TraceProcessorRpc", "__init__"): ["self", "transport", "protos"],
    ("perfetto.trace_processor.api", "TraceProcessor", "_create_backend"): ["self", "remote", "addr"],
    ("perfetto.trace_processor.shell", "TraceProcessorHttpSubprocess", "__init__"):
        ["self", "config", "platform_delegate", "protos"],
}


def hook_problem(module, cls_name: str, name: str) -> str | None:
    """Why the hook is unusable (missing class, method or attribute), or None."""
    cls = getattr(module, cls_name, None)
    if cls is None:
        return f"{module.__name__}.{cls_name} is gone"
    if name.startswith("attr:"):
        attr = name[5:]
        sources = "".join(inspect.getsource(c.__init__) for c in inspect.getmro(cls)
                          if "__init__" in vars(c) and c.__module__.startswith("perfetto"))
        if not re.search(rf"self\.{attr}\s*[,)=]|self\.{attr}\s*=", sources):
            return f"{cls_name}.__init__ no longer sets self.{attr}"
        return None
    if not callable(getattr(cls, name, None)):
        return f"{cls_name}.{name} is gone"
    return None


@pytest.mark.parametrize("module_name, cls_name, name, use", HOOKS, ids=[f"{h[1]}.{h[2]}" for h in HOOKS])
def test_private_hook_is_there(module_name: str, cls_name: str, name: str, use: str) -> None:
    problem = hook_problem(import_module(module_name), cls_name, name)
    assert problem is None, f"perfetto upgrade broke a hook traceaug relies on: {problem} ({use})"


@pytest.mark.parametrize("where, params", SIGNATURES.items(), ids=[".".join(k[1:]) for k in SIGNATURES])
def test_hook_signatures(where: tuple, params: list[str]) -> None:
    module_name, cls_name, name = where
    got = list(inspect.signature(getattr(getattr(import_module(module_name), cls_name), name)).parameters)
    assert got[: len(params)] == params, (
        f"perfetto upgrade changed {cls_name}.{name}{tuple(got)}: traceaug passes {tuple(params)}")


def test_upstream_init_calls_create_backend() -> None:
    from perfetto.trace_processor.api import TraceProcessor

    assert "self._create_backend(" in inspect.getsource(TraceProcessor.__init__), (
        "perfetto upgrade: TraceProcessor.__init__ no longer calls self._create_backend(), "
        "so traceaug's wasm backend would never be used")


def test_every_private_name_backend_uses_is_listed() -> None:
    """Each private upstream attribute backend.py reaches for is in HOOKS (so a new one is
    noticed here): names it reads that it does not define itself."""
    text = BACKEND.read_text()
    used = set(re.findall(r"\b(?:self|TraceProcessorRpc|_UpstreamTP)\.(_[a-z]\w*)", text))
    defined = set(re.findall(r"def (_\w+)|self\.(_\w+)\s*=", text))
    own = {n for pair in defined for n in pair if n}
    listed = {h[2].removeprefix("attr:") for h in HOOKS}
    assert used - own - listed == set()
    assert {"_create_backend", "_check_envelope", "_read_payload", "_backend"} <= listed


def test_a_removed_hook_is_named() -> None:
    """The check itself: a perfetto without ``_read_payload`` fails with that name."""

    class Rpc:
        def __init__(self, transport, protos):
            self.transport = transport

        def _check_envelope(self, reply): ...

    fake = SimpleNamespace(__name__="perfetto.trace_processor.rpc", TraceProcessorRpc=Rpc)
    gone = hook_problem(fake, "TraceProcessorRpc", "_read_payload")
    assert gone == "TraceProcessorRpc._read_payload is gone"
    assert hook_problem(fake, "TraceProcessorRpc", "_check_envelope") is None
    assert hook_problem(fake, "Gone", "x") == "perfetto.trace_processor.rpc.Gone is gone"


def test_our_init_sets_what_upstream_init_sets() -> None:
    """``backend.TraceProcessor.__init__`` replaces upstream's (to share one ProtoFactory per
    process): an upgrade whose ``__init__`` sets another attribute must be copied there."""
    from perfetto.trace_processor.api import TraceProcessor

    from traceaug.engine.backend import TraceProcessor as Ours

    def assigned(fn) -> set[str]:
        return set(re.findall(r"^\s*self\.(\w+)\s*=", inspect.getsource(fn), re.M))

    upstream = assigned(TraceProcessor.__init__)
    assert upstream == {"config", "platform_delegate", "protos", "resolver_registry", "_backend",
                        "http"}, f"perfetto upgrade: TraceProcessor.__init__ now sets {upstream}"
    assert upstream <= assigned(Ours.__init__)


AS_PANDAS = """
import sys
from traceaug.engine.imports import perfetto_light
perfetto_light()
import perfetto.common.query_result_iterator as q
print("pandas unrun", type(sys.modules["pandas"]).__name__ == "_LazyModule", q.HAS_PANDAS)
from traceaug.engine.backend import TraceProcessor
tp = TraceProcessor()
tp.backend.parse(b'{"traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":5,"dur":3}]}')
tp.backend.notify_eof()
df = tp.query("SELECT name, dur FROM slice").as_pandas_dataframe()
print(type(df).__name__, df.to_dict("records"))
"""


def test_as_pandas_dataframe_works_with_the_light_perfetto_import() -> None:
    """The command line imports the perfetto API with pandas unrun (``engine.imports``, for
    perfetto==0.59.1, whose ``query_result_iterator`` binds ``pd`` and ``HAS_PANDAS`` at
    import): upstream's ``as_pandas_dataframe`` still works, pandas running on first use."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", AS_PANDAS], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.stdout.splitlines() == ["pandas unrun True True",
                                       "DataFrame [{'name': 'k', 'dur': 3000}]"], out.stderr
