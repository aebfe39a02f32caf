"""What-if replay of a critical-path graph: each node at the time its last dependency allows, measured slack
kept on binding edges, so the unchanged replay is the measured one and changes move nodes along edges only."""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
from dataclasses import dataclass

import numpy as np

from ..errors import SumTooLarge, TraceaugError
from . import critical_path as cp
from . import dag, stacked
from .percentiles import percentiles
from .steps import is_comm
from .tables import matches

TYPES = ("comp", "comm", "mem", "cpu")
NO_LAUNCH_DELAY = "no-launch-delay"
WAIT, OWN, CPU_GAP = range(3)  # what an edge's delay is (``Model.what``)
REPLAYS = {"baseline": "baseline_error_pct", "dependency-only": "dependency_error_pct",
           "dependency + cpu gaps": "with_cpu_gaps_error_pct"}  # each replay's error column
MAX_FACTOR = 1e6  # a larger one takes a window's ns past what int64 sums hold (2**63 ns: 292 years)


RELAXED_AT_ONCE = 1 << 16  # edges ``schedule`` relaxes per block of Python ints


def schedule(node_ts: np.ndarray, node_order: np.ndarray, src: np.ndarray, dst: np.ndarray,
             delay: np.ndarray, lane: np.ndarray | None = None, roots: np.ndarray | None = None
             ) -> np.ndarray:
    """Each node's replayed time: the latest source time plus delay over its in-edges (none: its ``roots``
    time, default ``node_ts``). Edges must run forward in ``node_ts``; ``dag.chains``' runs are cumulative
    sums, other edges relaxed."""
    n = len(node_ts)
    roots = node_ts if roots is None else roots
    if not len(src):
        return roots.astype(np.int64).copy()
    topo = dag.positions(node_ts, node_order, src, dst)
    runs = dag.chains(topo, src, dst, delay, lane)
    heads = runs.order[runs.head]
    has_in = np.bincount(dst, minlength=n) > 0
    value = np.where(has_in[heads], dag.NEVER, roots[heads]).tolist()
    rest = np.flatnonzero(~runs.link)
    rest = rest[np.argsort(topo[dst[rest]], kind="stable")]
    for at in range(0, len(rest), RELAXED_AT_ONCE):  # (as Python ints a block at a time: 40 B an edge each)
        part = rest[at:at + RELAXED_AT_ONCE]
        for a, d, x in zip(runs.run[src[part]].tolist(), runs.run[dst[part]].tolist(),
                           (runs.base[src[part]] + delay[part]).tolist()):
            x += value[a]
            if x > value[d]:
                value[d] = x
    return np.array(value, np.int64)[runs.run] + runs.base


