"""Benchmark the analysis commands on a trace of many ProfilerSteps (kernels, gaps, launches,
breakdown, each also with ``--step``, and ``report --html``).

Why: long runs profiled with a short schedule and inference servers record tens of thousands
of steps; per-step work that touches every op made ``breakdown`` and ``report`` quadratic in
the steps (16.7 s and 43 s on 20,000 steps). The trace is tests/kineto_gen.py's training loop
(``write_large``: one kernel and one memcpy per step, 1.1 KB of JSON a step), written once into
``--out-dir`` and reused. Each command runs in a fresh process, ``--repeat`` times; printed are
the minimum wall time and the minimum CPU seconds (user + sys of the process and its children,
the pass-1 child included), which follow the load of a shared machine much less.
Run: ``python bench/steps_scaling.py [--steps N] [--repeat N] [--out-dir DIR] [--json]``.
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
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))
from kineto_gen import write_large  # noqa: E402
from load_throughput import first_run  # noqa: E402  (bench/ is on the path: this script's own)

DEFAULT_OUT = REPO_ROOT / "bench" / "out"


def commands(trace: Path, steps: int, page: Path) -> dict[str, list[str]]:
    """Each command measured, by label."""
    middle = str(steps // 2)
    out: dict[str, list[str]] = {}
    for name in ("kernels", "gaps", "launches", "breakdown"):
        out[name] = [name, str(trace)]
        out[f"{name} --step {middle}"] = [name, str(trace), "--step", middle]
    out["report --html"] = ["report", str(trace), "--html", str(page)]
    return out


def measure(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (children included) of one ``python -m traceaug ARGS``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with first_run(env) as env:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "traceaug", *args], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    trace = a.out_dir / f"kineto_gen_{a.steps}_steps.json"
    if not trace.exists():
        write_large(trace, a.steps)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cmds = commands(trace, a.steps, Path(tmp) / "report.html")
        measure(cmds["kernels"], env)  # compiles the modules and the engine once
        rows: list[dict[str, Any]] = []
        for label, args in cmds.items():
            runs = [measure(args, env) for _ in range(a.repeat)]
            rows.append({"command": label, "wall_s": min(w for w, _ in runs),
                         "cpu_s": min(c for _, c in runs)})
    if a.json:
        print(json.dumps({"trace": str(trace), "steps": a.steps, "mb": trace.stat().st_size / 1e6,
                          "rows": rows}, indent=2))
        return 0
    print(f"{trace} ({a.steps} steps, {trace.stat().st_size / 1e6:.1f} MB), min of {a.repeat}")
    width = max(len(r["command"]) for r in rows)
    for r in rows:
        print(f"{r['command']:<{width}}  {r['wall_s']:7.2f} s wall  {r['cpu_s']:7.2f} CPU s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
