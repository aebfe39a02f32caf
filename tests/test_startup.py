"""A command imports what it uses: run in a fresh interpreter, the CLI leaves the modules only other commands
(or a job, or an output copy) need out of ``sys.modules`` (each costs every start its import)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import TESTDATA, shared_trace

# The console entry (``traceaug.cli.run``, which ends in ``os._exit`` after the exit functions), the
# modules it left loaded written to a file by an exit function.
_RUN = """
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["traceaug", *sys.argv[2:]]
from traceaug.cli import run
run()
"""


def _loaded(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """The command line ``traceaug ARGS`` run in a new interpreter: its result and the modules it imported."""
    found = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", _RUN, str(found), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done, set(json.loads(found.read_text()))


def test_version_imports_no_command(tmp_path: Path) -> None:
    """``--version`` is click and the version string: no command's declaration, job runner or path checks."""
    from traceaug.version import __version__

    done, modules = _loaded(tmp_path, "--version")
    assert done.stdout.split()[-1] == __version__
    assert "click" in modules
    assert not modules & {"traceaug.commands.declare", "traceaug.job.run", "traceaug.paths", "numpy"}


def test_report_on_one_trace_imports_no_job_module(tmp_path: Path) -> None:
    """``report`` on one trace (the SGLang decode step: one step) reads no job: the job path, critical path,
    replay, stragglers' and collective matching's modules stay unloaded."""
    trace = shared_trace("kineto/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    done, modules = _loaded(tmp_path, "report", str(trace), "--format", "json")
    out = json.loads(done.stdout)
    assert "traceaug.analysis.gpu_steps" in modules and out["schema_version"] == 2  # it did its work
    assert not modules & {"traceaug.analysis.job_path", "traceaug.analysis.critical_path",
                          "traceaug.analysis.replay", "traceaug.commands.stragglers",
                          "traceaug.analysis.collectives", "traceaug.render.job_sections"}


def test_efficiency_without_out_imports_no_copy_writer(tmp_path: Path) -> None:
    """``efficiency`` without OUT writes no copy of the trace: the splice, its UI check and the event
    builders (the lanes and counter tracks of an OUT) stay unloaded."""
    trace = shared_trace("kineto/h100_qwen05b_inference.json.gz")
    done, modules = _loaded(tmp_path, "efficiency", str(trace), "--format", "json")
    assert json.loads(done.stdout)["schema_version"] >= 1
    assert "traceaug.analysis.efficiency" in modules
    assert not modules & {"traceaug.rewrite.splice", "traceaug.rewrite.visible", "traceaug.rewrite.events",
                          "traceaug.rewrite.pgzip"}


def test_kernels_reads_its_sql_without_zipfile(tmp_path: Path) -> None:
    """``kernels`` reads traceaug's SQL modules from its own directory: importlib.resources' readers (and the
    zipfile module they import) stay unloaded, as the job path's modules do on one trace."""
    done, modules = _loaded(tmp_path, "kernels", str(TESTDATA / "small_training.json"), "--format", "json")
    assert json.loads(done.stdout)["schema_version"] >= 1
    assert "traceaug.sql_modules" in modules
    assert not modules & {"zipfile", "importlib.readers", "traceaug.analysis.job_path"}


def test_no_pass_1_child_for_a_small_trace() -> None:
    """Pass 1 runs in a child only for a trace of 1 MB or more (raw): the SGLang decode step (0.6 MB raw, pass
    1 in ~5 ms) is planned in the command's own process, the Qwen trace (8.6 MB raw) in a child."""
    from traceaug.read import prefetch, source

    small = shared_trace("kineto/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    large = shared_trace("kineto/h100_qwen05b_inference.json.gz")
    assert source.raw_size_estimate(small) < 1 << 20 <= source.raw_size_estimate(large)
    try:
        prefetch.start([small, large], "report")
        assert not prefetch.pending(small, "report") and prefetch.pending(large, "report")
    finally:
        prefetch.close()


def test_serving_report_imports_no_numpy_ma_nor_zipfile(tmp_path: Path) -> None:
    """``report --capture`` on the SGLang decode step never imports numpy.ma (6 ms of a start): numpy 2's
    ``np.unique`` and ``np.percentile`` import it, so pass 1 and the serving figures use neither; nor
    importlib.resources' readers and zipfile (3 ms): the device peaks are read from traceaug's directory."""
    root = "kineto/inference/sglang_decode"
    done, modules = _loaded(tmp_path, "report", str(shared_trace(f"{root}/sglang_Qwen3-8B_decode.json.gz")),
                            "--capture", str(shared_trace(f"{root}/capture_traces")), "--format", "json")
    assert json.loads(done.stdout)["serving: steps per phase"]  # it did the serving work
    assert "numpy" in modules and "traceaug.analysis.peaks" in modules
    assert not modules & {"numpy.ma", "zipfile", "importlib.readers"}


_PREFETCHES = """
import atexit, json, sys
import traceaug.read.prefetch as prefetch
seen, start, out = [], prefetch.start, sys.argv[1]
def noted(files, kind):
    seen.append([kind, "traceaug.commands.report" in sys.modules])
    return start(files, kind)
prefetch.start = noted
atexit.register(lambda: open(out, "w").write(json.dumps(seen)))
sys.argv = ["traceaug", *sys.argv[2:]]
from traceaug.cli import run
run()
"""


def test_a_captures_pass_1_starts_before_the_command_loads(tmp_path: Path) -> None:
    """``--capture``'s pass 1 starts in a child before the command's modules load (``cli._capture_early``), so
    its plan is ready by the time the command's graph read wants it; the trace's after them."""
    root = "kineto/inference/sglang_decode"
    found = tmp_path / "prefetches.json"
    done = subprocess.run([sys.executable, "-c", _PREFETCHES, str(found), "report",
                           str(shared_trace(f"{root}/sglang_Qwen3-8B_decode.json.gz")),
                           f"--capture={shared_trace(f'{root}/capture_traces')}", "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(found.read_text()) == [["capture", False], ["report", True]]
