"""Run ``traceaug diff`` over two files or two rank directories, and format the result."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pandas as pd

from ..analysis.diff import Side, diff
from ..errors import TraceaugError
from ..output import render_frame
from ..read.inputs import TraceFile, resolve
from ..trace import Trace

if TYPE_CHECKING:
    from ..read.prefetch import Prefetched

HEADLINE = (("step_ms", "step time"), ("gpu_busy_ms", "GPU busy"), ("gpu_idle_ms", "GPU idle"),
            ("computation_ms", "computation"), ("communication_ms", "communication"),
            ("memory_ms", "memory"))


@dataclass
class RankDiff:
    """The comparison of one rank."""

    rank: int | None
    a: Path
    b: Path
    result: dict


@dataclass
class DiffResult:
    ranks: list[RankDiff]
    unmatched: dict[str, list] = field(default_factory=dict)
    sides: list[tuple[Side, Side]] = field(default_factory=list)


def pair_ranks(a: Path, b: Path, rank: int | None) -> tuple[list[tuple[TraceFile, TraceFile]], dict]:
    """Match A's and B's files by rank; two single files always pair."""
    fa, fb = resolve(a), resolve(b)
    if len(fa) == 1 and len(fb) == 1:  # one trace each: compare them whatever their ranks
        pairs = [(fa[0], fb[0])]
        unmatched: dict = {}
    else:
        ra, rb = {f.rank: f for f in fa}, {f.rank: f for f in fb}
        common = sorted(set(ra) & set(rb), key=lambda r: (r is None, r))
        unmatched = {"a": sorted(set(ra) - set(rb), key=str), "b": sorted(set(rb) - set(ra), key=str)}
        if not common:
            raise TraceaugError(f"{a} and {b}: no common ranks (A has {sorted(ra, key=str)}, "
                                f"B has {sorted(rb, key=str)})")
        pairs = [(ra[r], rb[r]) for r in common]
    if rank is not None:
        pairs = [p for p in pairs if rank in (p[0].rank, p[1].rank)]
        if not pairs:
            raise TraceaugError(f"{a} and {b}: no rank {rank} on both sides")
    return pairs, unmatched


def run(a: Path, b: Path, by: str, device: str, step: int | None, threshold: float,
        rank: int | None = None, tp_bin: str | None = None,
        prefetched: Prefetched | None = None) -> DiffResult:
    """Load every paired file (two at a time) and compare each rank."""
    pairs, unmatched = pair_ranks(Path(a), Path(b), rank)
    files = [f.path for pair in pairs for f in pair]
    quiet = len(files) > 2

    def load(path: Path) -> Side:  # two loads at once: one pass-1 worker process each
        return Side.of(Trace(path, tp_bin=tp_bin, progress=False if quiet else None, workers=1,
                             prefetched=prefetched))

    with ThreadPoolExecutor(max_workers=2) as pool:
        sides = list(pool.map(load, files))
    out = DiffResult(ranks=[], unmatched=unmatched)
    for i, (fa, fb) in enumerate(pairs):
        sa, sb = sides[2 * i], sides[2 * i + 1]
        r = sa.trace.rank if sa.trace.rank is not None else fa.rank
        out.ranks.append(RankDiff(r, fa.path, fb.path, diff(sa, sb, by, device, step, threshold)))
        out.sides.append((sa, sb))
    return out


def close(result: DiffResult) -> None:
    for sa, sb in result.sides:
        sa.trace.close()
        sb.trace.close()


def _headline_frame(res: dict) -> pd.DataFrame:
    rows = []
    for key, label in HEADLINE:
        va, vb = res["a"][key], res["b"][key]
        rows.append({"per step (ms)": label, "A": round(va, 3), "B": round(vb, 3),
                     "Δ": round(vb - va, 3), "Δ %": round(100 * (vb - va) / va, 1) if va else None})
    return pd.DataFrame(rows)


def _ms(ops: pd.DataFrame) -> pd.DataFrame:
    out = ops.copy()
    for col in ("total_a", "total_b", "delta", "mean_a", "mean_b"):
        out[col] = out[col] / 1e6
    out = out.rename(columns={"total_a": "total_a_ms", "total_b": "total_b_ms", "delta": "delta_ms",
                              "mean_a": "mean_a_ms", "mean_b": "mean_b_ms"})
    return out


def _clip(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def render(result: DiffResult, fmt: str, top: int = 10) -> str:
    """Headline first, then the top regressions and improvements (table); everything (csv/json)."""
    if fmt == "csv":
        frames = [_ms(r.result["ops"]).assign(rank=r.rank) for r in result.ranks]
        df = pd.concat(frames, ignore_index=True)
        return df[["rank", *df.columns[:-1]]].to_csv(index=False)
    if fmt == "json":
        data = {"ranks": [{"rank": r.rank, "a": str(r.a), "b": str(r.b),
                           "summary": {"a": r.result["a"], "b": r.result["b"]},
                           "ops": orjson.loads(_ms(r.result["ops"]).to_json(orient="records"))}
                          for r in result.ranks],
                "unmatched_ranks": result.unmatched}
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    parts = []
    for side, ranks in result.unmatched.items():
        if ranks:
            parts.append(f"only in {side.upper()}: rank(s) {', '.join(map(str, ranks))}\n")
    for r in result.ranks:
        ops = _ms(r.result["ops"])
        steps = f"{r.result['a']['steps']} vs {r.result['b']['steps']} ProfilerSteps"
        parts.append(f"rank {r.rank}: A = {r.a}\n{' ' * len(f'rank {r.rank}: ')}B = {r.b}  ({steps})\n")
        parts.append(render_frame(_headline_frame(r.result), "table"))
        cols = ["device", "key", "status", "count_a", "count_b", "total_a_ms", "total_b_ms", "delta_ms",
                "delta_pct"]
        ops["key"] = ops["key"].map(_clip)
        worse = ops[ops["delta_ms"] > 0].head(top)[cols]
        better = ops[ops["delta_ms"] < 0].head(top)[cols]
        counts = ops["status"].value_counts().to_dict()
        parts.append("status: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + "\n")
        parts.append(f"\nTop regressions (per step)\n{render_frame(worse.round(4), 'table')}")
        parts.append(f"\nTop improvements (per step)\n{render_frame(better.round(4), 'table')}")
    return "\n".join(parts)
