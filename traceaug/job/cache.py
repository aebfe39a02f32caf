"""The per-rank table cache of the job runner: what a rank's task computed, kept on disk (or under an
object-store prefix) and reused by any later command asking the same of the same file; see
docs/internals.md "Job cache" for the key, the format and why an edit cannot be missed."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import traceaug.runtime as runtime

from ..read.storage import is_url

MAGIC = b"traceaug-table-cache-1\n"
HEADER = struct.Struct("<QQ32s")  # compressed length, pickled length, blake2b-256 of the compressed
SUFFIX = ".entry"
DEFAULT_MAX = 4_000_000_000
STALE_TMP_S = 3600  # a writer's temporary file older than this was left by a killed writer
BLOCK = 8 << 20


def default_root() -> str:
    """``$XDG_CACHE_HOME/traceaug/tables`` (else ``~/.cache/traceaug/tables``): beside, never
    among, the compiled engine modules ``engine.wasm_module`` keeps in ``traceaug/``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "traceaug", "tables")


def max_bytes(text: str | None = None) -> int:
    """The bound: ``TRACEAUG_CACHE_MAX`` (bytes, or with K / M / G / T: powers of 1000), default 4 GB."""
    text = (os.environ.get("TRACEAUG_CACHE_MAX") if text is None else text) or ""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not found:
        return DEFAULT_MAX
    return int(float(found[1]) * 1000 ** " kmgt".index(found[2] or " "))


def where(given: str | None = None, off: bool = False) -> Cache | None:
    """The cache a run uses: none with ``off`` (``--no-cache``), ``given`` (``--cache``), none with
    ``TRACEAUG_NO_CACHE`` set, ``TRACEAUG_CACHE``, else the user's cache directory."""
    if off:
        return None
    if given is None and os.environ.get("TRACEAUG_NO_CACHE", "").strip() not in ("", "0"):
        return None
    return place(given)


def place(given: str | None = None) -> Cache:
    """The cache at ``given``, else ``TRACEAUG_CACHE``, else the user's cache directory."""
    root = str(given or os.environ.get("TRACEAUG_CACHE") or default_root())
    return Cache(root.rstrip("/") if is_url(root) else str(Path(root).expanduser().absolute()),
                 max_bytes())


_code: list[str] = []


