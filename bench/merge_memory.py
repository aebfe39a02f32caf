"""Peak memory of ``traceaug merge`` (and ``critical-path --job``) on jobs of 8, 32 and 64 ranks, two
checkouts side by side.

Why: issue 39 item 19: ``merge`` (and ``critical-path --job``, which writes the same trace) peaked at
about 24x the job's raw size; merged rank by rank it should need at most 3x the largest rank plus a
constant, whatever the number of ranks. Each job is the real 8-rank DLRM job copied to N ranks
(``bench/collectives_vs_hta.py``'s, reused from ``--out-dir``; ``--base``: another job or one rank's
trace, e.g. the 9.8 MB A100 NCCL rank, at 8 ranks or more). Each run is a fresh ``python -m
traceaug merge JOB OUT.json.gz`` with the side's checkout first on PYTHONPATH, old and new
alternating; the peak RSS of the whole process tree (``bench/paired.py``'s sampler, every 5 ms)
and the wall time; then the two outputs are compared event by event (the new one splices each
rank's text, so the bytes differ; the events, parsed, must not, but for what issue 34 item 5 changed on
purpose: process metadata, global instants' scope, the lanes' args, the late-start marks).
Run: ``python bench/merge_memory.py [--old /work/main] [--new .] [--ranks 8 32 64] [--repeat N]
[--commands merge critical-path] [--base DIR|FILE] [--out-dir DIR] [--json]``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collectives_vs_hta import generate  # noqa: E402
from load_throughput import REPO_ROOT, SHARED, first_run  # noqa: E402
from paired import Side, _sample, check_import, side_env  # noqa: E402

DLRM = SHARED / "traces" / "kineto" / "jobs" / "dlrm_v100_8ranks"
TIMEOUT_S = 1800


COMMANDS = {"merge": ("merge",), "critical-path": ("critical-path", "--job")}


def run(side: Side, command: str, job: Path, out: Path) -> tuple[float, float]:
    """One ``command`` of ``job`` to ``out`` by ``side``: (wall s, peak RSS of its process tree in MB)."""
    out.unlink(missing_ok=True)
    name, *flags = COMMANDS[command]
    cmd = [sys.executable, "-m", "traceaug", name, str(job), str(out), *flags]
    peak, late, stop = [0], [False], threading.Event()
    with first_run(side_env(side)) as env:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=job.parent,
                                env=env, start_new_session=True)
        sampler = threading.Thread(target=_sample, args=(proc.pid, stop, peak, start + TIMEOUT_S, late),
                                   daemon=True)
        sampler.start()
        err = proc.communicate()[1]
        wall = time.perf_counter() - start
        stop.set()
        sampler.join()
    if proc.returncode != 0 or late[0]:
        sys.exit(f"error: {side.name}: {command} {job.name} failed: {err.decode(errors='replace')[-2000:]}")
    return wall, peak[0] / 1024


def events(path: Path) -> collections.Counter:
    """The merged trace's events (each with sorted keys) but those issue 34 changed, and its other
    top-level keys but the marker."""
    with gzip.open(path) as f:
        trace = orjson.loads(f.read())
    found = collections.Counter(orjson.dumps(_kept(e), option=orjson.OPT_SORT_KEYS)
                                for e in trace.pop("traceEvents")
                                if e.get("ph") != "M" and e.get("cat") != "straggler")
    trace.pop("traceaug", None)
    found[orjson.dumps(trace, option=orjson.OPT_SORT_KEYS)] += 1
    return found


def _kept(e: dict) -> dict:
    """An event as compared: instants' scope and process (global ones go to their rank's CPU process
    now) and the lanes' args and titles left out."""
    if e.get("ph") in ("i", "I"):
        e.pop("s", None)
        e.pop("pid", None)
    if e.get("cat") == "critical_path" and e.get("ph") in ("b", "e"):
        e.pop("args", None)
    if e.get("cat") == "critical_path" and e.get("ph") == "n":  # the lane's title
        e.pop("name", None)
    return e


def measure(old: Side, new: Side, command: str, ranks: int, repeat: int, out_dir: Path, tmp: Path,
            base: Path = DLRM) -> dict:
    """Both sides' ``command`` on the ``ranks``-rank job made from ``base``, alternating, ``repeat`` times
    each."""
    job = generate(ranks, out_dir, base)
    sizes = [f.stat().st_size for f in job.iterdir()]
    row: dict = {"command": command, "ranks": ranks, "job_mb": sum(sizes) / 1e6,
                 "largest_rank_mb": max(sizes) / 1e6}
    for side in (old, new) * repeat:
        wall, peak = run(side, command, job, tmp / f"{side.name}.json.gz")
        row.setdefault(side.name, []).append({"wall_s": wall, "peak_mb": peak})
    row["same_events"] = events(tmp / "old.json.gz") == events(tmp / "new.json.gz")
    for side in (old, new):
        row[f"{side.name}_peak_mb"] = max(r["peak_mb"] for r in row[side.name])
        row[f"{side.name}_wall_s"] = min(r["wall_s"] for r in row[side.name])
    return row


def report(rows: list[dict], old: Side, new: Side, base: Path) -> str:
    lines = [f"ranks copied from {base.name}; old = {old.root}, new = {new.root}",
             "peak RSS of the process tree (max over runs), wall time (min over runs)",
             f"{'command':<14} {'ranks':>5} {'job MB':>7} {'largest':>8} {'old MB':>7} {'new MB':>7} "
             f"{'old/job':>8} {'new-largest×3 MB':>16} {'old s':>6} {'new s':>6}  same events"]
    for r in rows:
        lines.append(f"{r['command']:<14} {r['ranks']:>5} {r['job_mb']:>7.1f} {r['largest_rank_mb']:>8.2f} "
                     f"{r['old_peak_mb']:>7.0f} {r['new_peak_mb']:>7.0f} "
                     f"{r['old_peak_mb'] / r['job_mb']:>8.1f} "
                     f"{r['new_peak_mb'] - 3 * r['largest_rank_mb']:>16.0f} {r['old_wall_s']:>6.1f} "
                     f"{r['new_wall_s']:>6.1f}  {'yes' if r['same_events'] else 'NO'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", type=Path, default=Path("/work/main"), help="checkout of the old code")
    p.add_argument("--new", type=Path, default=REPO_ROOT, help="checkout of the new code")
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 64])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--base", type=Path, default=DLRM, help="the job (or one rank's trace) the ranks copy "
                   "(e.g. the 9.8 MB ../shared/traces/kineto/a100_nccl_rank0_of2.json.gz)")
    p.add_argument("--commands", nargs="+", choices=sorted(COMMANDS), default=["merge", "critical-path"])
    p.add_argument("--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "traceaug-bench")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = p.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    old, new = (Side(name, str(root), root.resolve(), "", str(root)) for name, root in
                (("old", a.old), ("new", a.new)))
    with tempfile.TemporaryDirectory(prefix="merge-memory-") as tmp:
        for side in (old, new):
            check_import(side, Path(tmp))
        rows = [measure(old, new, c, n, a.repeat, a.out_dir, Path(tmp), a.base) for c in a.commands
                for n in a.ranks]
    print(json.dumps(rows, indent=1) if a.json else report(rows, old, new, a.base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
