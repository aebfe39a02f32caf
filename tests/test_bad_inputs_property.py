"""Property-based bad inputs on top of the fixed corpus: random cuts, byte edits and
insertions in a valid trace (plain or gzip), each through one command, under the same rules."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path

import kineto_gen
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_inputs import check_run

VALID = json.dumps(kineto_gen.trace()).encode()

edits = st.one_of(
    st.tuples(st.just("cut"), st.integers(0, len(VALID)), st.just(b"")),
    st.tuples(st.just("replace"), st.integers(0, len(VALID) - 1), st.binary(min_size=1, max_size=4)),
    st.tuples(st.just("insert"), st.integers(0, len(VALID)),
              st.sampled_from([b"NaN", b"null", b"1e400", b"-", b"}", b"]", b",", b'"', b"\xff",
                               b"\\u0000", b"[" * 50, b"\0", b'{"ph":"X"}'])),
)


def edited(edit: tuple[str, int, bytes]) -> bytes:
    kind, at, data = edit
    if kind == "cut":
        return VALID[:at]
    if kind == "replace":
        return VALID[:at] + data + VALID[at + len(data):]
    return VALID[:at] + data + VALID[at:]


@settings(max_examples=24, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(edit=edits, gz=st.booleans(), kind=st.sampled_from(["info", "query", "counters"]))
def test_random_edits_follow_the_rules(edit, gz: bool, kind: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        data = edited(edit)
        path = Path(d) / ("t.json.gz" if gz else "t.json")
        path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        check_run(kind, path, path.read_bytes())
        assert sorted(os.listdir(d)) == [path.name]
