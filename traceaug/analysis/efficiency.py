"""How well the GPU is used: each CPU op that launched GPU work (its nearest CPU op by correlation) gets the
GPU time of what it launched and, from its recorded shapes, FLOPs and bytes (``flops``); against the
device's peaks (``peaks``): achieved TFLOP/s and TB/s, bound, roofline time, % of roofline; MFU per step."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from . import graph_replay
from .flops import Inputs, Model, model
from .gpu_steps import GpuOps, gpu_ops
from .peaks import Peak, identify, table, unknown_note
from .shapes import NO_OP, inputs, launch_ops
from .tables import Columns

if TYPE_CHECKING:
    from ..trace import Trace

NO_MODEL, NO_SHAPES = "no model", "no shapes"
# What a trace with no figure to give says instead (one line)
NO_SHAPES_NOTE = "no op has a model: record shapes (torch.profiler.profile(record_shapes=True))"
NO_MODEL_NOTE = "no op of this trace has a model"
NO_GPU_NOTE = "no GPU op in this trace: nothing ran on a GPU to measure"
TF32 = re.compile(r"tf32|tensorop_s\d+gemm")  # kernels running FP32 GEMMs on TF32 tensor cores
GROUP_COLUMNS = ("device", "name", "shapes", "dtypes", "family", "count", "total_ns", "mean_ns", "min_ns",
                 "max_ns", "flops", "bytes", "tflops", "tbps", "flops_per_byte", "bound", "roofline_ns",
                 "roofline_pct")
FAMILY_COLUMNS = ("device", "family", "count", "total_ns", "gpu_pct", "flops", "bytes", "tflops", "tbps",
                  "roofline_ns", "roofline_pct")
STEP_COLUMNS = ("step", "step_ns", "flops", "mfu_pct", "families")
OPPORTUNITY_COLUMNS = ("name", "shapes", "dtypes", "gpu_saved_ns", "saved_ns", "saved_pct")


def _modelled(name: str, inputs: Inputs | None, tf32: bool, launched: bool) -> tuple:
    """An op's name, shapes, dtypes, family, FLOPs, bytes and peak kind (-1, "": no model); an FP32 GEMM
    whose kernels are TF32 ones runs against TF32's peak."""
    found: Model | None = model(name, inputs) if inputs is not None else None
    if found is not None and found.kind == "fp32_matrix" and tf32:
        found = Model(found.family, found.flops, found.bytes, "tf32_matrix")
    shapes, dtypes = _shape_text(inputs)
    family = found.family if found else (NO_SHAPES if inputs is None and launched else NO_MODEL)
    return (name, shapes, dtypes, family, found.flops if found else -1, found.bytes if found else -1,
            found.kind if found else "")


def _shape_text(inputs: Inputs | None) -> tuple[str, str]:
    if inputs is None:
        return "", ""
    dims = ", ".join(str(list(d)) if d is not None else "[]" for d in inputs.dims[:len(inputs.types)])
    return f"[{dims}]", ", ".join(t for t in inputs.types if t)


def device_peaks(trace: Trace, peaks_file: str | None) -> tuple[dict[int, Peak | None], list[str]]:
    """Each device's peaks (None: unknown) and the notes to say (how a device was found, or how to give
    peaks for one that was not)."""
    rows, said, out = table(peaks_file), {}, {}
    for props in trace.device_properties:
        peak = identify(props, rows)
        device = int(props.get("id", 0))
        out[device] = peak
        if peak is None:
            said.setdefault(unknown_note(props), []).append(device)
        elif peak.found_by != "name":
            said.setdefault(f"{peak.device} identified by {peak.found_by}", []).append(device)
    notes = [f"device{'s' if len(d) > 1 else ''} {', '.join(map(str, d))}: {text}"
             for text, d in said.items()]
    return out, notes


