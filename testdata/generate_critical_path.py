"""Generate small Kineto traces whose critical path is known by construction.

Why: ``traceaug critical-path`` builds HTA's dependency graph (CPU nesting and order,
launch -> GPU op, op -> next op on a stream, GPU -> CPU and GPU -> GPU syncs) and takes
its longest path. Each trace here exercises one kind of edge, on a schedule laid out so
that exactly one path is the longest, and the answers file states that path from the
schedule itself (never through traceaug): its length with traceaug's weights and with
HTA's (syncs and HTA's blocking calls weigh 0), the events on it in order, and the time per
category, ``idle`` being the rest of the window (the trace's first start to its last end);
a call's wait for the GPU that no work on the path covers is ``blocked``.

Outputs (in ``critical_path/`` next to this file; deterministic): one ``<name>.json`` per
trace below and ``critical_path.answers.json``. Run ``python testdata/generate_critical_path.py``
to regenerate, or with a DIR argument to write the same files under DIR.

* ``cpu_nesting``: nested CPU ops on two threads; the gap between top-level ops is a
  zero-weight dependency, so the thread with less wall time but more op time wins.
* ``launch``: a launch delay into an idle stream, then a device sync (``Context Sync``).
* ``kernel_gap``: two kernels queued back to back (kernel-to-kernel gap), a stream sync.
* ``event_sync``: ``cudaEventSynchronize`` on an event recorded after a long kernel.
* ``stream_wait``: ``cudaStreamWaitEvent`` makes a kernel on stream 20 wait for one on
  stream 7 (without the edge its launch delay would make a longer, wrong path).
* ``graph_launch``: ``cudaGraphLaunch`` of three kernels (HTA misses graph launches).
* ``pageable_copy``: a ``cudaMemcpyAsync`` to pageable memory waits for its copy, queued
  behind a long kernel, with no ``cuda_sync`` event (HTA crosses it with weight 0).
* ``stream_sync_inferred``: a ``cudaStreamSynchronize`` without its ``cuda_sync`` event
  waits for the kernel launched before it that ends last while it runs.
* ``pageable_copy_cross_stream``: a ``cudaMemcpyAsync`` to pageable memory whose copy waits for
  a kernel on another stream: the CPU's wait is split into that kernel, the copy and the rest
  (``blocked``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE_US = 1_700_000_000_000_000  # epoch µs of t = 0
CPU, GPU = 100, 0  # pids; the CPU thread is tid 100 (and 101), GPU tids are streams


class Trace:
    """Events of one trace, laid out in µs from BASE_US."""

    def __init__(self) -> None:
        self.events: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": CPU, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_name", "pid": GPU, "tid": 0, "args": {"name": "GPU 0"}},
        ]
        self.corr = 1

    def x(self, cat: str, name: str, ts: int, dur: int, pid: int, tid: int, **args) -> dict:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": BASE_US + ts,
              "dur": dur, "args": args}
        self.events.append(ev)
        return ev

    def op(self, name: str, ts: int, dur: int, tid: int = CPU) -> None:
        self.x("cpu_op", name, ts, dur, CPU, tid)

    def call(self, name: str, ts: int, dur: int) -> int:
        """A runtime call with a fresh correlation id (returned)."""
        c = self.corr
        self.corr += 1
        self.x("cuda_runtime", name, ts, dur, CPU, CPU, correlation=c)
        return c

    def gpu(self, name: str, ts: int, dur: int, stream: int, corr: int, cat: str = "kernel") -> None:
        self.x(cat, name, ts, dur, GPU, stream, device=0, stream=stream, correlation=corr)

    def sync(self, kind: str, ts: int, dur: int, corr: int, stream: int = -1, **wait) -> None:
        self.x("cuda_sync", kind, ts, dur, GPU, stream if stream >= 0 else 7, cuda_sync_kind=kind,
               stream=stream, correlation=corr, device=0, **wait)

    def text(self) -> str:
        body = ",\n".join("  " + json.dumps(e, separators=(",", ":")) for e in self.events)
        return ('{\n"schemaVersion": 1,\n"traceEvents": [\n' + body
                + '\n],\n"traceName": "critical path test"\n}\n')


def cpu_nesting() -> tuple[Trace, dict]:
    t = Trace()
    t.op("A", 0, 1000)
    t.op("B", 100, 200)
    t.op("C", 500, 300)
    t.op("D", 1200, 800)  # 200 µs after A: a zero-weight dependency
    t.op("E", 0, 1500, tid=101)  # one op on another thread: 1500 < 1800
    return t, answer(1800, 1800, ["A", "B", "A", "C", "A", "D"], cpu=1800)


def launch() -> tuple[Trace, dict]:
    t = Trace()
    t.op("aten::mm", 0, 100)
    t.x("cuda_runtime", "cudaLaunchKernel", 10, 10, CPU, CPU, correlation=1)
    t.gpu("gemm", 500, 2000, 7, 1)
    t.x("cuda_runtime", "cudaDeviceSynchronize", 150, 2450, CPU, CPU, correlation=2)
    t.sync("Context Sync", 2550, 40, 2)
    t.op("aten::add", 2700, 100)
    # mm's first 10 µs, launch delay 490, gemm 2000, wait 100 after the gemm ended, add 100.
    return t, answer(2700, 2600, ["aten::mm", "gemm", "gemm", "cudaDeviceSynchronize", "aten::add"],
                     cpu=110, launch_delay=490, gpu_compute=2000, blocked=100)


def kernel_gap() -> tuple[Trace, dict]:
    t = Trace()
    c1 = t.call("cudaLaunchKernel", 0, 10)
    t.gpu("k1", 100, 1000, 7, c1)
    c2 = t.call("cudaLaunchKernel", 120, 10)  # after k1 began (else HTA sees no idle stream)
    t.gpu("k2", 1150, 1000, 7, c2)  # queued behind k1: a 50 µs kernel-to-kernel gap
    c3 = t.call("cudaStreamSynchronize", 140, 2060)
    t.sync("Stream Sync", 2190, 5, c3, stream=7)
    return t, answer(2200, 2150, ["k1", "k1", "k1", "k2", "cudaStreamSynchronize"],
                     launch_delay=100, gpu_compute=2000, kernel_gap=50, blocked=50)


def event_sync() -> tuple[Trace, dict]:
    t = Trace()
    c1 = t.call("cudaLaunchKernel", 0, 10)
    t.gpu("long", 100, 3000, 7, c1)
    rec = t.call("cudaEventRecord", 20, 5)
    c2 = t.call("cudaLaunchKernel", 30, 10)
    t.gpu("short", 200, 500, 20, c2)
    c3 = t.call("cudaEventSynchronize", 50, 3100)
    t.sync("Event Sync", 3140, 5, c3, wait_on_stream=7, wait_on_cuda_event_record_corr_id=rec)
    t.op("aten::add", 3200, 100)
    return t, answer(3250, 3200, ["long", "long", "cudaEventSynchronize", "aten::add"],
                     cpu=100, launch_delay=100, gpu_compute=3000, blocked=50)


def stream_wait() -> tuple[Trace, dict]:
    t = Trace()
    c1 = t.call("cudaLaunchKernel", 0, 10)
    t.gpu("producer", 100, 2000, 7, c1)
    rec = t.call("cudaEventRecord", 20, 5)
    c2 = t.call("cudaStreamWaitEvent", 30, 5)
    t.sync("Stream Wait Event", 32, 1, c2, stream=20, wait_on_stream=7,
           wait_on_cuda_event_record_corr_id=rec)
    c3 = t.call("cudaLaunchKernel", 40, 10)
    t.gpu("consumer", 2150, 1000, 20, c3)
    c4 = t.call("cudaDeviceSynchronize", 200, 3000)  # the CPU's calls: 3030 < 3150
    t.sync("Context Sync", 3190, 5, c4)
    # Launch delay 100, producer 2000, the wait edge (0: no recorded event explains the 50 µs, and
    # the device sync was waiting: blocked), consumer 1000, the sync's wait after it 50 (blocked).
    return t, answer(3200, 3100, ["producer", "producer", "cudaDeviceSynchronize", "consumer",
                                  "cudaDeviceSynchronize"],
                     launch_delay=100, gpu_compute=3000, blocked=100)


def graph_launch() -> tuple[Trace, dict]:
    t = Trace()
    g = t.call("cudaGraphLaunch", 0, 20)
    t.gpu("g1", 100, 500, 7, g)
    t.gpu("g2", 610, 500, 7, g)
    t.gpu("g3", 1120, 500, 7, g)
    c = t.call("cudaStreamSynchronize", 30, 1670)
    t.sync("Stream Sync", 1690, 5, c, stream=7)
    return t, answer(1700, 1620, ["g1", "g1", "g1", "g2", "g2", "g3", "cudaStreamSynchronize"],
                     launch_delay=100, gpu_compute=1500, kernel_gap=20, blocked=80)


def pageable_copy() -> tuple[Trace, dict]:
    t = Trace()
    c1 = t.call("cudaLaunchKernel", 0, 10)
    t.gpu("k1", 100, 2000, 7, c1)
    c2 = t.call("cudaMemcpyAsync", 300, 1900)  # returns once its copy is done
    t.gpu("Memcpy DtoH (Device -> Pageable)", 2150, 30, 7, c2, cat="gpu_memcpy")
    t.op("aten::add", 2300, 100)
    # Launch delay 100, k1 2000, gap 50, the copy 30, the call's wait after it 20, idle 100,
    # add 100 (the CPU's own: 10 + 1900 + 100). HTA: the copy's end leads nowhere, 2180.
    return t, answer(2300, 2180, ["k1", "k1", "k1", "Memcpy DtoH (Device -> Pageable)",
                                  "cudaMemcpyAsync", "aten::add"],
                     cpu=100, launch_delay=100, gpu_compute=2000, kernel_gap=50, gpu_memory=30,
                     blocked=20)


def stream_sync_inferred() -> tuple[Trace, dict]:
    t = Trace()
    c1 = t.call("cudaLaunchKernel", 0, 10)
    t.gpu("k1", 100, 2000, 7, c1)
    c2 = t.call("cudaLaunchKernel", 20, 10)
    t.gpu("k2", 150, 500, 20, c2)  # ends before the sync begins: not what it waits for
    t.call("cudaStreamSynchronize", 400, 1750)  # no cuda_sync event
    t.op("aten::add", 2200, 100)
    # Launch delay 100, k1 2000, the sync's wait after k1 50, idle 50, add 100 (the CPU's own:
    # 10 + 10 + 1750 + 100). HTA: no sync edge, the sync weighs 0: launch delay and k1, 2100.
    return t, answer(2250, 2100, ["k1", "k1", "cudaStreamSynchronize", "aten::add"],
                     cpu=100, launch_delay=100, gpu_compute=2000, blocked=50)


def pageable_copy_cross_stream() -> tuple[Trace, dict]:
    t = Trace()
    t.op("aten::mul", 0, 200)
    c1 = t.call("cudaLaunchKernel", 10, 10)
    t.gpu("k1", 100, 1000, 20, c1)
    rec = t.call("cudaEventRecord", 30, 5)
    c2 = t.call("cudaStreamWaitEvent", 40, 5)  # stream 7 waits for k1 (stream 20)
    t.sync("Stream Wait Event", 42, 1, c2, stream=7, wait_on_stream=20,
           wait_on_cuda_event_record_corr_id=rec)
    c3 = t.call("cudaMemcpyAsync", 200, 1300)  # returns once its copy is done
    t.gpu("Memcpy DtoH (Device -> Pageable)", 1105, 40, 7, c3, cat="gpu_memcpy")
    t.op("aten::add", 1500, 100)
    # The CPU is busy to 200, then waits in the copy to 1500: that way (1500) is longer than the
    # GPU's into the call's end (1495: launch delay 90 from 10, k1 1000, 5 µs nothing records, the
    # copy 40, the call's 355 after it), then add 100: 1600, the window. The copy's 1300 µs wait is
    # split: k1 from the call's start (900, GPU work), the 5 µs wait no event explains and the
    # 355 µs after the copy ended (blocked), the copy (40, GPU work). HTA weighs cudaMemcpyAsync's
    # own time (its runtime-lock edge): the same 1600.
    return t, answer(1600, 1600, ["aten::mul", "cudaLaunchKernel", "aten::mul", "cudaEventRecord",
                                  "aten::mul", "cudaStreamWaitEvent", "aten::mul", "k1",
                                  "cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)",
                                  "cudaMemcpyAsync", "aten::add"],
                     cpu=300, gpu_compute=900, gpu_memory=40, blocked=360)


TRACES = {f.__name__: f for f in (cpu_nesting, launch, kernel_gap, event_sync, stream_wait,
                                  graph_launch, pageable_copy, stream_sync_inferred,
                                  pageable_copy_cross_stream)}


def answer(length_us: int, hta_length_us: int, segments: list[str], **categories: int) -> dict:
    """Path length (ns) with traceaug's and HTA's weights, the names of the path's timed
    segments in order (a launch delay or gap is named for its op, as the lane shows it), and
    ns per category (``idle`` added by ``with_idle``)."""
    return {"length_ns": length_us * 1000, "hta_length_ns": hta_length_us * 1000,
            "segments": segments, "categories": {k: v * 1000 for k, v in categories.items()}}


def with_idle(trace: Trace, answer: dict) -> dict:
    """``answer`` with ``window_ns`` (first start to last end of the trace's events) and the
    path's ``idle`` time in it: the window less the path's length."""
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in trace.events if e["ph"] == "X"]
    window = (max(b for _, b in spans) - min(a for a, _ in spans)) * 1000
    answer["window_ns"] = window
    if window > answer["length_ns"]:
        answer["categories"]["idle"] = window - answer["length_ns"]
    return answer


def main(out: Path = HERE) -> None:
    folder = out / "critical_path"
    folder.mkdir(parents=True, exist_ok=True)
    answers = {}
    for name, make in TRACES.items():
        trace, answer_ = make()
        answers[name] = with_idle(trace, answer_)
        (folder / f"{name}.json").write_text(trace.text())
    (out / "critical_path.answers.json").write_text(json.dumps(answers, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
