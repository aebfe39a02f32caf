"""Load kinds: which events, args and flows each load keeps, so a command loads the least it needs (all keep
metadata and ProfilerSteps). Pass-1 worker processes import this module: import nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass

# Args of complete events an analysis load keeps: exactly what traceaug's SQL reads (GPU identity,
# correlation id, copy size and bandwidth); metadata, counter and instant events keep all of theirs.
KINETO_ARGS = frozenset({
    "correlation", "correlation id", "device", "stream", "bytes", "memory bandwidth (GB/s)",
    "traceaug_tid", "traceaug_lane",  # on events a rewriter moved to overlap lanes (base.sql)
    "graph node id",  # on kernels a CUDA graph replayed (analysis.graph_replay)
})
# What the critical path reads (analysis.critical_path.ARGS): correlation ids, GPU identity, what a sync
# waited on; sync events keep all of theirs (``whole_args``). Copies are told by category, not "bytes".
SYNC_ARGS = frozenset({
    "correlation", "correlation id", "device", "stream", "cuda_sync_kind", "wait_on_stream",
    "wait_on_cuda_event_record_corr_id",
})

# Kineto categories, in either schema (current and 2021).
# MTIA (HTA's MTIA traces): on-device CCP events are its kernels, mtia_runtime its launches.
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "Runtime", "cuda_driver", "mtia_runtime"})
GPU_OP_CATEGORIES = frozenset({"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset",
                               "mtia_ccp_events"})
GPU_ONLY_CATEGORIES = GPU_OP_CATEGORIES | RUNTIME_CATEGORIES  # GPU ops and their launches
CPU_OP_CATEGORIES = frozenset({"cpu_op", "Operator"})
ANNOTATION_CATEGORIES = frozenset({"user_annotation", "gpu_user_annotation"})
SYNC_CATEGORIES = frozenset({"cuda_sync"})
MEMORY_CATEGORIES = frozenset({"cpu_instant_event"})  # Kineto's [memory] events (profile_memory=True)
CUPTI_CATEGORIES = frozenset({"cuda_profiler_range"})  # CUPTI range-profiler metrics, one event a kernel
# GPU ops, their launches and user annotations: a serving trace's steps are annotations (analysis.serving)
STEP_CATEGORIES = GPU_ONLY_CATEGORIES | {"user_annotation"}

# Runtime calls "gpu" and "ops" leave out: they query, check or wait, never enqueue GPU work (no GPU op shares
# their correlation id). The "sync" kind keeps them: the critical path follows the waits.
HOST_ONLY_CALLS = frozenset({
    "cudaEventQuery", "cudaStreamQuery", "cudaEventSynchronize", "cudaStreamSynchronize",
    "cudaDeviceSynchronize", "cudaStreamWaitEvent", "cudaEventRecord", "cudaEventRecordWithFlags",
    "cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaEventElapsedTime",
    "cudaPeekAtLastError", "cudaGetLastError", "cudaStreamIsCapturing",
    "cudaStreamGetCaptureInfo", "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount",
    "cudaDeviceGetAttribute", "cudaGetDeviceProperties", "cudaDriverGetVersion",
    "cudaRuntimeGetVersion", "cudaFuncGetAttributes", "cudaFuncSetAttribute",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cudaPointerGetAttributes",
    "hipEventQuery", "hipStreamQuery", "hipEventSynchronize", "hipStreamSynchronize",
    "hipDeviceSynchronize", "hipStreamWaitEvent", "hipEventRecord", "hipPeekAtLastError",
    "hipGetLastError", "hipStreamIsCapturing", "hipGetDevice", "hipSetDevice",
    "hipGetDeviceCount", "hipDeviceGetAttribute", "hipGetDeviceProperties",
    "hipFuncGetAttributes", "hipPointerGetAttributes",
})


# More calls that never launch GPU work, left out by the "patterns" kind (it reads only the
# launches: a GPU op's first call by correlation id).
NO_LAUNCH_CALLS = frozenset({
    "cudaStreamGetPriority", "cudaDeviceGetStreamPriorityRange", "cudaStreamGetCaptureInfo_v2",
    "cudaGetFuncBySymbol", "cudaThreadExchangeStreamCaptureMode", "hipPointerGetAttribute",
    "hipStreamGetCaptureInfo", "hipGetDevicePropertiesR0600", "hipDriverGetVersion",
    "hipStreamGetPriority", "hipDeviceGetStreamPriorityRange",
})
# What patterns reads of a complete event (analysis.patterns): GPU identity and correlation.
PATTERNS_ARGS = frozenset({"correlation", "correlation id", "device", "stream", "traceaug_tid",
                           "traceaug_lane"})
# What analysis.collectives reads: the args NCCL / RCCL kernels carry with NCCL metadata on, PyTorch's seq
# number; ``COLLECTIVE_OPS`` keep all args (their input dims and types size a message when no kernel says).
COLLECTIVE_ARGS = KINETO_ARGS | frozenset({
    "Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
    "In split size", "Out split size", "Process Group Name", "Process Group Description",
    "Process Group Ranks", "Seq", "seq",
})
COLLECTIVE_OPS = ("record_param_comms", "nccl:", "rccl:")
# What analysis.efficiency reads of a CPU op: the shapes, types and scalars recorded with record_shapes=True.
SHAPE_ARGS = KINETO_ARGS | frozenset({"Input Dims", "Input type", "Concrete Inputs"})


@dataclass(frozen=True)
class LoadKind:
    """What one load keeps for the engine. ``skim``: dropped events are cut unparsed (``read.skim``): no UI
    columns, flow ids or whole span in the plan, faults in them unseen; for analyses that write no trace."""

    name: str
    categories: frozenset[str] | None = None  # kept, besides metadata and ProfilerSteps; None: every event
    skip_calls: frozenset[str] = frozenset()  # runtime / driver calls left out even so
    args: frozenset[str] | None = KINETO_ARGS  # args kept on complete events; None: all
    whole_args: frozenset[str] = frozenset()  # categories whose complete events keep all their args
    whole_args_names: tuple[str, ...] = ()  # name prefixes of events that keep all their args too
    flows: bool = False  # flow events kept
    skim: bool = False
    # CPU ops kept only where one holds a kept runtime call or [memory] event on its thread: all
    # efficiency and memory read of them (a launch's op and the ops around it; ``normalize.holding``)
    holding_ops: bool = False

    @property
    def full(self) -> bool:
        """Every event as it is: pass 2 re-reads the file instead of holding what pass 1 kept."""
        return self.categories is None and self.args is None and self.flows

    @property
    def subset(self) -> bool:
        """Only some categories (the engine sees a part of the events; pass 1 saw them all)."""
        return self.categories is not None


KINDS: dict[str, LoadKind] = {k.name: k for k in (
    LoadKind("analysis"),  # every event, the args traceaug's SQL reads, no flows
    LoadKind("full", args=None, flows=True),  # everything, for your own SQL
    LoadKind("gpu", STEP_CATEGORIES | MEMORY_CATEGORIES, HOST_ONLY_CALLS),  # counters
    # cupti (analysis.cupti): the ranges with all their metrics, the launches and the ops around them
    LoadKind("cupti", CUPTI_CATEGORIES | RUNTIME_CATEGORIES | CPU_OP_CATEGORIES, HOST_ONLY_CALLS,
             whole_args=CUPTI_CATEGORIES, skim=True),
    # kernels, gaps, breakdown, launches, report (analysis.gpu_steps): "gpu", skimmed
    LoadKind("gpu_steps", STEP_CATEGORIES | MEMORY_CATEGORIES, HOST_ONLY_CALLS, skim=True),
    # kernels without --step (analysis.kernels.load_kind): the GPU ops alone, no launches, skimmed
    LoadKind("gpu_ops", GPU_OP_CATEGORIES, skim=True),
    LoadKind("ops", STEP_CATEGORIES | CPU_OP_CATEGORIES, HOST_ONLY_CALLS),  # diff
    LoadKind("sync", GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES | ANNOTATION_CATEGORIES
             | SYNC_CATEGORIES, args=SYNC_ARGS, whole_args=SYNC_CATEGORIES),  # critical path
    # whatif --roofline: the critical path's events and the CPU ops' shapes (analysis.efficiency)
    LoadKind("sync_shapes", GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES | ANNOTATION_CATEGORIES
             | SYNC_CATEGORIES, args=SYNC_ARGS | SHAPE_ARGS, whole_args=SYNC_CATEGORIES),
    # patterns: CPU-side annotations too (``--operator`` may name one, as HTA's does)
    LoadKind("patterns", GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES | {"user_annotation"},
             HOST_ONLY_CALLS | NO_LAUNCH_CALLS, args=PATTERNS_ARGS),
    # collectives, stragglers: GPU ops and launches, CPU ops and annotations (a late
    # arrival's cause), the collective args; flows and polling calls cut unparsed
    LoadKind("collectives", GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES | ANNOTATION_CATEGORIES,
             HOST_ONLY_CALLS, args=COLLECTIVE_ARGS, whole_args_names=COLLECTIVE_OPS, skim=True),
    # a CUDA / HIP graph's capture (analysis.graph_replay): the launch calls, the kernel each recorded and
    # the CPU ops they ran in with their shapes (efficiency); python functions and flows cut unparsed
    LoadKind("capture", RUNTIME_CATEGORIES | CPU_OP_CATEGORIES | ANNOTATION_CATEGORIES, HOST_ONLY_CALLS
             | NO_LAUNCH_CALLS, args=SHAPE_ARGS | {"kernel"}, skim=True, holding_ops=True),
    # the job's critical path (analysis.job_path): the critical path's events and the
    # collectives' args in one load per rank; it writes no rank's trace, so skimmed. report JOB's load
    # too (shared with stragglers'), so with the CPU ops' shapes and the [memory] events: its efficiency
    # and memory sections come from it (``job.parts.sections``; they cost the load no measurable time)
    LoadKind("job_path", GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES | ANNOTATION_CATEGORIES
             | SYNC_CATEGORIES | MEMORY_CATEGORIES, args=SYNC_ARGS | COLLECTIVE_ARGS | SHAPE_ARGS,
             whole_args=SYNC_CATEGORIES, whole_args_names=COLLECTIVE_OPS, skim=True),
    # stragglers: "job_path" without what only report's sections read (the CPU ops' shapes, the [memory]
    # events), read as "job_path" itself when the table cache is on (``READ_AS_ONE``)
    LoadKind("stragglers", GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES | ANNOTATION_CATEGORIES
             | SYNC_CATEGORIES, args=SYNC_ARGS | COLLECTIVE_ARGS, whole_args=SYNC_CATEGORIES,
             whole_args_names=COLLECTIVE_OPS, skim=True),
    # efficiency: GPU ops, their launches and the CPU ops around them with their shapes; without OUT
    # (the tables alone) the other events are cut unparsed
    LoadKind("efficiency", GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES, HOST_ONLY_CALLS, args=SHAPE_ARGS,
             holding_ops=True),
    LoadKind("efficiency_tables", GPU_ONLY_CATEGORIES | CPU_OP_CATEGORIES, HOST_ONLY_CALLS,
             args=SHAPE_ARGS, skim=True, holding_ops=True),
    # report: "gpu_steps" with the CPU ops and their shapes, so that one read gives the efficiency and
    # memory sections too (``job.parts.sections``; report JOB: "job_path")
    LoadKind("report", STEP_CATEGORIES | MEMORY_CATEGORIES | CPU_OP_CATEGORIES, HOST_ONLY_CALLS,
             args=SHAPE_ARGS, skim=True, holding_ops=True),
    # diff: "ops" with the CPU ops' shapes and the [memory] events (its efficiency and memory sections)
    LoadKind("diff", STEP_CATEGORIES | CPU_OP_CATEGORIES | MEMORY_CATEGORIES, HOST_ONLY_CALLS,
             args=SHAPE_ARGS),
)}


# With the table cache on, a job's rank is read once as ``ONE_READ`` (its GPU ops, collective tables and
# every step's replay part: ``job.parts.widened``), which answers a command asking any kind of
# ``ANSWERED_BY_ONE``: its GPU ops are those kinds' (equal on every shared trace; ``gpu_ops``: no launches).
# A command asking a kind of ``READ_AS_ONE`` reads ``ONE_READ`` whenever the cache is on (it costs as much,
# and fills the cache for the next command); the others only where the cache holds it already.
ONE_READ = "job_path"
READ_AS_ONE = frozenset({ONE_READ, "stragglers"})
ANSWERED_BY_ONE = frozenset({"gpu_ops", "gpu_steps"}) | READ_AS_ONE


def kind_of(kind: str | LoadKind | None = None, full: bool = False, only: str | None = None
            ) -> LoadKind:
    """The load kind a caller asked for: ``kind`` (a name of ``KINDS``), or the older
    keywords it replaces (``full=True`` is ``"full"``, ``only="gpu"`` is ``"gpu"``)."""
    if isinstance(kind, LoadKind):
        return kind
    if kind is None:
        if full and only:
            raise ValueError("full=True keeps every event; only= keeps a subset: give one kind")
        kind = "full" if full else only or "analysis"
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return KINDS[kind]
