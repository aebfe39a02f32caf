"""plotly.js for a self-contained, offline page: gzip + base64 inline (1.9 MB instead of
4.8 MB), unpacked in the browser by ``DecompressionStream``. Packed once per plotly.min.js
(keyed on its size and mtime, which a stat gives, not a package-metadata lookup) into the
cache directory (packing takes ~0.4 s)."""

from __future__ import annotations

import base64
import gzip
from importlib import util
from pathlib import Path

from ..atomic import atomic_output
from ..engine.wasm_module import cache_dir

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


def packed_plotly() -> bytes:
    """plotly.min.js, gzip-compressed and base64-encoded (ASCII bytes, written as they are)."""
    package = Path(util.find_spec("plotly").submodule_search_locations[0])  # never imported
    js_path = package / "package_data" / "plotly.min.js"
    stat = js_path.stat()
    cached = cache_dir() / f"plotly-{stat.st_size}-{stat.st_mtime_ns}.min.js.gz.b64"
    try:
        return cached.read_bytes()
    except OSError:
        pass
    packed = base64.b64encode(gzip.compress(js_path.read_bytes(), 6, mtime=0))
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(cached, "wb", hold=False) as f:
            f.write(packed)
    except OSError:  # a read-only cache only costs the packing next time
        pass
    return packed