def op_rows(trace: Trace, g: GpuOps | None = None) -> tuple[Columns, Columns]:
    """One row per launching CPU op (a graph-replayed kernel's: the op call that captured it, with its shapes;
    and one per GPU op nothing launched): device, stream, ts, end, gpu_ns,
    step, name, shapes, dtypes, family, flops, bytes, kind, ``launcher`` (the CPU op's slice id; -1: none),
    ``call`` (the captured op call's number, ``graph_replay``; -1: none); and the steps (``gpu_steps``;
    ``g``: the trace's GPU ops, when the caller has them)."""
    g = g if g is not None else gpu_ops(trace, trace.rank)
    ops = g.ops
    trace.include("traceaug.gpu")
    link = launch_ops(trace)
    by_corr = dict(zip(link["correlation"].tolist(), link["op"].tolist(), strict=True))
    launcher = np.array([by_corr.get(c, -1) if on else -1 for c, on in
                         zip(ops["correlation"].tolist(), ops["launched"].tolist(), strict=True)],
                        dtype=np.int64)
    named = dict(zip(link["op"].tolist(), zip(link["name"].tolist(), link["arg_set_id"].tolist()),
                     strict=True))
    op_set = {op: named[op] for op in set(launcher.tolist()) - {-1}}
    inputs_of = inputs(trace, [a for _, a in op_set.values()])
    # A GPU op nothing launched is its own row (keyed by a negative number), and a graph-replayed one's
    # launcher is the op call that captured it, with that call's shapes (keyed below -n).
    n = len(launcher)
    key = np.where(launcher >= 0, launcher, -1 - np.arange(n))
    call = graph_replay.op_of(g.replays, ops["id"], "call")
    captured = np.flatnonzero((call != None) & (call != -1))  # noqa: E711  (an object column)
    key[captured] = -1 - n - call[captured].astype(np.int64)
    shapes_of = graph_replay.op_of(g.replays, ops["id"][captured], "inputs")
    for i, k, shapes in zip(captured.tolist(), key[captured].tolist(), shapes_of.tolist()):
        op_set[k], inputs_of[("capture", k)] = (ops["op"][i], ("capture", k)), shapes
    order = np.lexsort((ops["ts"], key))
    starts = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]]) if len(order) else order
    rows = order[starts]  # each key's first GPU op
    gpu_ns = np.add.reduceat(ops["dur"][order], starts) if len(order) else np.zeros(0, np.int64)
    end = np.maximum.reduceat(ops["end"][order], starts) if len(order) else np.zeros(0, np.int64)
    names, first = np.unique(ops["name_id"], return_index=True)
    tf32_name = np.zeros(int(names.max(initial=-1)) + 1, dtype=bool)
    tf32_name[names] = [bool(TF32.search(n)) for n in ops["name"][first].tolist()]
    tf32_key = set(key[tf32_name[ops["name_id"]]].tolist())
    made: dict[tuple, int] = {}  # (name, arg set, TF32 kernels, launched) -> its number: each modelled once
    which = np.array([made.setdefault((*op_set.get(k, (NO_OP, -1)), k in tf32_key, k in op_set), len(made))
                      for k in key[rows].tolist()], dtype=np.int64)
    values = [_modelled(name, inputs_of.get(arg_set), tf32, launched)
              for name, arg_set, tf32, launched in made]
    modelled = dict(zip(("name", "shapes", "dtypes", "family", "flops", "bytes", "kind"),
                        zip(*values) if values else [()] * 7, strict=True))
    columns = {"device": ops["device"][rows].astype(np.int64), "stream": ops["stream"][rows].astype(np.int64),
               "ts": ops["ts"][rows], "end": end, "gpu_ns": gpu_ns.astype(np.int64),
               "step": ops["step"][rows],
               **{c: np.array(modelled[c], dtype=object)[which]
                  for c in ("name", "shapes", "dtypes", "family", "kind")},
               **{c: np.array(modelled[c], dtype=np.float64)[which] for c in ("flops", "bytes")},
               "launcher": np.where(key[rows] >= 0, key[rows], -1),
               "call": np.where(key[rows] < -n, -1 - n - key[rows], -1)}
    return columns, g.steps


