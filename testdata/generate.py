"""Generate small Kineto (PyTorch profiler) traces whose answers are known by construction.

Why: traceaug's claims (exact nanosecond timestamps from epoch-µs text, overlap lanes for
kernels Perfetto would drop, correlation / flow binding, rank discovery in a directory)
need inputs where the right answer is known independently of traceaug. This script
builds each trace from an explicit schedule, serializes it the way Kineto does (epoch-µs
timestamps with three decimals, i.e. ns resolution) and writes the answers from the
schedule itself, never by reading the output back.

Outputs (next to this file; deterministic, no randomness, gzip with mtime 0):

* ``small_training.json`` / ``small_training.json.gz``: 3 profiler steps of a training
  loop on one A100 (streams 7 and 20), with one partly overlapping kernel pair on
  stream 7 in step 2.
* ``small_training.answers.json``: counts, kernel starts, gaps, launch delays, queue
  depths, bytes copied, span, for ``small_training.json``.
* ``rank_dir/``: rank 0 (compact ``distributedInfo``) and rank 1 (spaced, gzipped)
  one-step traces, plus a traceaug output file that rank discovery must ignore;
  ``rank_dir.answers.json`` holds their answers (outside the directory, which must hold
  traces only).

Run ``python testdata/generate.py`` to regenerate in place, or ``python testdata/generate.py
DIR`` to write the same files under DIR (the tests do that to check nothing drifted).
"""

from __future__ import annotations

import gzip
import json
import sys
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

HERE = Path(__file__).resolve().parent

BASE_NS = 1_712_198_313_370_000_000  # 1712198313370000.000 µs since the epoch
STEP_PERIOD_NS = 1_000_000
STEP_OFFSET_NS = 123  # every step starts 123 ns after a whole µs: exercises exact ns
CPU_PID = CPU_TID = 1000
GPU_PID = DEVICE = 0
COMPUTE_STREAM, COMM_STREAM = 7, 20
DEVICE_NAME = "NVIDIA A100-SXM4-80GB"
MEMCPY_BYTES = 4_194_304  # 4 MiB H2D per step ...
MEMCPY_DUR_NS = 262_144  # ... in 262.144 µs: exactly 16 GB/s
STREAM_GAP_NS = 1_500  # idle time the GPU leaves between consecutive ops on stream 7
OVERLAP_NS = 1_000  # step 2: the relu kernel starts this long before the gemm ends

GEMM = "ampere_sgemm_128x64_tn"
RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
        "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::"
        "{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >"
        "(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
        "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
        "const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3>)")
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"

DEVICE_PROPERTIES = [{
    "id": DEVICE, "name": DEVICE_NAME, "totalGlobalMem": 85_031_714_816,
    "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "regsPerMultiprocessor": 65536,
    "warpSize": 32, "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 167936,
    "numSms": 108, "sharedMemPerBlockOptin": 166912,
}]


class Raw(str):
    """A JSON number written verbatim (epoch-µs with 3 decimals does not fit a float)."""


def us(ns: int) -> Raw:
    """Integer ns -> Kineto's µs text with exactly three decimals."""
    return Raw(f"{ns // 1000}.{ns % 1000:03d}")


def _value(v) -> str:
    return str(v) if isinstance(v, Raw) else json.dumps(v)


def _obj(d: dict) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {_value(v)}" for k, v in d.items()) + "}"


def event_text(ev: dict) -> str:
    """One event laid out like Kineto's ChromeTraceLogger (one block per event)."""
    head = {k: v for k, v in ev.items() if k != "args"}
    text = "  {\n    " + _obj(head)[1:-1]
    if "args" in ev:
        text += ',\n    "args": ' + _obj(ev["args"])
    return text + "\n  }"


# ----- the schedule ---------------------------------------------------------------------

@dataclass
class GpuOp:
    kind: str  # kernel / memcpy / memset
    name: str
    stream: int
    start: int  # ns from BASE_NS
    dur: int
    correlation: int
    launch: int  # start of the runtime call that launched it
    bytes: int = 0


