"""The process layer (``traceaug.processes``): a job's pool stops at once whatever its
children are doing, and nothing of a stopped pool is left behind."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

KILLED_WHILE_SENDING = """
import sys, time
from traceaug.job.executor import LocalPool
from traceaug.processes import WorkerFailed

def big(n):
    return b"x" * n

pool = LocalPool(2)
futures = [pool.submit(big, 384 << 20) for _ in range(2)]
time.sleep(float(sys.argv[1]))  # the children are sending their results by now
t = time.monotonic()
pool.close(cancel=True)
failed = sum(isinstance(f.exception(), WorkerFailed) for f in futures if not f.cancelled())
print(f"closed {time.monotonic() - t < 5} failed {failed}")
"""


def test_a_pool_killed_while_its_children_send_results_closes_at_once() -> None:
    """Ctrl-C kills the pool's children: one killed half way through sending a large result
    left the old pool (``ProcessPoolExecutor``) reading the rest for ever; each child has
    its own pipe now, and its task fails."""
    for delay in ("1.0", "1.8"):
        out = subprocess.run([sys.executable, "-c", KILLED_WHILE_SENDING, delay], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.split()[:2] == ["closed", "True"], (out.stdout, out.stderr)
