"""One running trace_processor wasm instance and its byte-level RPC pipe (``send`` / ``read``); any trap
kills it. A started heap (``_Image``, kept beside the cached module) is copied in instead of a slow init."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import wasmtime

import traceaug.interrupt as interrupt
import traceaug.runtime as runtime

from ..atomic import atomic_output
from ..errors import EngineError, EngineOutOfMemory
from .wasm_module import WasmBuild

ENOSYS = 52  # emscripten / WASI errno numbers
EBADF = 8
REQUEST_BUFFER = 32 << 20
_I32, _I64, _F64 = wasmtime.ValType.i32(), wasmtime.ValType.i64(), wasmtime.ValType.f64()


PAGE = 4096  # the image's unit: a host page


@dataclass(frozen=True)
class _Image:
    """A started engine's heap: its size, the runs of host pages differing from a fresh memory's (data
    segments, zeros above), and the reply function's table index and request buffer it started with."""

    size: int
    runs: tuple[tuple[int, bytes | memoryview], ...]
    reply_index: int
    buf: int
    request: int

    def fits(self, reply_index: int, max_bytes: int) -> bool:
        """An instance whose reply function got ``reply_index`` and whose heap may reach
        ``max_bytes`` can start from this image (the request buffer's size as now)."""
        return (self.reply_index, self.request) == (reply_index, REQUEST_BUFFER) \
            and self.size <= max_bytes


_IMAGES: dict[str, _Image] = {}  # by build name (trace_processor.wasm / ..._memory64.wasm)
_FULL_STARTS: dict[str, int] = {}  # starts without an image, by build name: the second keeps one
_IMAGE_LOCK = threading.Lock()
_READ: set[Path] = set()  # the image files this process has looked for
_MAGIC = b"traceaug-heap-1 "  # starts an image file's header line


def _image_of(build: WasmBuild) -> _Image | None:
    """The image to start ``build`` from: this process's, else the one an earlier process kept (read once)."""
    with _IMAGE_LOCK:
        if build.name not in _IMAGES and build.heap is not None and build.heap not in _READ:
            _READ.add(build.heap)
            found = _read_image(build.heap)
            if found is not None:
                _IMAGES[build.name] = found
        return _IMAGES.get(build.name)


def _read_image(path: Path) -> _Image | None:
    """The image ``_write_image`` kept at ``path`` (its runs views of one read, no copy); None if there is
    none or it is not whole (its crc32)."""
    try:
        with open(path, "rb") as f:
            data = bytearray(os.fstat(f.fileno()).st_size)
            if f.readinto(data) != len(data):
                return None
        end = data.index(b"\n")
        if not data.startswith(_MAGIC):
            return None
        fields = json.loads(data[len(_MAGIC):end])
        body = memoryview(data)[end + 1:]
        if zlib.crc32(body) != fields.pop("crc32"):
            return None
        runs, at = [], 0
        for offset, n in fields.pop("runs"):
            runs.append((offset, body[at:at + n]))
            at += n
        return _Image(runs=tuple(runs), **fields) if at == len(body) else None
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _write_image(path: Path, image: _Image) -> None:
    """Keep ``image`` at ``path`` for later processes (replaced by rename, as the cached module is)."""
    body = b"".join(data for _, data in image.runs)
    fields = {"size": image.size, "reply_index": image.reply_index, "buf": image.buf,
              "request": image.request, "runs": [(offset, len(data)) for offset, data in image.runs],
              "crc32": zlib.crc32(body)}
    with contextlib.suppress(OSError):  # an unwritable cache: every process starts in full
        with atomic_output(path, hold=False) as f:
            f.write(_MAGIC + json.dumps(fields).encode() + b"\n" + body)


def _second_start(name: str) -> bool:
    """Count a start of build ``name`` without an image; True from the second on (a process
    that starts one engine never pays the ~20 ms an image takes)."""
    with _IMAGE_LOCK:
        _FULL_STARTS[name] = _FULL_STARTS.get(name, 0) + 1
        return _FULL_STARTS[name] > 1


