"""The ``report --html`` page's content, read from the written file: plotly.js inlined whole
even when its cache is damaged, and one bar per kernel name (never two names in one bar)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import os
import re
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace

import analyses_raw as rawa
import pytest
from click.testing import CliRunner
from conftest import shared_trace

from traceaug.cli import main
from traceaug.engine.wasm_module import cache_dir

PLOTLY_JS = Path(find_spec("plotly").submodule_search_locations[0]) / "package_data" / "plotly.min.js"


def _inlined_plotly(page: Path) -> bytes:
    """plotly.js as the page carries it (the packed string's bytes, unpacked)."""
    found = re.search(rb'const PLOTLY = "([A-Za-z0-9+/=]*)"', page.read_bytes())
    assert found, "no packed plotly.js in the page"
    return gzip.decompress(base64.b64decode(found.group(1)))


def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache dir of our own, holding (links to) the compiled engine only."""
    engine = cache_dir()
    mine = tmp_path / "xdg" / "traceaug"
    mine.mkdir(parents=True)
    for f in engine.glob("*.cwasm*") if engine.is_dir() else ():
        (mine / f.name).symlink_to(f)
    monkeypatch.delenv("TRACEAUG_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return mine


@pytest.mark.parametrize("headed", [False, True])
def test_a_truncated_plotly_cache_is_packed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  headed: bool):
    """A cache file cut short (a crash, a full disk, a copy) is not inlined: the page gets the
    whole plotly.js, and the cache is repaired. Cut from a cache as earlier versions wrote it
    (the packed bytes alone), or as now (after a line with their sha256)."""
    cache = _private_cache(tmp_path, monkeypatch)
    cached = cache / f"plotly-{hashlib.sha256(PLOTLY_JS.read_bytes()).hexdigest()[:32]}.min.js.gz.b64"
    whole = base64.b64encode(gzip.compress(PLOTLY_JS.read_bytes()))
    if headed:
        whole = b"traceaug-plotly-1 " + hashlib.sha256(whole).hexdigest().encode() + b"\n" + whole
    cached.write_bytes(whole[:10_000])  # the first 10 KB of a good cache
    trace = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    for attempt in range(2):  # the repaired cache serves the second page
        page = tmp_path / f"r{attempt}.html"
        result = CliRunner().invoke(main, ["report", str(trace), "--html", str(page)])
        assert result.exit_code == 0, result.output
        assert _inlined_plotly(page) == PLOTLY_JS.read_bytes()
        assert page.stat().st_size > 1_000_000
    assert len(cached.read_bytes()) > 1_000_000


def test_installs_of_one_plotly_share_one_cached_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """plotly.min.js reinstalled (a new venv, a CI run: the same bytes, a new mtime) packs into the cache
    once: its copy was named by size and mtime, one 2 MB file more per install."""
    cache = _private_cache(tmp_path, monkeypatch)
    installs = []
    for i in range(2):
        data = tmp_path / f"venv{i}" / "plotly" / "package_data"
        data.mkdir(parents=True)
        (data / "plotly.min.js").write_bytes(PLOTLY_JS.read_bytes())
        os.utime(data / "plotly.min.js", ns=(10**18 + i, 10**18 + i))
        installs.append(data.parent)
    trace = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    for i, package in enumerate(installs):
        spec = SimpleNamespace(submodule_search_locations=[str(package)])
        monkeypatch.setattr("traceaug.render.plotly_inline.util.find_spec", lambda name, s=spec: s)
        page = tmp_path / f"r{i}.html"
        result = CliRunner().invoke(main, ["report", str(trace), "--html", str(page)])
        assert result.exit_code == 0, result.output
        assert _inlined_plotly(page) == PLOTLY_JS.read_bytes()
    assert len(list(cache.glob("plotly-*"))) == 1


def _figures(page: Path) -> list[dict]:
    """The page's plotly figures, as the page hands them to plotly.js."""
    text = page.read_text()
    start = text.index("const FIGS = ") + len("const FIGS = ")
    return json.loads(text[start:text.index(";\nconst PLOTLY", start)].replace("<\\/", "</"))


def test_one_bar_per_kernel_name(tmp_path: Path):
    """On the 8-rank DLRM job, where 19 names share their first 59 characters (6
    ``vectorized_elementwise_kernel`` variants among them): as many bars as distinct GPU op
    names in the raw JSON, every label distinct, the full name in each bar's hover."""
    job = shared_trace("kineto/jobs/dlrm_v100_8ranks")
    names = set()
    for f in job.glob("*.json.gz"):
        for e in json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                names.add(e["name"])
    page = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(job), "--html", str(page), "--top", "1000"])
    assert result.exit_code == 0, result.output
    bars = [f["data"][0] for f in _figures(page) if f["layout"]["title"]["text"].startswith("Top ")]
    labels = [y for b in bars for y in b["y"]]
    full = [n for b in bars for n in b["customdata"]]
    assert len(labels) == len(set(labels)) == len(names) == 81
    assert sorted(full) == sorted(names)
    assert all(len(y) <= 64 for y in labels)
    assert all(b["hovertemplate"].startswith("%{hovertext}<br>") for b in bars)
    hover = [h.replace("<br>", "") for b in bars for h in b["hovertext"]]
    assert hover == full  # the whole name, in lines


