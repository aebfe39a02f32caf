"""What keeps the analysis commands' start and grouping cheap: the perfetto API imported
without http / ssl / email (they run on first use), grouping by lexsort giving exactly
``np.unique(..., axis=0)``'s groups, and plotly.js packed once."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

from traceaug.analysis.intervals import exclusive, int_groups, sorted_groups
from traceaug.analysis.tables import first_appearance
from traceaug.render.plotly_inline import packed_plotly

STARTUP = """
import json, sys
from traceaug.engine.imports import perfetto_light
perfetto_light()
import perfetto.trace_processor.api  # noqa: F401
before = sorted(m for m in ("ssl", "email.parser", "http.client", "logging", "numpy.ma")
                if m in sys.modules and type(sys.modules[m]).__name__ == "module")
import http.client
from urllib import request
used = [http.client.HTTPConnection.__name__, request.Request.__name__, "ssl" in sys.modules]
print(json.dumps({"before": before, "used": used}))
"""


def test_perfetto_api_imports_no_http_until_used():
    out = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == []  # none of them ran at import
    assert got["used"] == ["HTTPConnection", "Request", True]  # each runs on first use


THREADS = """
import sys, threading
from traceaug.engine.imports import perfetto_light
perfetto_light()
from urllib import request  # unrun: running it reads http.client, unrun too
errors = []
def use():
    try:
        request.Request, request.urlopen
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=use) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join(20)
print(sum(t.is_alive() for t in threads), errors)
"""


def test_lazy_modules_run_once_whole_for_every_thread():
    """urllib.request run first (as the native engine's start does) reads the unrun http.client:
    no deadlock, and no thread sees a half-run module."""
    out = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "0 []"


def test_sorted_groups_are_numpy_unique_rows():
    rng = np.random.default_rng(7)
    for n, width in ((1, 1), (6, 2), (2000, 2), (2000, 3)):
        keys = [rng.integers(-2, 3, n) for _ in range(width)]
        rows = np.stack(keys, axis=1)
        distinct, index, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        group, first = sorted_groups(*keys)
        assert group.tolist() == inverse.reshape(-1).tolist()
        assert rows[first].tolist() == distinct.tolist()
        assert first.tolist() == index.tolist()  # the first row of each group
        assert int_groups(*keys).tolist() == first_appearance(inverse.reshape(-1)).tolist()
    assert int_groups(np.empty(0, np.int64)).tolist() == []
    # device 0: streams 7, 7, 3 -> groups 0, 0, 1 (first appearance); device 1 stream 3 -> 2
    assert int_groups(np.array([0, 0, 0, 1]), np.array([7, 7, 3, 3])).tolist() == [0, 0, 1, 2]


def test_exclusive_sets_by_hand():
    # a: [0, 10), b: [5, 20): a alone 5, both 5, b alone 10; then a again [30, 31): 1
    got = exclusive({"a": (np.array([0, 30]), np.array([10, 31])), "b": (np.array([5]), np.array([20]))})
    assert got == {frozenset({"a"}): 6, frozenset({"a", "b"}): 5, frozenset({"b"}): 10}
    assert list(got) == [frozenset({"a"}), frozenset({"b"}), frozenset({"a", "b"})]  # by bit mask


def test_plotly_is_packed_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The page's plotly.js: plotly.min.js gzip + base64, packed once (keyed on the file's
    content, no importlib.metadata), stored after a line with its sha256, and then read
    from the cache, not packed or written again."""
    monkeypatch.setenv("TRACEAUG_CACHE_DIR", str(tmp_path))
    packed = packed_plotly()
    js = Path(find_spec("plotly").submodule_search_locations[0]) / "package_data" / "plotly.min.js"
    assert gzip.decompress(base64.b64decode(packed)) == js.read_bytes()
    [cached] = tmp_path.iterdir()
    assert cached.name == f"plotly-{hashlib.sha256(js.read_bytes()).hexdigest()[:32]}.min.js.gz.b64"
    digest = hashlib.sha256(packed).hexdigest()
    assert cached.read_bytes() == b"traceaug-plotly-1 " + digest.encode() + b"\n" + packed
    written = cached.stat()
    assert packed_plotly() == packed
    again = cached.stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
