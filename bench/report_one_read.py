"""``report`` before / after its efficiency section came from the one read (issue 35): CPU time and peak RSS
of ``traceaug report`` with PYTHONPATH=OLD and =NEW, alternating in one run, the table cache off; and, in one
process each, the loads alone (with the GPU ops and the efficiency tables made): the old report's read
(``gpu_steps``) and a second read for the section (``efficiency_tables``), against the new report's one read
(``report``).

    python bench/report_one_read.py OLD_ROOT NEW_ROOT TRACE... [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

LOAD = """
import resource, sys, time
from traceaug.analysis import efficiency
from traceaug.analysis.gpu_steps import rank_ops
from traceaug.trace import Trace
t = time.process_time()
for kind in sys.argv[2:]:
    with Trace(sys.argv[1], kind) as tr:
        g = rank_ops(None, tr)
        if kind != "gpu_steps":
            efficiency.part(tr, g)
print(time.process_time() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
# in one process: the old report's read, then a second read for the section; or the new report's one read
STRATEGIES = {"two reads (gpu_steps, efficiency_tables)": ("gpu_steps", "efficiency_tables"),
              "one read (report)": ("report",)}


def child(args: list[str], root: str) -> tuple[float, float]:
    """CPU seconds (user + system, its children included) and peak RSS (MB) of one command."""
    env = dict(os.environ, PYTHONPATH=root, TRACEAUG_NO_CACHE="1")
    # (from "/": ``-m`` puts the working directory first on sys.path, before PYTHONPATH)
    proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, cwd="/")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{args} failed ({proc.returncode})")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("traces", nargs="+")
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    for trace in a.traces:
        found: dict[str, list] = {}
        for _ in range(a.runs):
            for label, root in (("old report", a.old), ("new report", a.new)):
                found.setdefault(label, []).append(child(["-m", "traceaug", "report", trace, "--format",
                                                          "json"], root))
            for label, kinds in STRATEGIES.items():
                env = dict(os.environ, PYTHONPATH=a.new, TRACEAUG_NO_CACHE="1")
                out = subprocess.run([sys.executable, "-c", LOAD, trace, *kinds], env=env, check=True,
                                     capture_output=True, text=True, cwd="/").stdout.split()
                found.setdefault(label, []).append((float(out[0]), int(out[1]) / 1024))
        print(trace)
        for label, runs in found.items():
            cpu = statistics.median(r[0] for r in runs)
            print(f"  {label:42} CPU {cpu:6.2f} s (median of {len(runs)})   peak RSS "
                  f"{max(r[1] for r in runs):7.0f} MB")


if __name__ == "__main__":
    main()
