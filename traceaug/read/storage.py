"""Trace inputs and outputs named by fsspec URLs (``s3://``, ``gs://``...; ``s3fs``: ``traceaug[s3]``).
An input is copied to a temp file where its task runs; an output is uploaded whole, when the run commits."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import traceaug.atomic as atomic
import traceaug.interrupt as interrupt
import traceaug.runtime as runtime

from ..errors import TraceaugError
from ..guard import is_url  # noqa: F401  (where the readers of URLs ask)

BLOCK = 8 << 20
_loop: list = []  # fsspec's event loop, once ``filesystem`` has made it


def parse_options(pairs: tuple[str, ...] | list[str]) -> dict:
    """``KEY=VALUE`` pairs as fsspec storage options (a VALUE that is JSON is parsed: true,
    3, {"a": 1}; else it stays text)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TraceaugError(f"--storage-option {pair}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def filesystem(url: str, storage: dict | None = None):
    """(filesystem, path inside it) for ``url``."""
    try:
        import fsspec
        import fsspec.asyn
    except ImportError:
        raise TraceaugError(f"{url}: reading URLs needs fsspec: pip install 'traceaug[s3]'") from None
    if not _loop and _runs_on_a_loop(fsspec, url):  # the loop made whole (one cut short printed a
        # traceback when collected), once; never for file:// or memory:// (its thread would stop forks)
        with interrupt.held():  # later a signal must not stop a commit's undo here
            _loop.append(fsspec.asyn.get_loop())
        interrupt.check()
    try:
        return fsspec.core.url_to_fs(url, **(storage or {}))
    except Exception as e:
        raise _error(url, e) from None


def _runs_on_a_loop(fsspec, url: str) -> bool:
    """Whether ``url``'s filesystem runs on fsspec's event loop thread (s3, gcs, http; not file)."""
    try:
        return bool(fsspec.get_filesystem_class(fsspec.core.split_protocol(url)[0] or "file").async_impl)
    except (ValueError, ImportError):  # unknown, or its package missing: url_to_fs says so
        return False


def _error(url: str, e: Exception) -> TraceaugError:
    """A storage failure (OSError, or the storage library's own: missing credentials...)
    in one line naming the URL."""
    if isinstance(e, TraceaugError):
        return e
    text = getattr(e, "strerror", None) or " ".join(str(e).split()) or type(e).__name__
    return TraceaugError(f"{url}: {text}")


def listing(url: str, storage: dict | None = None) -> tuple[list[str], bool]:
    """The objects ``url`` names: itself (False), or those under it as a prefix (True)."""
    fs, path = filesystem(url, storage)
    try:
        if fs.isfile(path):
            return [url], False
        names = sorted(fs.ls(path.rstrip("/"), detail=False))
    except FileNotFoundError:
        raise TraceaugError(f"{url}: no such object or prefix") from None
    except Exception as e:
        raise _error(url, e) from None
    base = url.rstrip("/")
    return [f"{base}/{n.rstrip('/').rsplit('/', 1)[-1]}" for n in names], True


def head(url: str, storage: dict | None = None, size: int = 1 << 20) -> bytes:
    """The first ``size`` bytes of an object (decompressed when it is gzip)."""
    import gzip

    fs, path = filesystem(url, storage)
    try:
        with fs.open(path, "rb") as f:
            start = f.read(2)
            f.seek(0)
            if start == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=f) as g:
                    try:
                        return g.read(size)
                    except (OSError, EOFError):
                        return b""
            return f.read(size)
    except Exception as e:
        raise _error(url, e) from None


def size(url: str, storage: dict | None = None) -> int:
    fs, path = filesystem(url, storage)
    try:
        return int(fs.size(path) or 0)
    except Exception:
        return 0


@contextlib.contextmanager
def local_copy(url: str, storage: dict | None = None) -> Iterator[Path]:
    """The object copied in blocks to a temporary file (same name), removed afterwards;
    errors raised inside name the URL, not the copy."""
    fs, path = filesystem(url, storage)
    scratch = runtime.current().scratch  # the run's (absent where a remote worker runs)
    with atomic.scratch("traceaug-fetch-", scratch if scratch and os.path.isdir(scratch) else None) as tmp:
        local = tmp / url.rstrip("/").rsplit("/", 1)[-1]
        try:
            with fs.open(path, "rb") as src, open(local, "wb") as dst:
                shutil.copyfileobj(src, dst, BLOCK)
        except Exception as e:
            raise _error(url, e) from None
        try:
            yield local
        except TraceaugError as e:
            raise TraceaugError(str(e).replace(str(local), url)) from None


def upload(local: str | Path, url: str, storage: dict | None = None) -> None:
    """Put the file ``local`` at ``url`` whole or not at all: written uncommitted, then committed; discarded
    (a multipart upload aborted) on any failure or interrupt. A signal never cuts a request short (the
    upload's id would be lost with it): it stops the copy between blocks."""
    fs, path = filesystem(url, storage)
    try:
        out = fs.open(path, "wb", autocommit=False)
    except Exception as e:
        raise _error(url, e) from None
    try:
        with open(local, "rb") as src:
            while data := src.read(BLOCK):
                with interrupt.deferred():
                    out.write(data)
        with interrupt.deferred():
            out.close()  # the last part up, still uncommitted
        with interrupt.held():  # committed whole: a signal meanwhile stops the caller after
            out.commit()
    except BaseException as e:
        with contextlib.suppress(Exception), interrupt.deferred():
            out.discard()
        if isinstance(e, Exception):
            raise _error(url, e) from None
        raise


_TAG = f"traceaug-{os.getpid()}-{os.urandom(4).hex()}"  # this run's hidden names beside its outputs


def _beside(url: str, what: str) -> str:
    """A hidden name beside ``url`` (``.NAME.traceaug-….new``): skipped by rank discovery, as a
    local ``.NAME.*.tmp`` file is."""
    base, _, name = url.rpartition("/")
    return f"{base}/.{name}.{_TAG}.{what}"


class Store:
    """``atomic``'s place for URL outputs, with the run's storage options: each uploaded whole beside its
    target, then copied into place in the store (objects have no rename), the old object copied aside
    first to be put back if the commit fails."""

    def _fs(self, url: str):
        return filesystem(url, runtime.current().storage)

    def _call(self, url: str, name: str, *urls: str):
        fs, _ = self._fs(url)
        try:
            return getattr(fs, name)(*(self._fs(u)[1] for u in urls))
        except Exception as e:
            raise _error(url, e) from None

    def check(self, url: str) -> None:
        """Refuse an output in a bucket that does not exist, before any work."""
        fs, path = self._fs(url)
        if not hasattr(fs, "split_path"):  # not an object store: the upload says what is wrong
            return
        bucket = fs.split_path(path)[0]
        try:
            found = fs.exists(bucket)
        except Exception:  # noqa: BLE001  (no right to look: the upload will say)
            return
        if not found:
            raise TraceaugError(f"{url}: no such bucket ({bucket}); nothing was written")

    def stage(self, tmp: str, url: str) -> str:
        new = _beside(url, "new")
        upload(tmp, new, runtime.current().storage)
        return new

    def aside(self, url: str) -> str | None:
        if not self._call(url, "exists", url):
            return None
        old = _beside(url, "old")
        self._call(url, "copy", url, old)  # the target stays until the new one is copied over it
        return old

    def put(self, new: str, url: str) -> None:
        self._call(url, "copy", new, url)
        with contextlib.suppress(TraceaugError):  # in place: a copy left beside it is no harm
            self.remove(new)

    def remove(self, url: str) -> None:
        self._call(url, "rm", url)


STORE = Store()
