"""Errors traceaug reports to users as one clear line (no traceback)."""

from __future__ import annotations


class TraceaugError(Exception):
    """A user-facing problem (bad input, bad SQL, missing engine): one line naming the file, if any, and the
    problem; the CLI prints it and exits non-zero."""


class EngineError(TraceaugError):
    """The trace processor failed: a trap (abort, out of memory) or bad RPC."""


class EngineOutOfMemory(EngineError):
    """The wasm trace processor ran out of its linear memory."""


class SumTooLarge(TraceaugError):
    """Times that add up past int64 ns: the command names the input it came from."""
