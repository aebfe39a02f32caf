"""plotly.js for a self-contained offline page: gzip + base64 inline, unpacked by ``DecompressionStream``;
packed once per plotly.min.js into the cache, and a cached copy used only if its sha256 header matches."""

from __future__ import annotations

import base64
import gzip
import hashlib
from importlib import util
from pathlib import Path

from ..atomic import atomic_output
from ..engine.wasm_module import cache_dir

_MAGIC = b"traceaug-plotly-1 "  # then the hex sha256 of the packed bytes, a newline, the bytes

# Runs ``draw()`` once plotly.js is unpacked and loaded (from a blob: URL, no network).
BOOT = """
async function bootPlotly(packed, draw) {
  const bytes = Uint8Array.from(atob(packed), c => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const code = await new Response(stream).text();
  const url = URL.createObjectURL(new Blob([code], {type: "text/javascript"}));
  await new Promise((ok, fail) => {
    const s = document.createElement("script");
    s.src = url; s.onload = ok; s.onerror = fail; document.head.appendChild(s);
  });
  draw();
}
"""


def _checked(cached: bytes) -> bytes | None:
    """The packed bytes of a cache file whose header's sha256 matches them; None otherwise."""
    head, newline, body = cached.partition(b"\n")
    if not newline or not head.startswith(_MAGIC):
        return None
    return body if hashlib.sha256(body).hexdigest().encode() == head[len(_MAGIC):] else None


def packed_plotly() -> bytes:
    """plotly.min.js, gzip-compressed and base64-encoded (ASCII bytes, written as they are); cached under its
    content's digest, so every install of one plotly shares one copy (not one per install's mtime)."""
    package = Path(util.find_spec("plotly").submodule_search_locations[0])  # never imported
    js = (package / "package_data" / "plotly.min.js").read_bytes()
    cached = cache_dir() / f"plotly-{hashlib.sha256(js).hexdigest()[:32]}.min.js.gz.b64"
    try:
        packed = _checked(cached.read_bytes())
    except OSError:
        packed = None
    if packed is not None:
        return packed
    packed = base64.b64encode(gzip.compress(js, 6, mtime=0))
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(cached, "wb", hold=False) as f:
            f.write(_MAGIC + hashlib.sha256(packed).hexdigest().encode() + b"\n")
            f.write(packed)
    except OSError:  # a read-only cache only costs the packing next time
        pass
    return packed
