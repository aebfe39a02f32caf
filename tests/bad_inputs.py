"""A generated corpus of bad (and borderline) trace inputs, for tests/test_bad_inputs.py.

Each case is a name and the bytes of one file (or a special file made at test time):
truncations (plain and gzip), gzip faults, wrong types and values in every field traceaug
reads, huge and non-UTF-8 names, deep nesting and malformed structure. Built from
``kineto_gen``'s valid trace, so the fields are the ones real Kineto traces carry.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import math
import zipfile
import zlib

import kineto_gen

KERNEL = 5  # index in kineto_gen.events(): metadata (2), step 0: step, op, launch, kernel
MEMCPY = 7


def _valid() -> dict:
    return kineto_gen.trace()


def _dump(obj) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()


def _with(index: int, field: str, value, raw: str | None = None) -> bytes:
    """The valid trace with one field of event ``index`` set (``raw``: JSON text as is)."""
    t = _valid()
    ev = t["traceEvents"][index]
    target = ev["args"] if field.startswith("args.") else ev
    key = field.removeprefix("args.")
    marker = "__SET_ME__"
    target[key] = marker if raw is not None else value
    text = _dump(t)
    if raw is not None:
        text = text.replace(json.dumps(marker).encode(), raw.encode(), 1)
    return text


def _without(index: int, field: str) -> bytes:
    t = _valid()
    ev = t["traceEvents"][index]
    (ev["args"] if field.startswith("args.") else ev).pop(field.removeprefix("args."))
    return _dump(t)


VALUES: dict[str, str] = {  # JSON text of each odd value
    "null": "null", "true": "true", "string": '"x"', "lots": '"lots"', "list": "[1]",
    "object": '{"a": 1}', "negative": "-5", "huge_float": "1e308", "neg_huge_float": "-1e308",
    "nan": "NaN", "infinity": "Infinity", "int_2p63": str(2**63), "int_2p64": str(2**64 + 5),
    "int_neg_2p63": str(-(2**63) - 1), "fraction": "1.2345678", "empty_string": '""',
}
FIELDS = ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args", "args.correlation",
          "args.device", "args.stream")
MEMCPY_FIELDS = ("args.bytes", "args.memory bandwidth (GB/s)")


FIELD_VALUES = ("null", "true", "lots", "object", "negative", "huge_float", "nan", "int_2p64")
COPY_VALUES = ("lots", "negative", "neg_huge_float", "nan")


def field_cases() -> dict[str, bytes]:
    """Every field traceaug reads, set to odd values (or left out), on a kernel (and a copy's
    args)."""
    cases = {}
    for f in FIELDS:
        for v in FIELD_VALUES:
            cases[f"kernel.{f}={v}"] = _with(KERNEL, f, None, VALUES[v])
        cases[f"kernel.{f}=missing"] = _without(KERNEL, f)
    for f in MEMCPY_FIELDS:
        for v in COPY_VALUES:
            cases[f"memcpy.{f}={v}"] = _with(MEMCPY, f, None, VALUES[v])
    return cases


def _every_dur(value: int) -> bytes:
    t = _valid()
    for ev in t["traceEvents"]:
        if "dur" in ev:
            ev["dur"] = value
    return _dump(t)


def structure_cases() -> dict[str, bytes]:
    valid = _dump(_valid())
    t = _valid()
    bare_number = copy.deepcopy(t)
    bare_number["traceEvents"].insert(3, 42)
    bare_string = copy.deepcopy(t)
    bare_string["traceEvents"].insert(3, "event")
    nested = copy.deepcopy(t)
    nested["traceEvents"][KERNEL]["args"]["nested"] = {"a": {"b": [1, {"c": 2}]}}
    header_types = {}
    for key, value in (("traceEvents", 5), ("traceEvents", {"a": 1}), ("traceEvents", None),
                       ("distributedInfo", "x"), ("distributedInfo", {"rank": "zero"}),
                       ("distributedInfo", {"rank": 2**70}), ("deviceProperties", "x"),
                       ("deviceProperties", [1, None])):
        h = copy.deepcopy(t)
        h[key] = value
        header_types[f"header.{key}={json.dumps(value)}"] = _dump(h)
    deep = b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
    deep_args = valid.replace(b'"args": {"correlation": 1, "device": 0',
                              b'"args": {"d": ' + b"[" * 5000 + b"]" * 5000 +
                              b', "correlation": 1, "device": 0', 1)
    return {
        "empty_object": b"{}", "empty_array": b"[]", "whitespace": b" \n\t ",
        "null": b"null", "number": b"42", "string": b'"trace"', "not_json": b"hello world",
        "binary": bytes(range(256)) * 4, "nul_bytes": b"\0" * 1000,
        "utf16": valid.decode().encode("utf-16"), "bom": b"\xef\xbb\xbf" + valid,
        "bare_number_event": _dump(bare_number), "bare_string_event": _dump(bare_string),
        "nested_args": _dump(nested), "trailing_garbage": valid + b" garbage",
        "trailing_brace": valid + b"}", "two_objects": valid + valid,
        "array_form": _dump(t["traceEvents"]), "duplicate_keys": valid.replace(
            b'"ts": ', b'"ts": 1, "ts": ', 1),
        "every_dur_negative": _every_dur(-10), "every_dur_zero": _every_dur(0),
        "deep_nesting": deep, "deep_args": deep_args,
        "unclosed_string": valid.replace(b'"gemm_kernel"', b'"gemm_kernel', 1),
        "control_char_in_string": valid.replace(b"gemm_kernel", b"gemm\x01kernel", 1),
        "lone_surrogate_name": valid.replace(b"gemm_kernel", b"gemm\\ud800kernel", 1),
        "non_utf8_name": valid.replace(b"gemm_kernel", b"gemm\xff\xfekernel", 1),
        "huge_name": valid.replace(b"gemm_kernel", b"k" * 2_000_000, 1),
        "huge_number": valid.replace(b'"ts": ', b'"ts": 1' + b"0" * 5000 + b", \"x\": ", 1),
        "no_events_key": _dump({"schemaVersion": 1}),
        **header_types,
    }


def truncation_cases() -> dict[str, bytes]:
    valid = _dump(_valid())
    gz = gzip.compress(valid, mtime=0)
    cases = {}
    for frac in (0.001, 0.1, 0.33, 0.5, 0.8, 0.999):
        cut = max(1, int(len(valid) * frac))
        cases[f"truncated_plain_{frac}"] = valid[:cut]
        cases[f"truncated_then_gz_{frac}"] = gzip.compress(valid[:cut], mtime=0)
    for frac in (0.1, 0.5, 0.97):
        cases[f"truncated_gz_{frac}"] = gz[: max(3, int(len(gz) * frac))]
    cases["last_byte_missing"] = valid[:-1]
    cases["gz_last_byte_missing"] = gz[:-1]
    return cases


def gzip_cases() -> dict[str, bytes]:
    valid = _dump(_valid())
    gz = bytearray(gzip.compress(valid, mtime=0))
    bad_crc = bytearray(gz)
    bad_crc[-8] ^= 0xFF
    bad_size = bytearray(gz)
    bad_size[-1] ^= 0x01
    bad_body = bytearray(gz)
    bad_body[len(gz) // 2] ^= 0xFF
    bad_flags = bytearray(gz)
    bad_flags[3] = 0xE0  # reserved flag bits
    bad_method = bytearray(gz)
    bad_method[2] = 7
    return {
        "gz_magic_only": b"\x1f\x8b", "gz_header_only": bytes(gz[:10]),
        "gz_bad_crc": bytes(bad_crc), "gz_bad_isize": bytes(bad_size),
        "gz_corrupt_body": bytes(bad_body), "gz_reserved_flags": bytes(bad_flags),
        "gz_bad_method": bytes(bad_method), "gz_trailing_garbage": bytes(gz) + b"garbage!",
        "gz_two_members": bytes(gzip.compress(valid[:100], mtime=0)) + bytes(
            gzip.compress(valid[100:], mtime=0)),
        "gz_empty": gzip.compress(b"", mtime=0), "gz_not_json": gzip.compress(b"hello", mtime=0),
        "gz_double": gzip.compress(bytes(gz), mtime=0),
        "gz_nul_bytes": gzip.compress(b"\0" * 100_000, mtime=0),
    }


def wrapper_cases() -> dict[str, bytes]:
    """Containers no command reads (one verdict for all of them) and whitespace every command
    reads past."""
    valid = _dump(_valid())
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("trace.json", valid)
    return {"zip_gz": zipped.getvalue(), "lead_space_lines": b" \n" * 100_000 + valid,
            "lead_space_gz": gzip.compress(b" " * 3_000_000 + valid, mtime=0), **_space_runs()}


RUN = 3 << 20  # whitespace longer than pass 1's 2 MB cut window


def _space_runs() -> dict[str, bytes]:
    """Runs of whitespace inside traceEvents that every command reads past: after the [,
    after a comma, before a comma, before the ]; and one hiding a missing comma."""
    evs = [json.dumps(e).encode() for e in kineto_gen.events()]
    head = b'{"traceEvents":['

    def doc(body: bytes) -> bytes:
        return head + body + b"]}"

    return {"space_run_lead": doc(b" " * RUN + b",".join(evs)),
            "space_run_after_comma": doc(b",".join(evs[:5]) + b"," + b"\n" * RUN + b",".join(evs[5:])),
            "space_run_before_comma": doc(b",".join(evs[:9]) + b" " * RUN + b"," + b",".join(evs[9:])),
            "space_run_before_end": doc(b",".join(evs) + b"\t" * RUN),
            "space_run_no_comma": doc(b",".join(evs[:9]) + b" " * RUN + b",".join(evs[9:]))}


def cases() -> dict[str, bytes]:
    """Every byte case, by name."""
    return {**truncation_cases(), **gzip_cases(), **structure_cases(), **field_cases(),
            **wrapper_cases()}


# ----- the declared verdict, from the bytes alone -------------------------------------------

US_LIMIT = 2.0**63 / 1000  # ts and dur are int64 ns: |µs| at or past this cannot be held


class Refused(Exception):
    """The case must be refused by every command."""


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _utf8(value) -> None:
    """Every string of a parsed document must be valid Unicode (no lone surrogate)."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, list):
        for v in value:
            _utf8(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            _utf8(k)
            _utf8(v)


def _document(data: bytes) -> object:
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)  # every member; trailing garbage is an error
    text = data.decode("utf-8")  # a BOM stays a character, which JSON refuses

    def no_constant(name: str):
        raise ValueError(f"{name} is not JSON")

    def finite(text: str) -> float:
        value = float(text)
        if math.isinf(value):
            raise ValueError("a number too large for a double")
        return value

    doc = json.loads(text, parse_constant=no_constant, parse_float=finite)
    _utf8(doc)
    return doc