def _pages(heap: ctypes.Array | bytes) -> np.ndarray:
    """``heap`` as rows of one host page each (8-byte words: fast to compare)."""
    return np.frombuffer(heap, np.uint64).reshape(-1, PAGE // 8)


def _runs(pages: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) page numbers of each run of True in ``pages``."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], pages.view(np.int8), [0]))))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


_OOM_MARKS = ("out of memory", "cannot enlarge memory", "could not allocate", "failed to allocate",
              "bad_alloc")


def _address(part: bytes) -> int:
    """Where a bytes object's contents are (no copy; ``part`` must stay alive while used)."""
    return ctypes.cast(ctypes.c_char_p(part), ctypes.c_void_p).value or 0


class _Abort(Exception):
    """Raised from a host call to unwind the wasm stack on abort()."""


class WasmInstance:
    """A live trace processor; feed it serialized RPC requests, read replies."""

    def __init__(self, build: WasmBuild) -> None:
        self.build = build
        if runtime.current().interruptible:  # Ctrl-C never raises inside a host call
            interrupt.install()
        interrupt.check()
        self.store = wasmtime.Store(build.engine)
        self.store.set_epoch_deadline(1)  # traps once a signal bumps the epoch (interrupt)
        self._ptr_mask = (1 << 64) - 1 if build.memory64 else 0xFFFFFFFF
        self._ptr = _I64 if build.memory64 else _I32
        self._replies = bytearray()
        self._read_pos = 0
        self.stderr: list[str] = []
        self.dead: str | None = None
        self.memory: wasmtime.Memory | None = None
        self._instantiate()

    # ----- host imports -------------------------------------------------
    def _mem(self) -> wasmtime.Memory:
        assert self.memory is not None
        return self.memory

    def _read(self, ptr: int, n: int) -> bytes:
        return bytes(self._view(ptr, n))

    def _cstr(self, ptr: int) -> str:
        ptr &= self._ptr_mask
        out = bytearray()
        while True:
            chunk = self._mem().read(self.store, ptr, ptr + 256)
            end = chunk.find(0)
            if end >= 0:
                out += chunk[:end]
                return out.decode("utf-8", "replace")
            out += chunk
            ptr += 256

    def _write(self, ptr: int, data: bytes) -> None:
        self._mem().write(self.store, data, ptr & self._ptr_mask)

    def _imports(self) -> list[wasmtime.Func]:
        funcs = []
        for imp in self.build.module.imports:
            ftype = imp.type
            assert isinstance(ftype, wasmtime.FuncType)
            impl = getattr(self, "_h_" + imp.name.lstrip("_"), None) or self._unsupported(ftype)
            funcs.append(wasmtime.Func(self.store, ftype, impl))
        return funcs

    @staticmethod
    def _unsupported(ftype: wasmtime.FuncType):
        results = ftype.results

        def stub(*_args):  # file-system syscalls: there is no file system here
            if not results:
                return None
            return -ENOSYS if str(results[0]) == "i32" else 0

        return stub

    def _h_emscripten_get_now(self) -> float:
        return time.perf_counter() * 1000.0

    def _h_emscripten_date_now(self) -> float:
        return time.time() * 1000.0

    def _h_clock_time_get(self, clock_id: int, precision: int, out: int) -> int:
        now = time.time_ns() if clock_id == 0 else time.perf_counter_ns()
        self._write(out, struct.pack("<Q", now))
        return 0

    def _h_fd_write(self, fd: int, iovs: int, iovs_len: int, nwritten: int) -> int:
        total = 0
        step, fmt = (16, "<QQ") if self.build.memory64 else (8, "<II")
        text = bytearray()
        for i in range(iovs_len):
            base, length = struct.unpack(fmt, self._read(iovs + i * step, step))
            text += self._read(base, length)
            total += length
        if fd in (1, 2):
            self.stderr.append(text.decode("utf-8", "replace"))
            del self.stderr[:-50]
        self._write(nwritten, struct.pack("<Q" if self.build.memory64 else "<I", total))
        return 0

    def _h_fd_close(self, fd: int) -> int:
        return EBADF

    def _h_environ_sizes_get(self, count: int, size: int) -> int:
        fmt = "<Q" if self.build.memory64 else "<I"
        self._write(count, struct.pack(fmt, 0))
        self._write(size, struct.pack(fmt, 0))
        return 0

    def _h_environ_get(self, environ: int, buf: int) -> int:
        return 0

    def _h_emscripten_err(self, ptr: int) -> None:
        self.stderr.append(self._cstr(ptr))

    def _h_assert_fail(self, cond: int, file: int, line: int, func: int) -> None:
        raise _Abort(f"assertion failed: {self._cstr(cond)} at {self._cstr(file)}:{line}")

    def _h_abort_js(self) -> None:
        raise _Abort("abort()")

    def _h_emscripten_get_heap_max(self) -> int:
        size = self._max_bytes
        if self.build.memory64:
            return size
        size = min(size, 0xFFFF0000)  # emscripten's 4 GiB - 64 KiB cap for wasm32
        return size - (1 << 32) if size >= 1 << 31 else size

    def _h_emscripten_resize_heap(self, requested: int) -> int:
        requested &= self._ptr_mask
        mem = self._mem()
        have = mem.data_len(self.store)
        limit = self._max_bytes if self.build.memory64 else min(self._max_bytes, 0xFFFF0000)
        if requested > limit:
            return 0
        # Grow geometrically like emscripten, so a big load does not grow page by page.
        target = min(max(requested, have + have // 5 + (16 << 20)), limit)
        pages = -(-(target - have) // 65536)
        try:
            mem.grow(self.store, pages)
        except wasmtime.WasmtimeError:
            try:
                mem.grow(self.store, -(-(requested - have) // 65536))
            except wasmtime.WasmtimeError:
                return 0
        return 1

    def _h_tzset_js(self, timezone: int, daylight: int, std_name: int, dst_name: int) -> None:
        fmt = "<q" if self.build.memory64 else "<i"
        self._write(timezone, struct.pack(fmt, 0))
        self._write(daylight, struct.pack("<i", 0))
        self._write(std_name, b"UTC\0")
        self._write(dst_name, b"UTC\0")

    def _h_gmtime_js(self, t: int, ptr: int) -> None:
        g = time.gmtime(t)
        fields = (g.tm_sec, g.tm_min, g.tm_hour, g.tm_mday, g.tm_mon - 1, g.tm_year - 1900,
                  (g.tm_wday + 1) % 7, g.tm_yday - 1, 0)
        self._write(ptr, struct.pack("<9i", *fields))

    _h_localtime_js = _h_gmtime_js  # the engine's local time is UTC (``_h_tzset_js``)

    def _h_timegm_js(self, ptr: int) -> int:
        import calendar

        sec, mi, hour, mday, mon, year = struct.unpack("<6i", self._read(ptr, 24))
        return calendar.timegm((year + 1900, mon + 1, mday, hour, mi, sec, 0, 0, 0))

    # ----- start-up and RPC --------------------------------------------
    def _instantiate(self) -> None:
        try:
            with interrupt.engine_call():
                self._start()
        except (wasmtime.Trap, wasmtime.WasmtimeError, _Abort) as e:
            self._die(e)

    def _start(self) -> None:
        exports = wasmtime.Instance(self.store, self.build.module, self._imports()).exports(self.store)
        self.memory = exports["memory"]
        self._max_bytes = (self.memory.type(self.store).limits.max or 65536) * 65536
        cap = os.environ.get("TRACEAUG_WASM32_HEAP_MB")
        if cap and not self.build.memory64:  # a real heap limit, to exercise the memory64 retry
            self._max_bytes = min(self._max_bytes, int(cap) << 20)
        self._on_request = exports["trace_processor_on_rpc_request"]
        exports["emscripten_stack_init"](self.store)  # the stack's globals, for either start
        table: wasmtime.Table = exports["__indirect_function_table"]
        reply = wasmtime.Func(self.store, wasmtime.FuncType([self._ptr, _I32], []), self._on_reply)
        index = table.grow(self.store, 1, reply)
        image = _image_of(self.build)
        if image is not None and image.fits(index, self._max_bytes):
            self._restore(image)
            return
        keep = image is None and self.build.heap is not None  # none kept: this start's, for later processes
        fresh = self._data_pages() if _second_start(self.build.name) or keep else None
        exports["__wasm_call_ctors"](self.store)
        self._buf = exports["trace_processor_rpc_init"](self.store, index, REQUEST_BUFFER) & self._ptr_mask
        if fresh is not None:
            _IMAGES[self.build.name] = made = self._image(fresh, index)  # any fresh start's is as good
            if keep:
                _write_image(self.build.heap, made)

    def _data_pages(self) -> tuple[np.ndarray, np.ndarray]:
        """The numbers of the pages not zero in this fresh memory (its data segments), and a
        copy of them: what an image is told apart from."""
        pages = _pages(self._view(0, self._mem().data_len(self.store)))
        numbers = np.flatnonzero(pages.any(axis=1))
        return numbers, pages[numbers]

    def _image(self, fresh: tuple[np.ndarray, np.ndarray], index: int) -> _Image:
        """This just-started instance's heap as an ``_Image`` (``fresh``: its data pages before
        the start, as every new instance's are; the rest of a new memory is zero)."""
        size = self._mem().data_len(self.store)
        heap = self._view(0, size)
        now = _pages(heap)
        changed = now.any(axis=1)
        numbers, data = fresh
        at = 0
        for lo, hi in _runs(np.isin(np.arange(len(now)), numbers)):  # compared in place
            changed[lo:hi] = (now[lo:hi] != data[at:at + hi - lo]).any(axis=1)
            at += hi - lo
        with memoryview(heap) as view:
            runs = tuple((lo * PAGE, bytes(view[lo * PAGE:hi * PAGE])) for lo, hi in _runs(changed))
        return _Image(size=size, runs=runs, reply_index=index, buf=self._buf, request=REQUEST_BUFFER)

    def _restore(self, image: _Image) -> None:
        """Start from ``image``: grow the fresh memory to its size, copy its runs in (what the
        runtime's constructors and ``trace_processor_rpc_init`` would write)."""
        mem = self._mem()
        have = mem.data_len(self.store)
        if image.size > have:
            mem.grow(self.store, (image.size - have) // 65536)
        with memoryview(self._view(0, image.size)).cast("B") as heap:
            for offset, data in image.runs:
                heap[offset:offset + len(data)] = data
        self._buf = image.buf

    def _on_reply(self, ptr: int, length: int) -> None:
        self._replies += self._view(ptr, length & 0xFFFFFFFF)  # one copy, out of the heap

    def _view(self, ptr: int, n: int) -> ctypes.Array:
        """The heap bytes [ptr, ptr + n) in place (valid until the heap next grows)."""
        ptr &= self._ptr_mask
        if ptr + n > self._mem().data_len(self.store):
            raise IndexError("index out of range")
        return (ctypes.c_ubyte * n).from_address(self._base() + ptr)

    def _base(self) -> int:
        return ctypes.addressof(self._mem().data_ptr(self.store).contents)

    def send(self, *parts: bytes) -> None:
        """Push one serialized TraceProcessorRpcStream (consecutive ``parts``) through the request buffer,
        each copied once into the heap (not joined, nor made a bytearray as ``Memory.write`` does)."""
        if self.dead:
            raise EngineError(f"trace processor is no longer usable: {self.dead}")
        try:
            with interrupt.engine_call():
                self._send(parts)
        except (wasmtime.Trap, wasmtime.WasmtimeError, _Abort) as e:
            self._die(e)

    def _send(self, parts: tuple[bytes, ...]) -> None:
        base, filled = self._base() + self._buf, 0
        for part in parts:
            address, size, off = _address(part), len(part), 0
            while off < size:
                n = min(size - off, REQUEST_BUFFER - filled)
                ctypes.memmove(base + filled, address + off, n)
                filled, off = filled + n, off + n
                if filled == REQUEST_BUFFER:
                    self._on_request(self.store, filled)
                    base, filled = self._base() + self._buf, 0  # the heap may have moved
        if filled:
            self._on_request(self.store, filled)

    def _die(self, e: BaseException) -> None:
        self.close()  # drop the heap now
        if interrupt.requested():  # the epoch trap a signal asked for, not a crash
            self.dead = "interrupted"
            interrupt.check()
        detail = " ".join(s.strip() for s in self.stderr[-3:] if s.strip())
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        text = (msg + " " + " ".join(self.stderr[-5:])).lower()
        self.dead = f"{msg}{': ' + detail if detail else ''}"
        if any(m in text for m in _OOM_MARKS):
            raise EngineOutOfMemory(f"trace processor ran out of memory ({self.dead})") from None
        raise EngineError(f"trace processor crashed: {self.dead}") from None

    def read(self, n: int) -> bytes:
        """Return exactly n reply bytes (replies are produced synchronously by send)."""
        end = self._read_pos + n
        if end > len(self._replies):
            raise ConnectionError("trace processor sent no reply")
        with memoryview(self._replies) as view:
            out = bytes(view[self._read_pos : end])  # one copy (a bytearray slice is two)
        self._read_pos = end
        if self._read_pos == len(self._replies):
            self._replies.clear()
            self._read_pos = 0
        return out

    def close(self) -> None:
        self.memory = None
        self.store = None  # type: ignore[assignment]
        self.dead = self.dead or "closed"