def code_digest() -> str:
    """traceaug's version and its source files' names, sizes and mtimes (the pinned engine build's
    sha256 is in one), so an upgrade or an edited install never reads an older answer; once per process."""
    if not _code:
        from ..version import __version__

        root = Path(__file__).resolve().parent.parent
        files = sorted([*root.rglob("*.py"), *root.rglob("*.sql")])
        stats = [(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
        _code.append(hashlib.blake2b(repr((__version__, stats)).encode(), digest_size=16).hexdigest())
    return _code[0]


def engine_id() -> str:
    """The engine build: the native shell as it is on disk (path, size, mtime), else the pinned wasm."""
    tp_bin = runtime.current().tp_bin
    if not tp_bin:
        return "wasm"
    st = os.stat(tp_bin)
    return f"{os.path.abspath(tp_bin)}:{st.st_size}:{st.st_mtime_ns}"


def file_id(path: str | Path, memo: Path | None = None) -> str:
    """What a rank's answer depends on in its file: the name as given (results carry it), the size,
    the modification time and a sha256 of every byte; an object's ETag and version id (rewritten, it
    gets new ones). ``memo``: a directory remembering each local file's digest with its stat."""
    if is_url(path):
        from ..read.storage import filesystem

        fs, inner = filesystem(str(path), runtime.current().storage)
        info = fs.info(inner)
        tags = [str(info.get(k, "")) for k in ("ETag", "VersionId", "size", "LastModified",
                                                "mtime", "md5", "generation")]
        return f"{path}|{'|'.join(tags)}"
    st = os.stat(path)
    return f"{path}|{st.st_size}|{st.st_mtime_ns}|{digest(path, st, memo)}"


def digest(path: str | Path, st: os.stat_result, memo: Path | None) -> str:
    """sha256 of every byte of ``path`` (hashlib's fastest where the CPU has SHA instructions), hashed again
    unless ``memo`` holds it for this very stat: device, inode, size, mtime and ctime. The kernel sets ctime
    on every write and every change of mtime, and no call sets it back, so an edit that keeps the size and
    puts the mtime back still misses the memo and is hashed."""
    stamp = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    kept = memo / hashlib.blake2b(os.path.abspath(path).encode(), digest_size=16).hexdigest() \
        if memo is not None else None
    with contextlib.suppress(OSError, ValueError):
        was, found = kept.read_text().split() if kept is not None else ("", "")
        if was == stamp:
            return found
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(BLOCK):
            h.update(data)
    if kept is not None:
        with contextlib.suppress(OSError):
            _Local(kept.parent).write(kept.name, f"{stamp} {h.hexdigest()}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Entry:
    """One rank's entry for one work: where it is (``root``/``name``), and what it holds (``opened``:
    the task's opened tables, else its result); picklable, it travels with the task that fills it."""

    root: str
    name: str
    opened: bool

    def exists(self) -> bool:
        return _store(self.root).exists(self.name)

    def get(self) -> tuple[bool, Any]:
        """(True, the value) when the entry is there whole, else (False, None); an entry failing its
        checksum is removed (recomputed by the caller, never read as data)."""
        data = _store(self.root).read(self.name)
        if data is None:
            return False, None
        value = decode(data)
        if value is _BAD:
            _store(self.root).remove(self.name)
            return False, None
        _store(self.root).touch(self.name)
        return True, value

    def put(self, value: Any) -> None:
        """``value`` stored whole or not at all; a cache that cannot be written leaves the answer as it is."""
        with contextlib.suppress(Exception):
            _store(self.root).write(self.name, encode(value))


_BAD = object()


def encode(value: Any) -> bytes:
    """``value`` as an entry: pickled (as results travel between processes), zstd-compressed, its length
    and blake2b-256 in the header."""
    import zstandard

    raw = pickle.dumps(value, protocol=5)
    packed = zstandard.ZstdCompressor().compress(raw)
    return MAGIC + HEADER.pack(len(packed), len(raw), hashlib.blake2b(packed, digest_size=32).digest()) \
        + packed


def decode(data: bytes) -> Any:
    """An entry's value, or ``_BAD`` when it is not one whole (truncated, corrupted, another format)."""
    start = len(MAGIC) + HEADER.size
    if len(data) < start or not data.startswith(MAGIC):
        return _BAD
    size, raw, digest = HEADER.unpack_from(data, len(MAGIC))
    packed = memoryview(data)[start:]
    if len(packed) != size or hashlib.blake2b(packed, digest_size=32).digest() != digest:
        return _BAD
    import zstandard

    try:
        return pickle.loads(zstandard.ZstdDecompressor().decompress(packed, max_output_size=raw))
    except Exception:  # noqa: BLE001  (a matching digest of another pickle's classes)
        return _BAD


@dataclass(frozen=True)
class Cache:
    """A cache's place (a directory or an fsspec URL prefix) and its bound in bytes."""

    root: str
    bound: int = DEFAULT_MAX

    def entries(self, work: Any, item: Any, ids: dict | None = None) -> tuple[Entry | None, Entry | None]:
        """``item``'s entries for ``work`` (``job.run``'s): what its task opens when that is plain
        data (shared by every work opening it so), and its result; None where nothing is kept: a task
        writing an output, a caller's own function (``cache=False``), a parameter or ``--capture`` naming a
        file (its content is not in the key); ``--step-pattern`` is in the key. ``ids``: ``file_ids``'."""
        rt = runtime.current()
        if item.out is not None or not work.cache or rt.capture or any(
                isinstance(v, os.PathLike) for v in work.params.values()):
            return None, None
        ids = ids or {}
        try:
            files = [ids.get(f.path) or self.file_id(f.path) for f in (item.file, item.other)
                     if f is not None]
        except Exception:  # noqa: BLE001  (unreadable: the rank's task says why)
            return None, None

        def entry(what: tuple, opened: bool) -> Entry:
            key = hashlib.blake2b(repr((what, item.rank, files, rt.step_pattern, code_digest(),
                                        engine_id())).encode(),
                                  digest_size=16).hexdigest()
            return Entry(self.root, f"{folder(files[0])}/{work.kind}.{key}{SUFFIX}", opened)

        opens = (work.kind, _name(work.opens))
        plain = getattr(getattr(work.opens, "func", work.opens), "plain", False)
        return (entry(opens, True) if plain else None,
                entry((*opens, _name(work.per_rank), pickle.dumps(work.params, 5)), False))

    def file_id(self, path: str | Path) -> str:
        """``file_id`` with its digests remembered in the cache (a local one)."""
        return file_id(path, None if is_url(self.root) else Path(self.root) / "digests")

    def file_ids(self, paths: list) -> dict:
        """``file_id`` of each of ``paths`` that can be read, found on threads (each in the caller's
        context: its runtime, ``processes.Threads``): a cold job's files hash on every core, an object store's
        info calls overlap."""
        from ..processes import Threads

        def known(path: str | Path) -> str | None:
            try:
                return self.file_id(path)
            except Exception:  # noqa: BLE001  (unreadable: the rank's task says why)
                return None

        with Threads(max(1, min(len(paths), os.cpu_count() or 1, 8))) as pool:
            found = [pool.submit(known, p) for p in paths]
            return {p: f.result() for p, f in zip(paths, found, strict=True)}

    def state(self, path: str | Path) -> str:
        """The load kinds whose tables the cache holds for ``path`` (``info``'s cache column), or none."""
        try:
            names = _store(self.root).names(folder(self.file_id(path)))
        except Exception:  # noqa: BLE001  (unreadable now: nothing of it is used)
            return "none"
        return ", ".join(sorted({n.split(".", 1)[0] for n in names})) or "none"

    def listing(self) -> list[tuple[str, int, float]]:
        """Every entry: (name, bytes, last used as a POSIX time)."""
        return _store(self.root).entries()

    def trim(self) -> int:
        """Remove the least recently used entries until the cache holds at most its bound, and
        temporary files killed writers left; the bytes removed."""
        store = _store(self.root)
        found = sorted(self.listing(), key=lambda e: e[2])
        total, removed = sum(e[1] for e in found), 0
        for name, size, _ in found:
            if total - removed <= self.bound:
                break
            store.remove(name)
            removed += size
        store.sweep()
        return removed

    def clear(self) -> list[tuple[str, int, float]]:
        """Remove every entry (and the digests kept beside them); those removed."""
        found = self.listing()
        for name, _, _ in found:
            _store(self.root).remove(name)
        _store(self.root).sweep(0)
        if not is_url(self.root):
            import shutil

            shutil.rmtree(Path(self.root) / "digests", ignore_errors=True)
        return found


def folder(file: str) -> str:
    """The folder of a file's entries (its identity's digest): ``info`` lists it, edits move to another."""
    return hashlib.blake2b(f"{file}|{code_digest()}".encode(), digest_size=16).hexdigest()


def _name(fn: Any) -> str | None:
    """A function's name for a key; a ``functools.partial``'s with its bound arguments."""
    if isinstance(fn, functools.partial):
        return f"{_name(fn.func)}{fn.args!r}{sorted(fn.keywords.items())!r}"
    return None if fn is None else f"{fn.__module__}.{fn.__qualname__}"


def _store(root: str) -> _Local | _Remote:
    return _Remote(root) if is_url(root) else _Local(Path(root))


@dataclass(frozen=True)
class _Local:
    """Entries as files: written to a hidden temporary name and renamed (a reader sees the whole
    entry or none, and a killed writer leaves only a temporary file); a hit touches its entry."""

    root: Path

    def read(self, name: str) -> bytes | None:
        try:
            return (self.root / name).read_bytes()
        except OSError:
            return None

    def write(self, name: str, data: bytes) -> None:
        from ..atomic import atomic_output

        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path, "wb", hold=False) as f:
            f.write(data)

    def exists(self, name: str) -> bool:
        return (self.root / name).is_file()

    def touch(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.root / name)

    def remove(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.root / name)
        with contextlib.suppress(OSError):
            (self.root / name).parent.rmdir()  # when it was the folder's last

    def names(self, under: str) -> list[str]:
        with contextlib.suppress(OSError):
            return [p.name for p in (self.root / under).iterdir() if p.name.endswith(SUFFIX)]
        return []

    def entries(self) -> list[tuple[str, int, float]]:
        out = []
        for path in self._files():
            if path.name.endswith(SUFFIX) and not path.name.startswith("."):
                with contextlib.suppress(OSError):
                    st = path.stat()
                    out.append((str(path.relative_to(self.root)), st.st_size, st.st_mtime))
        return out

    def sweep(self, age: float = STALE_TMP_S) -> None:
        for path in self._files():
            with contextlib.suppress(OSError):
                if path.name.startswith(".") and time.time() - path.stat().st_mtime >= age:
                    self.remove(str(path.relative_to(self.root)))

    def _files(self) -> Iterator[Path]:
        with contextlib.suppress(OSError):
            for sub in self.root.iterdir():
                if sub.is_dir():
                    yield from sub.iterdir()


@dataclass(frozen=True)
class _Remote:
    """Entries as objects under a URL prefix: one PUT each, so an object is whole or absent (no
    rename to do); object stores have no access time, so their order of use is the order written."""

    root: str

    def _fs(self, name: str = ""):
        from ..read.storage import filesystem

        return filesystem(f"{self.root}/{name}" if name else self.root, runtime.current().storage)

    def read(self, name: str) -> bytes | None:
        fs, path = self._fs(name)
        try:
            return fs.cat_file(path)
        except Exception:  # noqa: BLE001  (absent, or unreadable: computed again)
            return None

    def write(self, name: str, data: bytes) -> None:
        fs, path = self._fs(name)
        fs.pipe_file(path, data)

    def exists(self, name: str) -> bool:
        fs, path = self._fs(name)
        with contextlib.suppress(Exception):
            return fs.exists(path)
        return False

    def touch(self, name: str) -> None:
        return None

    def remove(self, name: str) -> None:
        fs, path = self._fs(name)
        with contextlib.suppress(Exception):
            fs.rm_file(path)

    def names(self, under: str) -> list[str]:
        fs, path = self._fs(under)
        with contextlib.suppress(Exception):
            return [p.rsplit("/", 1)[-1] for p in fs.ls(path, detail=False) if p.endswith(SUFFIX)]
        return []

    def entries(self) -> list[tuple[str, int, float]]:
        fs, path = self._fs()
        out = []
        with contextlib.suppress(Exception):
            for full, info in fs.find(path, detail=True).items():
                if full.endswith(SUFFIX):
                    when = info.get("LastModified") or info.get("mtime") or 0
                    out.append((full[len(path):].lstrip("/"), int(info.get("size") or 0),
                                when.timestamp() if hasattr(when, "timestamp") else float(when)))
        return out

    def sweep(self, age: float = STALE_TMP_S) -> None:
        return None