def _events(doc: object) -> list:
    events = doc if isinstance(doc, list) else (
        doc.get("traceEvents") if isinstance(doc, dict) else None)
    if not isinstance(events, list) or not events:
        raise Refused("no trace events")
    return events


def _kept_kernel(ev: dict) -> bool:
    """Checks one event as every command does; True for a kernel the trace shows: a complete
    event (with a dur) of category kernel, not before time 0."""
    if ev.get("ph") == "M":
        return False
    if not _number(ev.get("ts")) or abs(ev["ts"]) >= US_LIMIT:
        raise Refused("ts is not a number in range")
    if "dur" in ev and (not _number(ev["dur"]) or abs(ev["dur"]) >= US_LIMIT):
        raise Refused("dur is not a number in range")
    return ev.get("ph") == "X" and ev.get("cat") == "kernel" and "dur" in ev and ev["ts"] >= 0


def expected_kernels(data: bytes) -> int | None:
    """The kernels every command must see in ``data``, or None when every command must refuse
    it: from Python's own gzip and strict JSON, and the rules README states (ts / dur numbers
    that fit int64 ns, events as objects)."""
    try:
        events = _events(_document(data))
        if not all(isinstance(ev, dict) for ev in events):
            raise Refused("an event is not an object")
        return sum(_kept_kernel(ev) for ev in events)
    except (Refused, ValueError, UnicodeError, RecursionError, OSError, EOFError, zlib.error):
        return None