def _overview_text(page: Path) -> tuple[str, list[str]]:
    """The verdict and the findings, as the page's first section says them."""
    text = page.read_text()
    section = text[text.index("<section id='overview'>"):text.index("</section>")]
    verdict = html.unescape(re.search(r"<p class='verdict'>(.*?)</p>", section).group(1))
    items = [html.unescape(x) for x in re.findall(r"<li>(.*?)</li>", section)]
    return verdict, items


@pytest.mark.parametrize("step", [None, 551])
def test_first_screen_findings_from_the_raw_json(tmp_path: Path, step: int | None) -> None:
    """On the A100 6-stream trace: the page opens on a verdict and three findings whose figures
    are the raw JSON's: the GPU's idle share of the window, the launch queue of stream 7 (each
    op's wait from launch to start, over the window: Little's law), the op with the most GPU
    time and its share."""
    path = shared_trace("kineto/a100_rank0_of16_6streams.json.gz")
    r = rawa.raw(path)
    if step is None:
        lo, hi = min(a for a, _ in r["windows"].values()), max(b for _, b in r["windows"].values())
        ops = r["ops"]
    else:
        lo, hi = r["windows"][step]
        ops = [o for o in r["ops"] if o["step"] == step]
    idle_pct = 100 * (hi - lo - rawa.busy(r["ops"], lo, hi)) / (hi - lo)
    waits: dict = {}
    for o in ops:
        if o["launch"] is not None:
            start, launch = min(max(o["ts"], lo), hi), min(max(o["launch"][0], lo), hi)
            waits[o["stream"]] = waits.get(o["stream"], 0) + max(start - launch, 0)
    stream, wait = max(waits.items(), key=lambda kv: kv[1])
    totals = rawa.kernel_totals(ops)
    name = max(totals, key=lambda n: totals[n][1])
    share = 100 * totals[name][1] / sum(t for _, t in totals.values())

    page = tmp_path / "r.html"
    args = ["report", str(path), "--html", str(page)] + ([] if step is None else ["--step", str(step)])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    verdict, items = _overview_text(page)
    assert len(items) == 3, items
    assert verdict.startswith(f"The GPU is starved: idle {idle_pct:.0f} % of the window")
    joined = "\n".join(items)
    assert f"GPU idle {idle_pct:.0f} % of " in items[0]
    assert stream == 7 and f"stream 7's queue holds {wait / (hi - lo):,.0f} launched ops" in joined
    if step is None:  # in one step, exposed communication outranks it
        assert f"takes {share:.0f} % of the GPU time ({totals[name][0]:,} runs" in joined
        assert name[:40] in joined
