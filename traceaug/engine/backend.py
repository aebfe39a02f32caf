"""Plug the engines (embedded wasm, or a native shell) into the official ``perfetto`` API, adding what
upstream leaves out (loading with its finalize error, SQL packages); ``tp.query(sql)`` works unchanged."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from perfetto.trace_processor.api import PLATFORM_DELEGATE, TraceProcessorConfig
from perfetto.trace_processor.api import TraceProcessor as _UpstreamTP
from perfetto.trace_processor.protos import ProtoFactory
from perfetto.trace_processor.rpc import TraceProcessorRpc
from perfetto.trace_processor.shell import TraceProcessorHttpSubprocess

from ..errors import EngineError
from .wasm_instance import WasmInstance
from .wasm_module import load_build

APPEND_LIMIT = 32 << 20  # each TPM_APPEND_TRACE_DATA message stays well under 64 MiB


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _append_header(size: int) -> bytes:
    """A TraceProcessorRpcStream of one TPM_APPEND_TRACE_DATA request up to its data: msg (1) { request (2)
    = TPM_APPEND_TRACE_DATA (1), append_trace_data (101) = ``size`` bytes }."""
    inner = b"\x10\x01\xaa\x06" + _varint(size)
    return b"\x0a" + _varint(len(inner) + size) + inner


class _RpcLoading:
    """Loading and SQL packages over Perfetto's RPC protocol, for either engine; upstream's
    clients leave these out (its RPC client) or drop the finalize error (its HTTP client)."""

    protos: ProtoFactory

    def _exchange(self, request: bytes):
        """Send one serialized TraceProcessorRpcStream; return the TraceProcessorRpc reply."""
        raise NotImplementedError

    def _call(self, request: str, **fields):
        """Send one ``request`` (a ``TraceProcessorRpc`` request name) with ``fields`` set."""
        stream = self.protos.TraceProcessorRpcStream()
        stream.msg.add(request=getattr(self.protos.TraceProcessorRpc, request), **fields)
        reply = self._exchange(stream.SerializeToString())
        TraceProcessorRpc._check_envelope(self, reply)  # uses only self.protos
        return reply

    def parse(self, chunk: bytes | list[bytes]):
        """Append trace bytes (one piece, or consecutive pieces); returns the append result."""
        if isinstance(chunk, list):
            chunk = b"".join(chunk)
        result = None
        for off in range(0, len(chunk), APPEND_LIMIT):
            result = self._call("TPM_APPEND_TRACE_DATA",
                                append_trace_data=bytes(chunk[off : off + APPEND_LIMIT])).append_result
            if result.error:
                return result
        return result

    def notify_eof(self) -> str:
        """Finalize loading; returns Perfetto's error text ('' when fine)."""
        return self._call("TPM_FINALIZE_TRACE_DATA").finalize_data_result.error

    def register_sql_package(self, name: str, modules: dict[str, str]) -> None:
        """Make ``INCLUDE PERFETTO MODULE name.x`` find our own PerfettoSQL."""
        args = {"package_name": name, "allow_override": True,
                "modules": [{"name": path, "sql": sql} for path, sql in modules.items()]}
        reply = self._call("TPM_REGISTER_SQL_PACKAGE", register_sql_package_args=args)
        error = reply.register_sql_package_result.error
        if error:
            raise EngineError(f"registering SQL package {name}: {error}")


class WasmBackend(_RpcLoading, TraceProcessorRpc):
    """The RPC client over an in-process wasm instance."""

    def __init__(self, protos: ProtoFactory, memory64: bool = False) -> None:
        self.instance = WasmInstance(load_build(memory64))
        super().__init__(self.instance, protos)

    def _exchange(self, *request: bytes):
        self.transport.send(*request)
        reply = self.protos.TraceProcessorRpc()
        reply.MergeFromString(self._read_payload())
        return reply

    def parse(self, chunk: bytes | list[bytes]):
        """Append trace bytes; the request is framed by hand so each piece goes into the heap
        as it is, never joined or copied into a protobuf message first."""
        pieces = chunk if isinstance(chunk, list) else [chunk]
        size = sum(map(len, pieces))
        if size > APPEND_LIMIT:
            return super().parse(chunk)
        reply = self._exchange(_append_header(size), *pieces)
        TraceProcessorRpc._check_envelope(self, reply)
        return reply.append_result

    def close(self) -> None:
        self.instance.close()


class NativeBackend(_RpcLoading, TraceProcessorHttpSubprocess):
    """A ``trace_processor_shell`` the user has, started by upstream; loading goes through its
    ``/rpc`` endpoint (one request per POST, the reply stream in the body), queries as upstream."""

    def _exchange(self, request: bytes):
        with _shell_errors():
            self.conn.request("POST", "/rpc", body=request)
            with self.conn.getresponse() as f:
                body = f.read()
        stream = self.protos.TraceProcessorRpcStream()
        stream.MergeFromString(body)
        if len(stream.msg) != 1:
            raise EngineError(f"trace_processor_shell sent {len(stream.msg)} replies to one request")
        return stream.msg[0]

    def execute_query(self, query: str):
        with _shell_errors():
            return super().execute_query(query)


@contextmanager
def _shell_errors() -> Iterator[None]:
    """The shell died or hung up: an ``EngineError``, which users see as one line."""
    try:
        yield
    except (OSError, http.client.HTTPException) as e:
        raise EngineError(f"trace_processor_shell stopped answering ({_one_line(e)})") from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


@lru_cache(maxsize=1)
def _protos() -> ProtoFactory:
    """The RPC message classes, built once per process: upstream builds them from their
    descriptors for every ``TraceProcessor`` (10 ms, a tenth of a small rank's task)."""
    return ProtoFactory(PLATFORM_DELEGATE())


class TraceProcessor(_UpstreamTP):
    """Upstream ``TraceProcessor`` backed by the wasm build (or a native shell)."""

    def __init__(self, memory64: bool = False, bin_path: str | None = None) -> None:
        self._memory64 = memory64
        self._bin_path = bin_path
        # upstream's __init__ without a trace to load, but with the process's one ProtoFactory
        self.config = TraceProcessorConfig(bin_path=bin_path) if bin_path else TraceProcessorConfig()
        self.platform_delegate = PLATFORM_DELEGATE()
        self.protos = _protos()
        self.resolver_registry = (self.config.resolver_registry
                                  or self.platform_delegate.default_resolver_registry())
        try:
            self._backend = self._create_backend(None, None)
            self.http = self._backend  # upstream keeps this old name of the backend too
        except Exception as e:  # upstream raises bare Exceptions when a native shell will not start
            if not bin_path or isinstance(e, EngineError):
                raise
            raise EngineError(f"{bin_path}: cannot start trace_processor_shell ({_one_line(e)})") from None

    def _create_backend(self, remote, addr):
        if self._bin_path:
            return NativeBackend(self.config, self.platform_delegate, self.protos)
        return WasmBackend(self.protos, memory64=self._memory64)

    @property
    def backend(self):
        """The backend in use (wasm or native shell over HTTP)."""
        return self._backend