def row_of(trace: Trace, rows: Columns, correlation: np.ndarray, ids: np.ndarray | None = None
           ) -> np.ndarray:
    """Per GPU op (by its ``correlation`` and engine ``ids``): the row of ``rows`` (``op_rows``) of the CPU op
    that launched it (with ``ids``, a graph-replayed kernel's: the op call that captured it), -1 for none."""
    link = launch_ops(trace)
    at = {op: i for i, op in enumerate(rows["launcher"].tolist()) if op >= 0}
    by_corr = {c: at[op] for c, op in zip(link["correlation"].tolist(), link["op"].tolist(), strict=True)
               if op in at}
    out = np.array([by_corr.get(c, -1) for c in correlation.tolist()], dtype=np.int64)
    if ids is None:
        return out
    call = graph_replay.op_of(graph_replay.attribute(trace), ids.astype(np.int64), "call")
    mine = np.flatnonzero((call != None) & (call != -1))  # noqa: E711  (an object column)
    if len(mine):
        of_call = {c: i for i, c in enumerate(rows["call"].tolist()) if c >= 0}
        out[mine] = [of_call.get(c, -1) for c in call[mine].tolist()]
    return out


def of_launches(trace: Trace, correlation: np.ndarray, ids: np.ndarray | None = None) -> Columns:
    """Per GPU op (by its ``correlation`` and engine ``ids``): the ``roofline_pct`` and ``bound`` of the CPU
    op that launched it (``row_of``; NaN / "": no model, or its device no peaks)."""
    rows, _ = op_rows(trace)
    roof = roofline(rows, device_peaks(trace, None)[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.r_[roof["roofline_ns"] / rows["gpu_ns"] * 100.0, np.nan]  # [-1]: no launching op
    at = row_of(trace, rows, correlation, ids)
    return {"roofline_pct": pct[at], "bound": np.r_[roof["bound"], [""]].astype(object)[at]}


def at_roofline(trace: Trace, pct: float, correlation: np.ndarray, gpu: np.ndarray,
                ids: np.ndarray | None = None) -> np.ndarray:
    """Per event (by its ``correlation`` and ``ids``; ``gpu``: which are GPU ops): the factor on a GPU op's
    time that brings the CPU op that launched it to ``pct`` % of its roofline (every GPU op it launched scaled
    alike); 1 where that is no faster, where the op has no model or its device no peaks (``whatif
    --roofline``)."""
    now = of_launches(trace, correlation, ids)["roofline_pct"]
    return np.where(gpu.astype(bool) & ~np.isnan(now), np.minimum(now / pct, 1.0), 1.0)


def opportunities(trace: Trace, rows: Columns, roof: Columns, top: int) -> Columns:
    """The ``top`` op groups by the time they would save at 100 % of their roofline, each replayed
    (``replay.whatif``: its GPU ops scaled to their roofline, the rest unchanged): ``saved_ns`` is the
    steps' replayed time saved, as the critical path carries it, ``gpu_saved_ns`` the ops' own."""
    from .replay import whatif

    keys = list(zip(*(rows[c].tolist() for c in ("name", "shapes", "dtypes")), strict=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = np.minimum(roof["roofline_ns"] / rows["gpu_ns"], 1.0)
    factor = np.where(np.isnan(factor), 1.0, factor)
    own: dict[tuple, float] = {}
    for k, f, ns in zip(keys, factor.tolist(), rows["gpu_ns"].tolist(), strict=True):
        if f < 1.0:
            own[k] = own.get(k, 0.0) + ns * (1.0 - f)
    chosen = sorted(own, key=lambda k: -own[k])[:top]

    found: list[np.ndarray] = []  # each event's row (``row_of``), found once: each replay has the same events
    per_row = np.r_[factor, 1.0]

    def change(key: tuple):
        mine = np.r_[np.array([k == key for k in keys], dtype=bool), False]

        def fn(ev: dict) -> np.ndarray:
            if not found:
                found.append(row_of(trace, rows, ev["correlation"], ev["id"]))
            return np.where(ev["gpu"].astype(bool) & mine[found[0]], per_row[found[0]], 1.0)
        return fn
    replays = whatif(trace, None, (), False, {str(i): change(k) for i, k in enumerate(chosen)})
    base = sum(r.baseline_ns for r in replays)
    out: dict[str, list] = {c: [] for c in OPPORTUNITY_COLUMNS}
    for i, (name, shapes, dtypes) in enumerate(chosen):
        saved = sum(r.baseline_ns - r.predicted_ns[str(i)] for r in replays)
        for c, v in zip(OPPORTUNITY_COLUMNS, (name, shapes, dtypes, round(own[name, shapes, dtypes]), saved,
                                               _ratio(saved, base, 100.0)), strict=True):
            out[c].append(v)
    order = np.argsort(-np.array(out["saved_ns"], dtype=np.int64), kind="stable")
    return _columns(out, order)


def roofline(rows: Columns, peaks: dict[int, Peak | None]) -> Columns:
    """Per row: the peak TFLOP/s and GB/s it runs against (NaN: none) and its roofline time in ns."""
    pairs: dict[tuple, int] = {}  # (device, kind) -> its number: each pair's peaks looked up once
    at = np.array([pairs.setdefault(p, len(pairs))
                   for p in zip(rows["device"].tolist(), rows["kind"].tolist(), strict=True)], dtype=np.int64)
    found = [(peaks[d].compute(kind) or np.nan, peaks[d].memory_gbps) if peaks.get(d) is not None and kind
             else (np.nan, np.nan) for d, kind in pairs]
    table = np.array(found, dtype=np.float64).reshape(-1, 2)
    compute, memory = table[at, 0], table[at, 1]
    modelled = rows["flops"] >= 0
    with np.errstate(invalid="ignore", divide="ignore"):
        t_compute = np.where(rows["flops"] > 0, rows["flops"] / compute / 1e3, 0.0)
        t_memory = rows["bytes"] / memory
        best = np.where(modelled, np.maximum(t_compute, t_memory), np.nan)
        bound = np.where(np.isnan(best), "", np.where(t_compute >= t_memory, "compute", "memory"))
    return {"peak_tflops": compute, "peak_gbps": memory, "roofline_ns": best, "bound": bound.astype(object),
            "compute_ns": np.where(modelled, t_compute, np.nan)}


def _ratio(a: float, b: float, scale: float = 1.0) -> float:
    return a / b * scale if b and not np.isnan(a) and not np.isnan(b) else float("nan")


def _ratios(a: np.ndarray, b: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """``_ratio`` of arrays, element by element."""
    return np.where((b != 0) & ~np.isnan(a) & ~np.isnan(b), a / b * scale, np.nan)


def groups(rows: Columns, roof: Columns) -> Columns:
    """Per (device, name, shapes, dtypes): count, time statistics and the model's figures, by total time."""
    index: dict[tuple, int] = {}  # each key's group, numbered in order of first appearance
    gid = np.array([index.setdefault(k, len(index)) for k in
                    zip(*(rows[c].tolist() for c in ("device", "name", "shapes", "dtypes")), strict=True)],
                   dtype=np.int64)
    order = np.argsort(gid, kind="stable")  # the rows group by group, each group's in their order
    starts = np.flatnonzero(np.r_[True, gid[order][1:] != gid[order][:-1]]) if len(order) else order
    first, count = order[starts], np.diff(np.r_[starts, len(order)])
    t = rows["gpu_ns"][order]
    total = np.add.reduceat(t, starts) if len(order) else t
    roof_ns = roof["roofline_ns"][order]  # float sums as ``sum`` makes them (pairwise), group by group
    best = np.array([roof_ns[a:b].sum() for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(order)])])
    flops, moved = rows["flops"][first], rows["bytes"][first]
    modelled = flops >= 0
    nan = np.full(len(first), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"device": rows["device"][first], "name": rows["name"][first], "shapes": rows["shapes"][first],
               "dtypes": rows["dtypes"][first], "family": rows["family"][first], "count": count,
               "total_ns": total, "mean_ns": total / count if len(first) else nan,
               "min_ns": np.minimum.reduceat(t, starts) if len(order) else t,
               "max_ns": np.maximum.reduceat(t, starts) if len(order) else t,
               "flops": np.where(modelled, flops, nan), "bytes": np.where(modelled, moved, nan),
               "tflops": np.where(modelled, _ratios(flops * count, total, 1e-3), nan),
               "tbps": np.where(modelled, _ratios(moved * count, total, 1e-3), nan),
               "flops_per_byte": np.where(modelled, _ratios(flops, moved), nan),
               "bound": roof["bound"][first], "roofline_ns": np.where(modelled, best, nan),
               "roofline_pct": _ratios(best, total, 100.0)}
    return _columns({c: out[c].tolist() for c in GROUP_COLUMNS}, np.argsort(-total, kind="stable"))


def _columns(out: dict[str, list], order: np.ndarray) -> Columns:
    cols = {}
    for c, v in out.items():
        a = np.array(v, dtype=object)[order] if v else np.array([], dtype=object)
        if c.endswith("_ns") and c != "mean_ns" and c != "roofline_ns" or c in ("count", "device", "step"):
            a = a.astype(np.int64)
        elif c not in ("name", "shapes", "dtypes", "family", "bound", "families"):
            a = a.astype(np.float64)
        cols[c] = a
    return cols


def families(rows: Columns, roof: Columns) -> Columns:
    """Per (device, op family): ops, time, share of the device's GPU time, FLOPs, bytes, achieved
    TFLOP/s and TB/s, roofline time and % of roofline; then the ops with no model or no shapes."""
    out: dict[str, list] = {c: [] for c in FAMILY_COLUMNS}
    for device in sorted(set(rows["device"].tolist())):
        on = rows["device"] == device
        busy = int(rows["gpu_ns"][on].sum())
        for fam in sorted(set(rows["family"][on].tolist()), key=lambda f: (f in (NO_MODEL, NO_SHAPES), f)):
            at = on & (rows["family"] == fam)
            total = int(rows["gpu_ns"][at].sum())
            modelled = fam not in (NO_MODEL, NO_SHAPES)
            flops = float(rows["flops"][at].sum()) if modelled else np.nan
            moved = float(rows["bytes"][at].sum()) if modelled else np.nan
            best = float(roof["roofline_ns"][at].sum()) if modelled else np.nan
            values = (device, fam, int(at.sum()), total, _ratio(total, busy, 100.0), flops, moved,
                      _ratio(flops, total, 1e-3), _ratio(moved, total, 1e-3), best,
                      _ratio(best, total, 100.0))
            for c, v in zip(FAMILY_COLUMNS, values, strict=True):
                out[c].append(v)
    return _columns(out, np.arange(len(out["family"])))


def mfu(rows: Columns, roof: Columns, steps: Columns) -> Columns:
    """Per step: its GPU window, the model FLOPs launched in it and MFU = (the time those FLOPs take at
    the peak of their kind) / the step's time; the families counted."""
    out: dict[str, list] = {c: [] for c in STEP_COLUMNS}
    counted = (rows["flops"] > 0) & ~np.isnan(roof["peak_tflops"])
    for step, ts, end in zip(*(steps[c].tolist() for c in ("step", "ts", "end")), strict=True):
        at = counted & (rows["step"] == step)
        window = int(end - ts)
        ideal = float(roof["compute_ns"][at].sum())
        values = (step, window, float(rows["flops"][at].sum()), _ratio(ideal, window, 100.0),
                  ", ".join(sorted(set(rows["family"][at].tolist()))))
        for c, v in zip(STEP_COLUMNS, values, strict=True):
            out[c].append(v)
    return _columns(out, np.arange(len(out["step"])))


def compute(trace: Trace, peaks_file: str | None = None, g: GpuOps | None = None) -> dict:
    """One rank's efficiency: ``groups``, ``families``, ``steps`` (MFU), the per-op ``rows`` with their
    ``roof`` (for the lane), the ``devices`` with the peaks used and the ``notes``."""
    peaks, notes = device_peaks(trace, peaks_file)
    rows, steps = op_rows(trace, g)
    if not len(rows["name"]):
        notes = [NO_GPU_NOTE]
    elif not len(trace.device_properties):
        notes.append(unknown_note({}))
    roof = roofline(rows, peaks)
    if len(rows["name"]) and not (rows["flops"] >= 0).any():
        notes.append(NO_SHAPES_NOTE if (rows["family"] == NO_SHAPES).all() or not len(rows["family"]) else
                     NO_MODEL_NOTE)
    devices = {d: {"device": p.device, "source": p.source, "found_by": p.found_by} if p else None
               for d, p in peaks.items()}
    return {"groups": groups(rows, roof), "families": families(rows, roof), "steps": mfu(rows, roof, steps),
            "rows": rows, "roof": roof, "devices": devices, "notes": notes,
            "peaks_known": any(p is not None for p in peaks.values())}


SECTION_KEYS = ("groups", "steps", "notes", "peaks_known", "devices")
CHANGED_COLUMNS = ("device", "name", "shapes", "dtypes", "count_a", "count_b", "total_a_ns", "total_b_ns",
                   "tflops_a", "tflops_b", "tbps_a", "tbps_b", "roofline_a_pct", "roofline_b_pct", "bound_a",
                   "bound_b")


def part(trace: Trace, g: GpuOps | None = None) -> dict:
    """A rank's efficiency for ``report``'s and ``diff``'s sections: ``compute``'s tables (shipped peaks)
    without the per-op rows."""
    found = compute(trace, None, g)
    return {k: found[k] for k in SECTION_KEYS}


def modelled(found: dict) -> bool:
    """Whether any op of a ``part`` has a model (else its figures are only the notes')."""
    return bool((~np.isnan(found["groups"]["flops"])).any())


def changed(a: dict, b: dict, keys: set[str], by: str) -> Columns:
    """The op groups (device, name, shapes, dtypes) of A's and B's ``part`` whose CPU op's key (``by``:
    "name" or "short-name", as ``diff`` groups) is in ``keys`` (the ops ``diff`` found changed), with their
    count, GPU time, achieved TFLOP/s and TB/s, % of roofline and bound in A and in B (0 / NaN / "":
    absent), largest change in GPU time first."""
    from .steps import shorten

    key = shorten if by == "short-name" else str
    figures = ("count", "total_ns", "tflops", "tbps", "roofline_pct", "bound")
    sides = []
    for found in (a, b):
        t = found["groups"]
        rows = zip(*(t[c].tolist() for c in ("device", "name", "shapes", "dtypes", *figures)), strict=True)
        sides.append({r[:4]: r[4:] for r in rows if r[1] != NO_OP and key(r[1]) in keys and r[6] == r[6]})
    out: dict[str, list] = {c: [] for c in CHANGED_COLUMNS}
    for k in dict.fromkeys([*sides[0], *sides[1]]):
        va, vb = (s.get(k, (0, 0, np.nan, np.nan, np.nan, "")) for s in sides)
        for c, v in zip(CHANGED_COLUMNS, (*k, *(x for pair in zip(va, vb) for x in pair)), strict=True):
            out[c].append(v)
    delta = np.abs(np.array(out["total_b_ns"], np.float64) - np.array(out["total_a_ns"], np.float64))
    order = np.argsort(-delta, kind="stable")
    return {c: np.array(v, dtype=object if c in ("name", "shapes", "dtypes", "bound_a", "bound_b") else
                        np.float64 if c.startswith(("tflops", "tbps", "roofline")) else np.int64)[order]
            for c, v in out.items()}
