"""Memory over time (issue 35 item 7): ``counters``' allocated / reserved tracks, the per-step peak and what
holds it (``report``, ``diff``), each against the raw ``[memory]`` events of the three shared traces that
have them, read here straight from the JSON."""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import run_cli, shared_trace
from rawjson import load_raw, ns

import traceaug
from traceaug.analysis import memory
from traceaug.read.source import read_all
from traceaug.trace import Trace

TRACES = ("kineto/h100_qwen05b_inference.json.gz", "kineto/h100_bert_small_inference.json.gz",
          "kineto/vllm_decode_cudagraph.json.gz")
DEVICE = {0: "cpu", 1: "cuda", 6: "hip"}  # c10::DeviceType


def raw_memory(path: Path) -> tuple[list[dict], list[tuple[str, int, int]], list[dict]]:
    """The [memory] events (file order, ``ts`` in ns, ``device`` named), the ProfilerStep windows
    (step, start, end ns) and the CPU ops, from the raw JSON."""
    events, steps, ops = [], [], []
    for e in load_raw(path)["traceEvents"]:
        if e.get("name") == "[memory]":
            a = e["args"]
            kind, number = a["Device Type"], a["Device Id"]
            events.append({"ts": ns(e["ts"]), "thread": (e["pid"], e["tid"]),
                           "device": DEVICE[kind] if kind == 0 else f"{DEVICE[kind]}:{number}",
                           "bytes": a["Bytes"], "allocated": a["Total Allocated"],
                           "reserved": a["Total Reserved"], "addr": a["Addr"]})
        elif e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op") \
                and str(e.get("name", "")).startswith("ProfilerStep#"):  # the CPU's step, not the GPU's
            start = ns(e["ts"])
            steps.append((int(e["name"].removeprefix("ProfilerStep#")), start, start + ns(e["dur"])))
        elif e.get("ph") == "X" and e.get("cat") == "cpu_op":
            ops.append({"thread": (e["pid"], e["tid"]), "start": ns(e["ts"]),
                        "end": ns(e["ts"]) + ns(e["dur"]), "name": e["name"]})
    events.sort(key=lambda e: e["ts"])  # stable: file order at equal timestamps
    return events, sorted(steps, key=lambda s: s[1]), ops