def binding(node_ts: np.ndarray, src: np.ndarray, dst: np.ndarray, delay: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(each node's binding in-edge, -1 for none; the slack per edge): the first in-edge with the latest
    source time plus delay, and what the node's measured time leaves over it, kept on that edge."""
    n = len(node_ts)
    at = node_ts[src] + delay
    o = np.lexsort((np.arange(len(src)), -at, dst))
    first = o[np.r_[True, dst[o][1:] != dst[o][:-1]]] if len(o) else o
    bind = np.full(n, -1, np.int64)
    bind[dst[first]] = first
    slack = np.zeros(len(src), np.int64)
    slack[first] = node_ts[dst[first]] - at[first]
    return bind, slack


def rebound(node_ts: np.ndarray, src: np.ndarray, dst: np.ndarray, delay: np.ndarray,
            held: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``binding`` of these edges from one that held for most of them (``held``: bind and slack, -1 and 0
    where unknown): only the nodes where it no longer holds (its edge's time changed, an in-edge now later,
    or as late and before it) are bound again, the others keep theirs: the same answer, without sorting
    every edge."""
    bind, slack = held
    if not len(src):
        return binding(node_ts, src, dst, delay)
    at = node_ts[src] + delay
    has = bind >= 0
    b = np.maximum(bind, 0)
    again = ~(has & (at[b] + slack[b] == node_ts))
    at_b = np.where(has, at[b], np.iinfo(np.int64).min)
    edge = np.arange(len(src))
    beats = (at > at_b[dst]) | ((at == at_b[dst]) & (edge < b[dst]))
    again[dst[beats]] = True
    pick = np.flatnonzero(again[dst])
    sub_bind, sub_slack = binding(node_ts, src[pick], dst[pick], delay[pick])
    out_bind = np.where(again, -1, bind)
    found = again & (sub_bind >= 0)
    out_bind[found] = pick[sub_bind[found]]
    out_slack = slack.copy()
    out_slack[pick] = sub_slack
    return out_bind, out_slack


def chain_sums(parent: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per node, the sum of ``value`` from it back to its root along ``parent`` (-1 at a root), by pointer
    jumping: log(depth) vector steps, never a walk per node."""
    total, up = value.astype(np.int64).copy(), parent.astype(np.int64).copy()
    while (up >= 0).any():
        on = up >= 0
        at = np.maximum(up, 0)
        total, up = total + np.where(on, total[at], 0), np.where(on, up[at], -1)
    return total


@dataclass
class Model:
    """A graph ready to replay: edges ``src, dst`` with ``delay`` (ns), ``slack`` (binding edges), ``event``
    (whose own time; -1: a wait no change scales), ``launch`` (a launch delay), ``what`` (``WAIT``, a
    recorded duration ``OWN`` or a CPU thread's time between its top-level ops ``CPU_GAP``); window
    ``start, end``."""

    node_ts: np.ndarray
    node_order: np.ndarray
    node_lane: np.ndarray | None
    src: np.ndarray
    dst: np.ndarray
    delay: np.ndarray
    slack: np.ndarray
    bind: np.ndarray
    event: np.ndarray
    launch: np.ndarray
    what: np.ndarray
    start: int
    end: int
    events: int = 0  # how many events ``event`` numbers (the length of a ``factor``)
    tail_nodes: np.ndarray | None = None  # (``join``) see ``tails``
    tail_ns: np.ndarray | None = None
    every_node: bool = True  # the window ends after every node (False: after ``tails`` only)

    def replay(self, factor: np.ndarray | None = None, no_launch_delay: bool = False) -> int:
        """The replayed window length (ns): ``factor`` per event scales its own time."""
        return self.finish(self.times(factor, no_launch_delay)) - self.start

    def times(self, factor: np.ndarray | None = None, no_launch_delay: bool = False) -> np.ndarray:
        """Each node's replayed time (``replay``)."""
        d = self.delay
        if factor is not None:
            scaled = self.event >= 0
            d = d.copy()
            x = np.round(d[scaled] * factor[self.event[scaled]])
            if len(x) and not x.max() < 2**62:
                raise SumTooLarge("--scale: the scaled times pass what int64 ns hold")
            d[scaled] = x.astype(np.int64)
        if no_launch_delay:
            d = np.where(self.launch, 0, d)
        elif factor is None and self.measured():
            return self.node_ts.astype(np.int64)
        return schedule(self.node_ts, self.node_order, self.src, self.dst, d + self.slack,
                        self.node_lane)

    def measured(self) -> bool:
        """Whether the unchanged replay is the measured times, known without scheduling: it is when no
        edge's source time plus delay and slack passes its destination's and every node with a way in
        has one meeting it (then each node's latest way in is its measured time, in any order)."""
        ts, dst = self.node_ts, self.dst
        at = ts[self.src] + self.delay + self.slack
        if not (at <= ts[dst]).all():
            return False
        n = len(ts)
        return bool(np.array_equal(np.bincount(dst[at == ts[dst]], minlength=n) > 0,
                                   np.bincount(dst, minlength=n) > 0))

    def dependency_times(self, start: np.ndarray | int, cpu: np.ndarray | None = None) -> np.ndarray:
        """Each node's time in the dependency-only replay: recorded durations and dependencies alone (no
        waits, gaps, slack or start times: a node without a way in at ``start``, its window's); ``cpu``
        (which nodes are CPU events'): each CPU thread's untraced time, before and between its top-level
        ops, kept as its work."""
        keep = (self.what == OWN) | ((self.what == CPU_GAP) & (cpu is not None))
        roots = np.broadcast_to(np.asarray(start, np.int64), self.node_ts.shape)
        return schedule(self.node_ts, self.node_order, self.src, self.dst, np.where(keep, self.delay, 0),
                        self.node_lane, roots if cpu is None else np.where(cpu, self.node_ts, roots))

    def finish(self, t: np.ndarray) -> int:
        """The window's replayed end: as far after each last node (``tails``) as measured, and never before
        any node unless ``every_node`` is False (work a change left feeding nothing does not hold the end)."""
        if not len(t):
            return self.end
        nodes, after = self.tails()
        return max(int((t[nodes] + after).max()), int(t.max()) if self.every_node else 0)

    def shifted(self, ns: int) -> Model:
        """The model ``ns`` later, with delays of its own (a job's join caps some)."""
        return dataclasses.replace(self, node_ts=self.node_ts + ns, start=self.start + ns,
                                   end=self.end + ns, delay=self.delay.copy())

    def compact(self) -> Model:
        """The model with its node, edge and event numbers as int32 and ``what`` as int8 (times stay int64):
        a job keeps every rank's step models until a step of every rank is joined (``join``: int64 again)."""
        small = {f: getattr(self, f).astype(np.int32) for f in ("node_order", "src", "dst", "bind", "event")}
        lane = None if self.node_lane is None else self.node_lane.astype(np.int32)
        return dataclasses.replace(self, node_lane=lane, what=self.what.astype(np.int8), **small)

    def tails(self) -> tuple[np.ndarray, np.ndarray]:
        """(the last nodes: of the window, or of each model ``join`` joined; the measured time
        from each to its window's end)."""
        if self.tail_nodes is not None:
            return self.tail_nodes, self.tail_ns
        last = int(np.argmax(self.node_ts))
        return np.array([last]), np.array([self.end - int(self.node_ts[last])])

    def unexplained(self) -> int:
        """Slack (ns) on the baseline's way into the end (back from the last node along binding edges), plus
        the first node's distance from the window's start and the window's tail after the last node."""
        if not len(self.node_ts):
            return self.end - self.start
        nodes, after = self.tails()
        return int(after[0] + self.waits_back(self.start)[nodes[0]])

    def waits_back(self, start: np.ndarray | int) -> np.ndarray:
        """Per node, the slack back along binding edges plus the first node's distance from ``start``."""
        b = np.maximum(self.bind, 0)
        on = self.bind >= 0
        return chain_sums(np.where(on, self.src[b], -1), np.where(on, self.slack[b], self.node_ts - start))


def model(graph: cp.Graph, window: cp.Window) -> Model:
    """The replay model of one critical-path graph: its edges with delays (own times, measured waits, syncs'
    waits after the GPU), plus stream-order and launch edges so no op overtakes its stream or its launch."""
    ts = graph.node_ts
    src, dst, kind = graph.src, graph.dst, graph.kind
    delta = ts[dst] - ts[src]
    delay = delta.copy()  # measured waits by default
    event = np.where(kind == cp.SPAN, graph.event, -1)
    delay[kind == cp.GPU_SYNC] = 0
    sync = kind == cp.SYNC
    delay[sync] = graph.weight[sync]  # the call's wait after the op it waited on ended
    own = np.full(len(ts), -1, np.int64)  # a blocking call's end: its wait after the GPU
    own[dst[sync]] = graph.weight[sync]
    into_call = (kind == cp.SPAN) & (own[dst] >= 0)
    delay[into_call] = np.minimum(delta[into_call], own[dst[into_call]])
    launch = kind == cp.LAUNCH
    typical = int(np.median(delta[launch])) if launch.any() else 0
    what = np.select([(kind == cp.SPAN) | sync, kind == cp.DEPENDENCY], [OWN, CPU_GAP], WAIT)
    x_src, x_dst, x_launch = _order_edges(graph, kind)
    x_delta = ts[x_dst] - ts[x_src]
    ok = x_delta >= 0  # (an op overlapping the one before it on its stream: clock skew)
    x_src, x_dst, x_launch, x_delta = x_src[ok], x_dst[ok], x_launch[ok], x_delta[ok]
    src, dst = np.r_[src, x_src], np.r_[dst, x_dst]
    delay = np.r_[delay, np.where(x_launch, np.minimum(x_delta, typical), 0)]
    event = np.r_[event, np.full(len(x_src), -1, np.int64)]
    launch = np.r_[launch, x_launch]
    what = np.r_[what, np.full(len(x_src), WAIT)]
    bind, slack = binding(ts, src, dst, delay)
    return Model(ts, graph.node_order, graph.node_lane, src, dst, delay, slack, bind, event,
                 launch, what, window.start, window.end, len(graph.ev["gpu"]))


def join(models: list[Model], src: np.ndarray, dst: np.ndarray, delay: np.ndarray,
         event: np.ndarray | None = None) -> Model:
    """One model of several in one clock joined by edges ``src -> dst`` (joined node ids, model after model)
    of ``delay``; delays capped at measured time and slack found anew: the unchanged replay stays measured.
    ``models`` is emptied once joined: a job step's arrays are held once while its slack is found."""
    node_at = np.cumsum([0] + [len(m.node_ts) for m in models])
    event_at = np.cumsum([0] + [m.events for m in models])
    ts = np.concatenate([m.node_ts for m in models])
    order = np.concatenate([m.node_order + 4 * node_at[i] for i, m in enumerate(models)])
    lanes = None if any(m.node_lane is None for m in models) else np.concatenate(
        [m.node_lane for m in models])
    keep = ts[dst] >= ts[src]
    src, dst = src[keep], dst[keep]
    joined_event = (np.full(len(src), -1, np.int64) if event is None
                    else np.asarray(event, np.int64)[keep])
    delay = np.minimum(delay[keep], ts[dst] - ts[src])
    all_src = np.concatenate([m.src + node_at[i] for i, m in enumerate(models)] + [src])
    all_dst = np.concatenate([m.dst + node_at[i] for i, m in enumerate(models)] + [dst])
    all_delay = np.concatenate([m.delay for m in models] + [delay])
    event = np.concatenate([np.where(m.event >= 0, m.event + event_at[i], -1)
                            for i, m in enumerate(models)] + [joined_event])
    launch = np.concatenate([m.launch for m in models] + [np.zeros(len(src), bool)])
    what = np.concatenate([m.what for m in models] + [np.full(len(src), OWN)])  # (a transfer's time)
    edge_at = np.cumsum([0] + [len(m.src) for m in models])
    known_bind = np.concatenate([np.where(m.bind >= 0, m.bind + edge_at[i], -1) for i, m in enumerate(models)]
                                + [np.empty(0, np.int64)])
    known_slack = np.concatenate([m.slack for m in models] + [np.zeros(len(src), np.int64)])
    tails = [(m.tails()[0] + node_at[i], m.tails()[1]) for i, m in enumerate(models)
             if len(m.node_ts)]
    start, end = min(m.start for m in models), max(m.end for m in models)
    models.clear()
    bind, slack = rebound(ts, all_src, all_dst, all_delay, (known_bind, known_slack))
    del known_bind, known_slack
    none = np.empty(0, np.int64)  # (a step no rank has an event in: no last node)
    return Model(ts, order, lanes, all_src, all_dst, all_delay, slack, bind, event, launch, what,
                 start, end, int(event_at[-1]), np.concatenate([none] + [t[0] for t in tails]),
                 np.concatenate([none] + [t[1] for t in tails]))


def _order_edges(graph: cp.Graph, kind: np.ndarray):
    """Edges a replay must keep that the graph leaves out: op -> next op on its stream (no kernel gap there)
    and launch -> op (no launch delay there); (src, dst, is a launch)."""
    g, ts = graph.ev, graph.node_ts
    gpu = np.flatnonzero(g["gpu"])
    stream = np.where(g["stream"] >= 0, g["stream"], g["tid"])[gpu]
    device = np.where(g["device"] >= 0, g["device"], g["pid"])[gpu]
    o = np.lexsort((gpu, ts[2 * gpu], stream, device))
    gpu, stream, device = gpu[o], stream[o], device[o]
    same = (stream[1:] == stream[:-1]) & (device[1:] == device[:-1])
    a, b = gpu[:-1][same], gpu[1:][same]
    into = {k: np.bincount(graph.dst[kind == k], minlength=len(ts)) > 0 for k in (cp.KERNEL_GAP, cp.LAUNCH)}
    keep = ~into[cp.KERNEL_GAP][2 * b]
    s_src, s_dst = 2 * a[keep] + 1, 2 * b[keep]
    lch = g["launch"][gpu]
    need = (lch >= 0) & ~into[cp.LAUNCH][2 * gpu]
    l_src, l_dst = 2 * lch[need], 2 * gpu[need]
    return (np.r_[s_src, l_src], np.r_[s_dst, l_dst],
            np.r_[np.zeros(len(s_src), bool), np.ones(len(l_src), bool)])


# ----- changes ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scale:
    """``--scale SELECTOR=FACTOR``: a type (``TYPES``) or a name glob, and its factor."""

    selector: str
    factor: float

    @property
    def label(self) -> str:
        return f"{self.selector}={self.factor:g}"


def parse_scale(text: str) -> Scale:
    """``SELECTOR=FACTOR`` (the last ``=`` splits: a glob may hold one)."""
    sel, eq, fac = text.rpartition("=")
    try:
        factor = float(fac)
    except ValueError:
        factor = -1.0
    if not eq or not sel or not 0 <= factor <= MAX_FACTOR:
        raise TraceaugError(f"--scale {text!r}: expected SELECTOR=FACTOR with a factor from 0 to "
                            f"{MAX_FACTOR:g}")
    return Scale(sel, factor)


def selected(g: dict, names: np.ndarray, selector: str) -> np.ndarray:
    """Which graph events a selector picks: ``comp`` / ``comm`` / ``mem`` (HTA's kernel types: copies and sets
    memory, NCCL / RCCL kernels comm), ``cpu`` (every CPU event), else names matching the glob."""
    gpu = g["gpu"].astype(bool)
    if selector in ("comp", "comm", "mem", "cpu"):
        if selector == "cpu":
            return ~gpu
        mem = gpu & (g["memory"] == 1)
        comm = gpu & ~mem & is_comm(names)
        return {"mem": mem, "comm": comm, "comp": gpu & ~mem & ~comm}[selector]
    return matches(names, lambda n: fnmatch.fnmatchcase(n, selector))


def event_names(trace, graph: cp.Graph) -> np.ndarray:
    """Every graph event's name (GPU ops' read here: the graph has only the CPU events')."""
    out = graph.ev["name"].copy()
    unread = np.flatnonzero(out == None)  # noqa: E711
    out[unread] = cp.names(trace, graph.ev["id"][unread])
    return out


@dataclass
class StepReplay:
    """One window's replay: measured, baseline, dependency-only and per change the predicted length (ns)."""

    step: int | None
    measured_ns: int
    baseline_ns: int
    unexplained_ns: int
    predicted_ns: dict  # change label -> ns
    dependency_ns: int = 0  # the dependency-only replay
    with_cpu_gaps_ns: int = 0  # the same with each CPU thread's untraced time as its work


@dataclass
class Windows:
    """The windows of a model of many (``stacked``): each node's window, per window its start, end and last
    node (-1: none)."""

    node_win: np.ndarray
    start: np.ndarray
    end: np.ndarray
    last: np.ndarray

    @classmethod
    def of(cls, node_ts: np.ndarray, node_win: np.ndarray, start: np.ndarray, end: np.ndarray) -> Windows:
        """The windows of nodes at ``node_ts`` in windows ``node_win`` (each from ``start`` to ``end``)."""
        o = np.lexsort((np.arange(len(node_ts)), -node_ts, node_win))  # per window: its latest node first
        first = o[np.r_[True, node_win[o][1:] != node_win[o][:-1]]] if len(o) else o
        last = np.full(len(start), -1, np.int64)
        last[node_win[first]] = first
        return cls(node_win, start, end, last)

    def after(self, node_ts: np.ndarray) -> np.ndarray:
        """The measured time from each window's last node to its end (without one: the window)."""
        return self.end - (node_ts[np.maximum(self.last, 0)] if len(node_ts) else self.start)

    def lengths(self, t: np.ndarray, node_ts: np.ndarray, tail: bool = True) -> np.ndarray:
        """Each window's replayed length from node times ``t``: to its latest node, and (``tail``) no sooner
        than its last node plus the measured time after it; a window without nodes as measured."""
        if not len(t):
            return self.end - self.start
        top = np.full(len(self.start), dag.NEVER, np.int64)
        np.maximum.at(top, self.node_win, t)
        at = np.maximum(self.last, 0)
        fin = np.maximum(top, t[at] + self.after(node_ts)) if tail else top
        return np.where(self.last >= 0, fin, self.end) - self.start


def glob_checked(scales: list[Scale], names: np.ndarray, picks: list[np.ndarray]) -> None:
    """A name glob that picks no event is an error naming the closest names (a typo predicted no change)."""
    for s, p in zip(scales, picks):
        if s.selector not in TYPES and not p.any():
            known = sorted({n for n in names.tolist() if isinstance(n, str)})
            part = s.selector.strip("*?").lower()
            close = [n for n in known if part and part in n.lower()][:5] or difflib.get_close_matches(
                s.selector, known, 5, 0.4)
            close = [n if len(n) <= 60 else n[:59] + "…" for n in close]
            raise TraceaugError(f"--scale {s.label}: no event is named {s.selector!r}"
                                + (f" (close: {', '.join(close)})" if close else ""))


def predict(changes: list[tuple[str, Model, np.ndarray | None, bool]], events: int, all_model: Model,
            no_launch_delay: bool, how=Model.replay) -> dict:
    """Each change's replayed length (ns; ``how``: ``Model.times``, its node times) by its label (a change:
    label, model, factor per event or None, no launch delay) and, with several, all of them at once on
    ``all_model`` (the factors multiplied)."""
    if len(changes) > 1:
        f = np.ones(events)
        for _, _, fi, _ in changes:
            if fi is not None:
                f *= fi
        changes = [*changes, ("all", all_model, f, no_launch_delay)]
    return {label: how(m, f, nl) for label, m, f, nl in changes}


def whatif(trace, step: int | None = None, scales: list[Scale] | tuple = (),
           no_launch_delay: bool = False, factors: dict | None = None) -> list[StepReplay]:
    """Replays of every ProfilerStep of ``trace`` (or ``step``; the whole trace without steps), all
    windows in one graph and one schedule per change (``stacked``): linear in the steps. ``factors``: more
    changes, label -> a function of the graph's events giving each event's factor (``whatif --roofline``,
    ``efficiency --replay``)."""
    windows = cp.step_windows(trace) if step is None else {}
    if not windows:  # the step asked for, or the whole trace
        windows = {step: cp.window(trace, step)}
    graph, win = stacked.graph(cp.events(trace), list(windows.values()))
    start = np.array([w.start for w in windows.values()], np.int64)
    end = np.array([w.end for w in windows.values()], np.int64)
    m = model(graph, cp.Window(int(start.min()), int(end.max()), "every step"))
    w = Windows.of(m.node_ts, np.repeat(win, 2), start, end)
    scales = list(scales)
    names = event_names(trace, graph) if any(s.selector != "cpu" for s in scales) else graph.ev["name"]
    picks = [selected(graph.ev, names, s.selector) for s in scales]
    glob_checked(scales, names, picks)
    changes = [(s.label, m, np.where(p, s.factor, 1.0), False) for s, p in zip(scales, picks)]
    changes += [(label, m, fn(graph.ev), False) for label, fn in (factors or {}).items()]
    if no_launch_delay:
        changes.append((NO_LAUNCH_DELAY, m, None, True))
    predicted = {label: w.lengths(t, m.node_ts) for label, t in predict(changes, m.events, m, no_launch_delay,
                                                                       Model.times).items()}
    base = w.lengths(m.times(), m.node_ts)
    cpu = np.repeat(~graph.ev["gpu"].astype(bool), 2)
    dep, gaps = (w.lengths(m.dependency_times(start[w.node_win], c), m.node_ts, tail=False)
                 for c in (None, cpu))
    back = m.waits_back(start[w.node_win]) if len(m.node_ts) else np.zeros(1, np.int64)
    unexplained = np.where(w.last >= 0, back[np.maximum(w.last, 0)] + w.after(m.node_ts), end - start)
    return [StepReplay(k, int(end[i] - start[i]), int(base[i]), int(unexplained[i]),
                       {label: int(v[i]) for label, v in predicted.items()}, int(dep[i]), int(gaps[i]))
            for i, k in enumerate(windows)]


def tables(results: list[StepReplay]) -> tuple[dict, dict]:
    """(per step: ``step, measured_ns, baseline_ns, baseline_error_pct, unexplained_pct, dependency_ns,
    dependency_error_pct`` (the dependency-only replay against the measured step), ``with_cpu_gaps_ns,
    with_cpu_gaps_error_pct`` (the same with CPU threads' untraced time as work); per step and change:
    ``step, change, predicted_ns, speedup`` (baseline / predicted), ``saving_pct`` (of baseline))."""
    steps = {"step": [r.step for r in results], "measured_ns": [r.measured_ns for r in results],
             "baseline_ns": [r.baseline_ns for r in results],
             "baseline_error_pct": [_pct(r.baseline_ns - r.measured_ns, r.measured_ns) for r in results],
             "unexplained_pct": [_pct(r.unexplained_ns, r.measured_ns) for r in results],
             "dependency_ns": [r.dependency_ns for r in results],
             "dependency_error_pct": [_pct(r.dependency_ns - r.measured_ns, r.measured_ns) for r in results],
             "with_cpu_gaps_ns": [r.with_cpu_gaps_ns for r in results],
             "with_cpu_gaps_error_pct": [_pct(r.with_cpu_gaps_ns - r.measured_ns, r.measured_ns)
                                         for r in results]}
    rows = [(r, label, ns) for r in results for label, ns in r.predicted_ns.items()]
    changes = {"step": [r.step for r, _, _ in rows], "change": [label for _, label, _ in rows],
               "predicted_ns": [ns for _, _, ns in rows],
               "speedup": [r.baseline_ns / ns if ns > 0 else float("inf") for r, _, ns in rows],
               "saving_pct": [_pct(r.baseline_ns - ns, r.baseline_ns) for r, _, ns in rows]}
    return tuple({k: np.array(v, dtype=object if k in ("step", "change") else None) for k, v in t.items()}
                 for t in (steps, changes))


def error_summary(steps: dict) -> dict:
    """Each replay's error over the steps, |replayed - measured| / measured: ``replay`` (``REPLAYS``),
    ``steps``, ``mean_abs_error_pct``, ``p90_abs_error_pct``, ``max_abs_error_pct``."""
    rows = {"replay": list(REPLAYS), "steps": [], "mean_abs_error_pct": [],
            "p90_abs_error_pct": [], "max_abs_error_pct": []}
    for col in REPLAYS.values():
        e = np.abs(np.asarray(steps[col], np.float64))
        rows["steps"].append(len(e))
        for key, f in (("mean", np.mean), ("p90", lambda x: percentiles(x, [90])[0]), ("max", np.max)):
            rows[f"{key}_abs_error_pct"].append(float(f(e)) if len(e) else 0.0)
    return {k: np.array(v, dtype=object if k == "replay" else None) for k, v in rows.items()}


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0
