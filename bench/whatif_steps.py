"""Benchmark ``whatif`` and ``diff --explain`` on traces of many tiny ProfilerSteps, this code beside an
older revision's (issue 39.8: a graph built per step, ~2.2 ms a step, 100,000 steps past 120 s).

The traces are tests/test_whatif_steps.py's (a launch and its kernel per step), written once into
``--out-dir``. The old code is ``git archive REV traceaug`` (default: the revision before the stacked
replay), run the same way; a run past ``--cap`` seconds is stopped and shown as ``> cap``. Printed: wall
and CPU seconds (the process and its children) per command, steps and code.
Run: ``python bench/whatif_steps.py [--steps 1000 10000 100000] [--old REV] [--cap S] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))
from load_throughput import first_run  # noqa: E402  (bench/ is on the path: this script's own)
from test_whatif_steps import write_steps  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "bench" / "out"
OLD_REV = "b59135c"  # main before the stacked replay


def measure(args: list[str], env: dict[str, str], cap: float) -> tuple[float | None, float]:
    """Wall (None: stopped at ``cap``) and CPU seconds of one ``python -m traceaug ARGS``, run in the
    code's directory (``python -m`` imports from there first)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        with first_run(env) as env:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "traceaug", *args], env=env, check=True, timeout=cap,
                           cwd=env["PYTHONPATH"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - start
    except subprocess.TimeoutExpired:
        wall = None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def old_code(rev: str, into: Path) -> Path:
    """``rev``'s traceaug package extracted under ``into``."""
    tar = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", rev, "traceaug"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--old", default=OLD_REV)
    ap.add_argument("--cap", type=float, default=300.0)
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        codes = {"new": REPO_ROOT, "old": old_code(a.old, Path(tmp))}
        for n in a.steps:
            ta, tb = a.out_dir / f"tiny_{n}_a.json", a.out_dir / f"tiny_{n}_b.json"
            if not ta.exists() or not tb.exists():
                write_steps(ta, steps=n), write_steps(tb, extra=10, steps=n)
            cmds = {"whatif": ["whatif", str(ta), "--scale", "comp=0.5", "--format", "json"],
                    "diff --explain": ["diff", str(ta), str(tb), "--explain", "--format", "json"]}
            for label, args in cmds.items():
                for code, root in codes.items():
                    env = {**os.environ, "PYTHONPATH": str(root),
                           "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc")}
                    wall, cpu = measure(args, env, a.cap)
                    rows.append({"steps": n, "command": label, "code": code, "wall_s": wall, "cpu_s": cpu})
                    if not a.json:
                        shown = f"> {a.cap:g}" if wall is None else f"{wall:.1f}"
                        print(f"{n:>7} {label:<15} {code:<4} wall {shown:>7} s  cpu {cpu:6.1f} s", flush=True)
    if a.json:
        print(json.dumps({"old": a.old, "cap_s": a.cap, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