def raw_peaks(events: list[dict], steps: list) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(device, step) -> (peak allocated, peak reserved, ns from the window's start to the peak): over the
    step's events and the one before it (what the step starts with); no steps: every event (step None)."""
    out = {}
    for device in dict.fromkeys(e["device"] for e in events):
        mine = [e for e in events if e["device"] == device]
        windows = steps or [(None, mine[0]["ts"], mine[-1]["ts"])]
        for step, start, end in windows:
            before = [e for e in mine if e["ts"] < start][-1:]
            seen = before + [e for e in mine if start <= e["ts"] <= end]
            best = max(e["allocated"] for e in seen)
            first = next(e for e in seen if e["allocated"] == best)
            out[(device, step)] = (best, max(e["reserved"] for e in seen), max(first["ts"] - start, 0))
    return out


@pytest.mark.parametrize("rel", TRACES)
def test_tracks_equal_the_recorded_totals_at_every_event(rel: str, tmp_path: Path) -> None:
    """The allocated and reserved tracks hold ``Total Allocated`` / ``Total Reserved`` after every event
    (0 B error; at a timestamp with several events, after the last)."""
    src, out = shared_trace(rel), tmp_path / "out.json.gz"
    done = run_cli("counters", str(src), str(out), "--series", "memory")
    assert done.returncode == 0, done.stderr
    events, _, _ = raw_memory(src)
    expected: dict[tuple[str, int], int] = {}
    for e in events:
        for key in ("allocated", "reserved"):
            expected[(f"{key} {e['device']}", e["ts"])] = e[key]
    found = {}
    for e in json.loads(read_all(out), parse_float=Decimal)["traceEvents"]:
        if e.get("ph") == "C" and e.get("name") == memory_track_name():
            (key, value), = e["args"].items()
            found[(key, ns(e["ts"]))] = value
    assert found == expected
    assert len(found) >= len({(e["device"], e["ts"]) for e in events}) * 2 > 0


def memory_track_name() -> str:
    from traceaug.rewrite.counters import MEMORY

    return MEMORY


@pytest.mark.parametrize("rel", TRACES)
def test_step_peak_is_the_raw_maximum_and_holders_add_up(rel: str) -> None:
    """Each step's peak (allocated, reserved, when) equals the raw maximum; the holders at the peak sum to
    the allocated bytes then, and each allocation not yet freed (replayed here by address) is held by the
    outermost CPU op around it on its thread; what the first event says was allocated before the trace,
    less its frees, is one holder."""
    src = shared_trace(rel)
    events, steps, ops = raw_memory(src)
    peaks = raw_peaks(events, steps)
    with Trace(src, "report") as trace:  # (report's load: the memory section comes from it)
        found = memory.compute(trace)
    s = found["steps"]
    got = {(d, st): (a, r, at) for d, st, a, r, at in zip(
        s["device"].tolist(), s["step"].tolist(), s["peak_allocated_bytes"].tolist(),
        s["peak_reserved_bytes"].tolist(), s["peak_at_ns"].tolist())}
    assert got == peaks
    h = found["holders"]
    held: dict[tuple, dict] = defaultdict(lambda: defaultdict(int))
    for d, st, op, b in zip(h["device"].tolist(), h["step"].tolist(), h["op"].tolist(), h["bytes"].tolist()):
        held[(d, st)][op] += b  # over the annotations
    assert set(held) == set(peaks)
    for (device, step), (allocated, _, at) in peaks.items():
        assert sum(held[(device, step)].values()) == allocated
        assert memory.UNEXPLAINED not in held[(device, step)]
        start = next((w[1] for w in steps if w[0] == step), None)
        mine = [e for e in events if e["device"] == device]
        peak_ts = (start if start is not None else mine[0]["ts"]) + at
        upto = [e for e in mine if e["ts"] <= peak_ts]
        upto = upto[:max(i for i, e in enumerate(upto) if e["allocated"] == allocated) + 1]
        before = upto[0]["allocated"] - upto[0]["bytes"]
        alive: dict[int, tuple[int, str]] = {}
        for e in upto:
            if e["bytes"] >= 0:
                enclosing = [o for o in ops
                             if o["thread"] == e["thread"] and o["start"] <= e["ts"] <= o["end"]]
                owner = min(enclosing, key=lambda o: (o["start"], -o["end"]))["name"] if enclosing \
                    else memory.NO_OP
                alive[e["addr"]] = (e["bytes"], owner)
            elif e["addr"] in alive:
                del alive[e["addr"]]
            else:
                before += e["bytes"]
        expected: dict[str, int] = defaultdict(int)
        for b, owner in alive.values():
            expected[owner] += b
        if before:
            expected[memory.BEFORE] = before
        assert dict(held[(device, step)]) == dict(expected)


def test_report_and_diff_memory_sections(tmp_path: Path) -> None:
    """``report`` shows each peak and its holders; ``diff`` A's and B's peaks; a trace without [memory]
    events says so."""
    qwen, bert = (shared_trace(t) for t in TRACES[:2])
    sections = traceaug.report(qwen, progress=False)
    peaks = sections["Memory: peak per step and device"]
    events, steps, _ = raw_memory(qwen)
    expected = raw_peaks(events, steps)
    assert {(d, s): a for d, s, a in zip(peaks["device"], peaks["step"], peaks["peak_allocated_bytes"])} \
        == {k: v[0] for k, v in expected.items()}
    holders = sections[next(t for t in sections if t.startswith("Memory: what holds"))]
    assert holders["op"].iloc[0] == memory.BEFORE and len(holders) > 3
    plain = shared_trace("kineto/a100_simple_add_cuda_sync.json.gz")
    assert traceaug.report(plain, progress=False)["Memory"]["notes"].tolist() == [memory.NONE_TEXT]
    done = run_cli("diff", str(qwen), str(bert), "--format", "json")
    assert done.returncode == 0, done.stderr
    diffed = json.loads(done.stdout)["memory"]["Memory: peak, A vs B"]
    raw_b = raw_peaks(*raw_memory(bert)[:2])
    cuda = next(r for r in diffed if r["device"] == "cuda:0")
    assert (cuda["allocated_a_bytes"], cuda["allocated_b_bytes"]) == \
        (max(v[0] for k, v in expected.items() if k[0] == "cuda:0"),
         max(v[0] for k, v in raw_b.items() if k[0] == "cuda:0"))
    text = run_cli("counters", str(plain), str(tmp_path / "out.json"), "--series", "memory")
    assert memory.NONE_TEXT in text.stdout
    page = tmp_path / "diff.html"
    assert run_cli("diff", str(qwen), str(bert), "--html", str(page)).returncode == 0
    assert "Memory: peak, A vs B" in page.read_text() and memory.BEFORE in page.read_text()


def test_the_report_page_has_the_memory_tables(tmp_path: Path) -> None:
    """``report --html``: the peaks and holders among the page's tables."""
    page = tmp_path / "report.html"
    done = run_cli("report", str(shared_trace(TRACES[1])), "--html", str(page))
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    events, steps, _ = raw_memory(shared_trace(TRACES[1]))
    peak = raw_peaks(events, steps)[("cuda:0", steps[0][0])][0]
    assert "Memory: what holds it at the peak" in text and memory.BEFORE in text
    assert f">{peak:,}<" in text


def test_pass_one_counts_the_memory_events_a_load_drops() -> None:
    """Pass 1 counts the [memory] events of the file even for a load that keeps none of them (the
    count ``report`` and ``diff`` decide their memory read by), as many as the raw JSON has."""
    from traceaug.analysis.memory import recorded

    for rel in (TRACES[1], "kineto/a100_simple_add_cuda_sync.json.gz"):
        path = shared_trace(rel)
        raw = sum(e.get("name") == "[memory]" for e in load_raw(path)["traceEvents"])
        with Trace(path, "gpu_ops") as trace:
            assert trace.plan.memory_events == raw
            assert recorded(trace) is (raw > 0)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list:
    """The rank files every job run (``job.run.run``: a ``Work`` on ranks, each task a read) opens, A's
    and B's alike, however the command calls the job runner."""
    import traceaug.commands.declare as declare
    import traceaug.commands.diff as diff
    import traceaug.job.run as job_run

    opened: list = []
    real = job_run.run

    def counting(work, items, *a, **k):
        opened.extend(str(f.path) for i in items for f in (i.file, i.other) if f is not None)
        return real(work, items, *a, **k)

    for module in (job_run, declare, diff):
        monkeypatch.setattr(module, "run", counting)
    return opened


def test_a_job_is_read_once(reads: list) -> None:
    """``report`` and ``diff`` of the 8-rank DLRM job (no [memory] event in any raw file) read each rank
    once (``diff``: once as A, once as B) and say there are none; the memory and efficiency sections come
    from that read (a trace with [memory] events: ``test_efficiency_sections``)."""
    from click.testing import CliRunner

    from traceaug.cli import main

    job = shared_trace("kineto/jobs/dlrm_v100_8ranks")
    files = sorted(str(f) for f in job.glob("*.json.gz"))
    assert not any(e.get("name") == "[memory]" for f in files for e in load_raw(Path(f))["traceEvents"])
    done = CliRunner().invoke(main, ["report", str(job), "--format", "csv"])
    assert done.exit_code == 0, done.output
    assert memory.NONE_TEXT in done.output and "Efficiency: MFU per step" in done.output
    assert sorted(reads) == files
    reads.clear()
    done = CliRunner().invoke(main, ["diff", str(job), str(job), "--format", "json"])
    assert done.exit_code == 0, done.output
    assert memory.NONE_TEXT in done.output and sorted(reads) == sorted(files * 2)