@dataclass
class Trace:
    """Events of one trace and the ground truth collected while building it."""

    rank: int
    steps: int
    shift: int = 0  # extra ns added to every timestamp (to tell ranks apart)
    events: list[dict] = field(default_factory=list)
    gpu: list[GpuOp] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("cpu_ops", "runtime_calls", "kernels", "memcpys", "memsets", "annotations"), 0))
    next_corr: int = 10_001
    next_ext: int = 1
    stream_free: dict[int, int] = field(default_factory=dict)  # stream -> end of its last op

    def x(self, cat: str, name: str, start: int, dur: int, pid=CPU_PID, tid=CPU_TID, **args) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                            "ts": us(BASE_NS + self.shift + start), "dur": us(dur), "args": args})

    def cpu_op(self, name: str, start: int, dur: int) -> None:
        self.counts["cpu_ops"] += 1
        ext = self._ext()
        self.x("cpu_op", name, start, dur, **{"External id": ext, "Record function id": 0,
                                             "Ev Idx": ext - 1})

    def annotation(self, name: str, start: int, dur: int) -> None:
        self.counts["annotations"] += 1
        self.x("user_annotation", name, start, dur, **{"External id": self._ext(),
                                                      "Record function id": 0})

    def _ext(self) -> int:
        self.next_ext += 1
        return self.next_ext - 1

    def launch(self, call: str, start: int, dur: int, kind: str, name: str, stream: int,
               gpu_dur: int, gpu_start: int | None = None, nbytes: int = 0) -> GpuOp:
        """A runtime call on the CPU thread, its GPU op and the ac2g flow joining them.

        The op starts when its stream is free (plus STREAM_GAP_NS) and never earlier than
        5 µs after the launch, unless ``gpu_start`` places it explicitly.
        """
        corr = self.next_corr
        self.next_corr += 1
        self.counts["runtime_calls"] += 1
        self.x("cuda_runtime", call, start, dur, **{"External id": self.next_ext - 1, "cbid": 211,
                                                   "correlation": corr})
        if gpu_start is None:
            gpu_start = max(start + 5_000, self.stream_free.get(stream, 0) + STREAM_GAP_NS)
        self.stream_free[stream] = max(self.stream_free.get(stream, 0), gpu_start + gpu_dur)
        op = GpuOp(kind, name, stream, gpu_start, gpu_dur, corr, start, nbytes)
        self.gpu.append(op)
        self.counts[kind + "s"] += 1
        args = {"External id": self.next_ext - 1, "device": DEVICE, "context": 1, "stream": stream,
                "correlation": corr}
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        if kind == "kernel":
            grid, block = ([1024, 1, 1], [256, 1, 1]) if stream == COMPUTE_STREAM else ([2, 1, 1],
                                                                                        [512, 1, 1])
            args.update({"registers per thread": 128, "shared memory": 16384,
                         "blocks per SM": round(grid[0] / 108, 6), "warps per SM": 75.851852,
                         "grid": grid, "block": block, "est. achieved occupancy %": 12})
        else:  # bytes per ns is GB/s
            args.update({"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / gpu_dur})
        self.x(cat, name, gpu_start, gpu_dur, pid=GPU_PID, tid=stream, **args)
        shifted = BASE_NS + self.shift
        self.events.append({"ph": "s", "id": corr, "pid": CPU_PID, "tid": CPU_TID,
                            "ts": us(shifted + start), "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": GPU_PID, "tid": stream,
                            "ts": us(shifted + gpu_start), "cat": "ac2g", "name": "ac2g", "bp": "e"})
        return op

    def linear(self, start: int, gemm_dur: int) -> GpuOp:
        """aten::linear -> t, addmm -> a gemm launched on the compute stream."""
        self.cpu_op("aten::linear", start, 40_000)
        self.cpu_op("aten::t", start + 1_000, 4_000)
        self.cpu_op("aten::addmm", start + 6_000, 32_000)
        return self.launch("cudaLaunchKernel", start + 10_000, 10_000, "kernel", GEMM, COMPUTE_STREAM,
                           gemm_dur)

    def step(self, k: int) -> None:
        """ProfilerStep#k: H2D copy, linear -> relu -> linear, all-reduce, SGD step."""
        s = (k - 1) * STEP_PERIOD_NS + STEP_OFFSET_NS
        self.annotation(f"ProfilerStep#{k}", s, 950_000)
        self.cpu_op("aten::to", s + 1_000, 30_000)
        self.cpu_op("aten::_to_copy", s + 2_000, 28_000)
        self.cpu_op("aten::copy_", s + 3_000, 26_000)
        self.launch("cudaMemcpyAsync", s + 4_000, 8_000, "memcpy", "Memcpy HtoD (Pinned -> Device)",
                    COMPUTE_STREAM, MEMCPY_DUR_NS, nbytes=MEMCPY_BYTES)
        if k == 1:  # zero a gradient bucket once
            self.cpu_op("aten::zeros", s + 32_000, 20_000)
            self.cpu_op("aten::zero_", s + 35_000, 15_000)
            self.cpu_op("aten::fill_", s + 36_000, 13_000)
            self.launch("cudaMemsetAsync", s + 37_000, 5_000, "memset", "Memset (Device)",
                        COMPUTE_STREAM, 2_500, nbytes=1_048_576)
        gemm = self.linear(s + 60_000, 100_037)
        self.cpu_op("aten::relu", s + 105_000, 20_000)
        self.cpu_op("aten::clamp_min", s + 107_000, 16_000)
        # Step 2: the relu kernel's recorded start precedes the gemm's end (clock skew in
        # real traces); it ends after the gemm, so Perfetto alone would drop it.
        relu_start = gemm.start + gemm.dur - OVERLAP_NS if k == 2 else None
        self.launch("cudaLaunchKernel", s + 110_000, 8_000, "kernel", RELU, COMPUTE_STREAM, 20_011,
                    gpu_start=relu_start)
        gemm2 = self.linear(s + 130_000, 99_989)
        self.cpu_op("c10d::allreduce_", s + 180_000, 40_000)
        self.cpu_op("record_param_comms", s + 185_000, 30_000)
        # NCCL waits for the gradients: it starts 2.345 µs after the second gemm ends.
        self.launch("cudaLaunchKernel", s + 190_000, 10_000, "kernel", NCCL, COMM_STREAM, 200_001,
                    gpu_start=gemm2.start + gemm2.dur + 2_345)
        self.annotation("Optimizer.step#SGD.step", s + 230_000, 70_000)
        self.cpu_op("aten::add_", s + 240_000, 30_000)
        self.launch("cudaLaunchKernel", s + 250_000, 8_000, "kernel", ADD, COMPUTE_STREAM, 10_007)

    def metadata(self) -> list[dict]:
        ts = us(BASE_NS + self.shift)
        m = [("process_name", CPU_PID, 0, {"name": "python"}),
             ("process_labels", CPU_PID, 0, {"labels": "CPU"}),
             ("process_sort_index", CPU_PID, 0, {"sort_index": CPU_PID}),
             ("thread_name", CPU_PID, CPU_TID, {"name": "thread 1000 (python)"}),
             ("thread_sort_index", CPU_PID, CPU_TID, {"sort_index": CPU_TID}),
             ("process_name", GPU_PID, 0, {"name": f"GPU {DEVICE}"}),
             ("process_labels", GPU_PID, 0, {"labels": f"GPU {DEVICE}"}),
             ("process_sort_index", GPU_PID, 0, {"sort_index": 5000000}),
             ("thread_name", GPU_PID, COMPUTE_STREAM, {"name": f"stream {COMPUTE_STREAM}"}),
             ("thread_name", GPU_PID, COMM_STREAM, {"name": f"stream {COMM_STREAM}"})]
        return [{"name": n, "ph": "M", "ts": ts, "pid": p, "tid": t, "args": a} for n, p, t, a in m]

    # ----- serialization ------------------------------------------------------------------
    def text(self, spaced_dist: bool = True) -> str:
        """The whole file; ``spaced_dist=False`` writes ``distributedInfo`` compactly."""
        dist = {"backend": "nccl", "rank": self.rank, "world_size": 2}
        if spaced_dist:
            dist_line = f'  "distributedInfo": {json.dumps(dist)},\n'
        else:
            dist_line = f'  "distributedInfo":{json.dumps(dist, separators=(",", ":"))},\n'
        body = ",\n".join(event_text(e) for e in self.metadata() + self.events)
        props = json.dumps(DEVICE_PROPERTIES, indent=2).replace("\n", "\n  ")
        trace_name = f"/tmp/profiler/host-a_{4242 + self.rank}.1712198313370.pt.trace.json"
        return ("{\n"
                '  "schemaVersion": 1,\n'
                f'  "deviceProperties": {props},\n'
                f"{dist_line}"
                '  "record_shapes": 1,\n'
                '  "traceEvents": [\n'
                f"{body}\n"
                "  ],\n"
                f'  "traceName": "{trace_name}",\n'
                '  "displayTimeUnit": "ms"\n'
                "}\n")

    # ----- ground truth ---------------------------------------------------------------------
    def answers(self) -> dict:
        kernels = sorted((op for op in self.gpu if op.kind == "kernel"), key=lambda o: o.start)
        base = BASE_NS + self.shift
        per_stream: dict[str, list[GpuOp]] = {}
        for op in kernels:
            per_stream.setdefault(f"{DEVICE}:{op.stream}", []).append(op)
        gaps = {k: [b.start - (a.start + a.dur) for a, b in pairwise(ops)]
                for k, ops in per_stream.items()}
        starts = [op.start for op in self.gpu] + [int(e["ts"].replace(".", "")) - base
                                                   for e in self.events if e["ph"] == "X"]
        ends = [op.start + op.dur for op in self.gpu] + [
            int(e["ts"].replace(".", "")) - base + int(e["dur"].replace(".", ""))
            for e in self.events if e["ph"] == "X"]
        by_launch = sorted(self.gpu, key=lambda o: o.launch)
        queue = {str(op.correlation): sum(1 for o in by_launch if o.launch < op.launch < o.start)
                 for op in by_launch}
        first, second = self._overlap_pair()
        memcpys = [op for op in self.gpu if op.kind == "memcpy"]
        return {
            "rank": self.rank,
            "world_size": 2,
            "device": f"{DEVICE}: {DEVICE_NAME}",
            "profiler_steps": self.steps,
            "counts": {**self.counts},
            "streams": sorted({f"{DEVICE}:{op.stream}" for op in self.gpu},
                              key=lambda s: int(s.split(":")[1])),
            "kernels_per_stream": {k: len(v) for k, v in per_stream.items()},
            "kernel_starts_ns": [base + op.start for op in kernels],
            "kernel_gaps_ns": gaps,
            "start_ns": base + min(starts),
            "end_ns": base + max(ends),
            "memcpy_bytes_total": sum(op.bytes for op in memcpys),
            "memcpy_bandwidth_gbps": sorted({op.bytes / op.dur for op in memcpys}),
            "launch_delay_ns": {str(op.correlation): op.start - op.launch for op in by_launch},
            "queue_depth_at_launch": queue,
            "flows": len(self.gpu),
            "overlap_pair": None if first is None else {
                "device": DEVICE, "stream": first.stream,
                "first": {"correlation": first.correlation, "start_ns": base + first.start,
                          "end_ns": base + first.start + first.dur},
                "second": {"correlation": second.correlation, "start_ns": base + second.start,
                           "end_ns": base + second.start + second.dur},
            },
        }

    def _overlap_pair(self):
        ops = sorted(self.gpu, key=lambda o: (o.stream, o.start))
        for a, b in pairwise(ops):
            if a.stream == b.stream and b.start < a.start + a.dur < b.start + b.dur:
                return a, b
        return None, None


DEFINITIONS = {
    "kernel_starts_ns": "every kernel's start in epoch ns, ascending",
    "kernel_gaps_ns": "per device:stream, next kernel start minus previous kernel end, in ts order",
    "launch_delay_ns": "per correlation id: GPU op start minus the start of its runtime call",
    "queue_depth_at_launch": ("per correlation id: GPU ops whose runtime call started before this "
                              "call and that had not started on the GPU when this call started"),
    "start_ns/end_ns": "earliest start / latest end over all complete (X) events, epoch ns",
    "flows": "ac2g flows, one per GPU op (id = correlation)",
}


def build(rank: int, steps: int, shift: int = 0) -> Trace:
    t = Trace(rank=rank, steps=steps, shift=shift)
    for k in range(1, steps + 1):
        t.step(k)
    return t


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def main(out: Path = HERE) -> None:
    """Write every output under ``out`` (the testdata directory unless told otherwise)."""
    t = build(rank=0, steps=3)
    text = t.text().encode()
    json.loads(text)  # the output must be valid JSON
    write(out / "small_training.json", text)
    write(out / "small_training.json.gz", gzip.compress(text, compresslevel=9, mtime=0))
    answers = {"file": "small_training.json", "definitions": DEFINITIONS, **t.answers()}
    write(out / "small_training.answers.json", (json.dumps(answers, indent=2) + "\n").encode())

    rank_dir = out / "rank_dir"
    r0, r1 = build(rank=0, steps=1), build(rank=1, steps=1, shift=7)
    # Names sort opposite to ranks and carry no "rank": the rank must come from distributedInfo.
    write(rank_dir / "node-b.4242.1712198313370.pt.trace.json", r0.text(spaced_dist=False).encode())
    write(rank_dir / "node-a.4243.1712198313370.pt.trace.json.gz",
          gzip.compress(r1.text(spaced_dist=True).encode(), compresslevel=9, mtime=0))
    output = ('{"traceaug": {"tool": "traceaug", "version": "0.1.0"}, '
              '"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, '
              '"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "traceaug::summary", '
              '"pid": 1, "tid": 1, "ts": 0, "dur": 1}]}\n')
    write(rank_dir / "node-b.4242.1712198313370.pt.trace.traceaug.json", output.encode())
    rank_answers = {
        "ranks": [0, 1],
        "ignored": ["node-b.4242.1712198313370.pt.trace.traceaug.json"],
        "files": {"0": "node-b.4242.1712198313370.pt.trace.json",
                  "1": "node-a.4243.1712198313370.pt.trace.json.gz"},
        "per_rank": {"0": r0.answers(), "1": r1.answers()},
    }
    write(out / "rank_dir.answers.json", (json.dumps(rank_answers, indent=2) + "\n").encode())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
