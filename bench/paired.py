"""Paired bench: the same traceaug commands on two revisions of the code, old and new interleaved.

Why: a restructuring must show its figures are no worse and its outputs unchanged. Measured
(the issue's wording): start-up on a ~1 MB trace (``info`` on DLRM rank 0, 0.9 MB raw),
``counters`` on the 25.8 MB A100 trace, ``report`` on a 64-rank job (``bench/job_scale.py``'s)
and ``collectives`` on 64 DLRM ranks (``bench/collectives_vs_hta.py``'s job); also (the job verdict's
cost) ``stragglers`` on those 64 DLRM ranks and ``report`` on 16 A100 ranks; the jobs cached
in ``--out-dir``. Each side runs ``python -m traceaug`` in a fresh process with its checkout
first on PYTHONPATH (a git revision is checked out with ``git worktree add --detach`` into a
temporary directory; ``WORKTREE`` is /work/main as it is, uncommitted changes included). One
untimed warm-up per side, then old, new, old, new, ...: wall time (median, min) and the peak
RSS of the whole process tree (``tree_rss`` sampled every 5 ms, not 20: start-up forks a pass-1
child for ~75 ms and 20 ms sampling missed it in half the runs), stdout (and the counters
output, gunzipped) compared byte for byte. "WORSE": the new median > 5% slower or the new peak
> 5% larger. Exit 0 always once the table is made (a bench, not a gate: a command failing on
a side is a FAILED row); 1 only when there is no table (a bad revision, the import check).
Run: ``python bench/paired.py --old REV --new REV [--repeat N] [--only KEY] [--json]``
(REV: a commit, a branch, ``HEAD`` or ``WORKTREE``; KEY: startup, counters, report64,
collectives64, stragglers64, report16; by default the first four).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collectives_vs_hta import generate as generate_dlrm_job  # noqa: E402
from job_scale import TRACE as A100_TRACE  # noqa: E402
from job_scale import generate as generate_a100_job  # noqa: E402
from load_throughput import REPO_ROOT, SHARED, first_run, run_sampled  # noqa: E402

WORKTREE = "WORKTREE"
DLRM = SHARED / "traces" / "kineto" / "jobs" / "dlrm_v100_8ranks"
RANKS = 64
WORSE_RATIO = 1.05
SAMPLE_S = 0.005
CHECK = "import traceaug; print(traceaug.__file__)"
KEYS = ("startup", "counters", "report64", "collectives64", "stragglers64", "report16")
DEFAULT_KEYS = KEYS[:4]


@dataclass(frozen=True)
class Measurement:
    """One command: its arguments after ``python -m traceaug`` (``{out}``: the file it writes)."""

    key: str
    label: str
    args: tuple[str, ...]
    repeat: int
    output: str | None = None  # name of the gzipped file it writes, compared after gunzip


@dataclass
class Side:
    """One revision under test: where its checkout is and what it is."""

    name: str
    rev: str
    root: Path
    commit: str
    describe: str
    added: bool = False  # a worktree this script added (removed at the end)
    traceaug_file: str = ""


@dataclass
class Run:
    """One timed process: wall time, the tree's sampled peak RSS (kB), a digest of its output."""

    wall_s: float
    peak_kb: int
    digest: str
    stdout: bytes = field(repr=False)


class RunFailed(Exception):
    """A run that exited non-zero, wrote nothing or overran ``--timeout``."""


# ----- the two sides ----------------------------------------------------------------------------
def git(*args: str) -> str:
    """``git -C REPO_ROOT ARGS``' stdout; exits with git's message on failure."""
    p = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: git {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout.strip()


def tree_fingerprint(root: Path) -> str:
    """A hash of every file of the package under ``root`` (to notice edits during the run)."""
    h = hashlib.sha256()
    for f in sorted((root / "traceaug").rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def prepare_side(name: str, rev: str, tmp: Path, sides: list[Side]) -> Side:
    """``rev`` ready to run: WORKTREE is REPO_ROOT itself, a revision a detached worktree in
    ``tmp`` (appended to ``sides`` as soon as it exists, so that it is removed)."""
    head = git("log", "-1", "--format=%h %s")
    if rev == WORKTREE:
        changed = git("--no-optional-locks", "status", "--porcelain", "--", "traceaug").splitlines()
        side = Side(name, rev, REPO_ROOT, git("rev-parse", "HEAD"),
                    f"HEAD {head[:60].rstrip()} + {len(changed)} changed file(s) in traceaug/")
        sides.append(side)
        return side
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "--quiet",
                             f"{rev}^{{commit}}"], capture_output=True, text=True).stdout.strip()
    if not commit:
        sys.exit(f"error: --{name} {rev}: not a commit of {REPO_ROOT} (nor {WORKTREE})")
    path = tmp / name
    side = Side(name, rev, path, commit, git("log", "-1", "--format=%h %s", commit)[:70], added=True)
    p = subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "--quiet",
                        str(path), commit], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: git worktree add {path} {commit}: {p.stderr.strip()}")
    sides.append(side)
    return side


def remove_sides(sides: list[Side]) -> None:
    """Remove the worktrees this script added."""
    for side in sides:
        if side.added and side.root.exists():
            p = subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force",
                                str(side.root)], capture_output=True, text=True)
            if p.returncode != 0:
                print(f"warning: could not remove the worktree {side.root}: {p.stderr.strip()} "
                      f"(git -C {REPO_ROOT} worktree remove --force {side.root})", file=sys.stderr)


def side_env(side: Side) -> dict[str, str]:
    """The environment of a run of ``side``: its checkout first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(side.root), env.get("PYTHONPATH")) if p)
    return env


def check_import(side: Side, cwd: Path) -> None:
    """Exit unless ``import traceaug`` in a run of ``side`` is the checkout's package (the
    editable install's finder comes after PathFinder, so PYTHONPATH should win)."""
    p = subprocess.run([sys.executable, "-c", CHECK], env=side_env(side), cwd=cwd,
                       capture_output=True, text=True)
    want = (side.root / "traceaug" / "__init__.py").resolve()
    got = p.stdout.strip()
    if p.returncode != 0 or not got or Path(got).resolve() != want:
        sys.exit(f"error: the {side.name} side ({side.rev}): `import traceaug` gives {got or p.stderr!r}, "
                 f"not {want}: PYTHONPATH does not win over the installed traceaug")
    side.traceaug_file = got


# ----- the measurements -------------------------------------------------------------------------
def plan(out_dir: Path, only: set[str] | None, repeat: int | None) -> list[Measurement]:
    """The measurements (``only`` those keys), their inputs generated or reused in ``out_dir``."""
    small = sorted(DLRM.glob("worker0_step_12.*.pt.trace.json.gz"))
    if not small or not A100_TRACE.is_file():
        sys.exit(f"error: the shared traces are missing ({DLRM}, {A100_TRACE})")
    want = only or set(DEFAULT_KEYS)
    out: list[Measurement] = []
    if "startup" in want:
        with gzip.open(small[0]) as f:
            mb = len(f.read()) / 1e6
        out.append(Measurement("startup", f"start-up: info {mb:.1f} MB", ("info", str(small[0])),
                               repeat or 5))
    if "counters" in want:
        out.append(Measurement("counters", "counters A100 25.8 MB",
                               ("counters", str(A100_TRACE), "{out}"), repeat or 5, "counters.json.gz"))
    if want - {"startup", "counters"}:
        out_dir.mkdir(parents=True, exist_ok=True)
    if "report64" in want:
        job = generate_a100_job(RANKS, out_dir)
        out.append(Measurement("report64", f"report {RANKS} A100 ranks", ("report", str(job)),
                               repeat or 3))
    for command in ("collectives", "stragglers"):
        if f"{command}64" in want:
            job = generate_dlrm_job(RANKS, out_dir, DLRM)
            out.append(Measurement(f"{command}64", f"{command} {RANKS} DLRM ranks",
                                   (command, str(job)), repeat or 3))
    if "report16" in want:
        job = generate_a100_job(16, out_dir)
        out.append(Measurement("report16", "report 16 A100 ranks", ("report", str(job)), repeat or 3))
    return out


def run_once(m: Measurement, side: Side, cwd: Path, timeout: float) -> Run:
    """One fresh ``python -m traceaug`` of ``m`` on ``side``: wall time (the parent waits, a
    thread samples the process tree's RSS), a digest of stdout and of the file written."""
    target = cwd / m.output if m.output else None
    if target:
        target.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "traceaug", *(a.replace("{out}", str(target)) for a in m.args)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, first_run(side_env(side)) as env:
        run = run_sampled(cmd, env, cwd, out, err, timeout, SAMPLE_S)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if run.late:
        raise RunFailed(f"took more than {timeout:g} s")
    if run.code != 0:
        text = stderr.decode(errors="replace").strip()
        last = text.splitlines()[-1] if text else "(no stderr)"
        raise RunFailed(f"exit {run.code}: {last}\n{text[-2000:]}")
    digest = hashlib.sha256(stdout)
    if target:
        if not target.is_file():
            raise RunFailed(f"wrote no {target.name}")
        with gzip.open(target) as f:
            digest.update(b"\0" + hashlib.sha256(f.read()).digest())
        target.unlink()
    return Run(run.wall_s, run.tree_kb, digest.hexdigest(), stdout)


def summary(runs: list[Run]) -> dict[str, Any]:
    walls = [r.wall_s for r in runs]
    peaks = [r.peak_kb / 1024 for r in runs]
    return {"median_s": statistics.median(walls), "min_s": min(walls), "peak_mb": max(peaks),
            "runs_s": walls, "peaks_mb": peaks}


def measure(m: Measurement, old: Side, new: Side, cwd: Path, timeout: float, out_dir: Path,
            progress: Any) -> dict[str, Any]:
    """An untimed warm-up per side, then ``m.repeat`` pairs old, new; the figures and whether
    every run printed (and wrote) the same bytes."""
    runs: dict[str, list[Run]] = {"old": [], "new": []}
    row: dict[str, Any] = {"key": m.key, "label": m.label, "command": ["traceaug", *m.args],
                           "repeat": m.repeat}
    digests: dict[str, set[str]] = {"old": set(), "new": set()}
    first: dict[str, bytes] = {}
    try:
        for i in range(m.repeat + 1):
            for side in (old, new):
                r = run_once(m, side, cwd, timeout)
                digests[side.name].add(r.digest)
                first.setdefault(side.name, r.stdout)
                what = "warm-up" if i == 0 else f"run {i}/{m.repeat}"
                print(f"  [{m.key}] {side.name} {what}: {r.wall_s:.3f} s, {r.peak_kb / 1024:.0f} MB",
                      file=progress, flush=True)
                if i:
                    runs[side.name].append(r)
    except RunFailed as e:
        row["error"] = f"the {side.name} side ({side.rev}) failed: {e}"
        print(f"  [{m.key}] error: {row['error']}", file=progress, flush=True)
        return row
    row["old"], row["new"] = summary(runs["old"]), summary(runs["new"])
    row["time_ratio"] = row["new"]["median_s"] / row["old"]["median_s"]
    row["min_ratio"] = row["new"]["min_s"] / row["old"]["min_s"]
    row["peak_ratio"] = row["new"]["peak_mb"] / max(row["old"]["peak_mb"], 1e-9)
    row["worse"] = [w for w, bad in (("time", row["time_ratio"] > WORSE_RATIO),
                                     ("memory", row["peak_ratio"] > WORSE_RATIO)) if bad]
    row["outputs_identical"] = len(digests["old"] | digests["new"]) == 1
    row["stdout_bytes"] = len(first["old"])
    if not row["outputs_identical"]:
        row["why_not_identical"] = ", ".join(
            [f"{s} runs differ among themselves" for s in ("old", "new") if len(digests[s]) > 1]
            or ["old and new differ"])
        keep = out_dir / "paired-diffs"
        keep.mkdir(parents=True, exist_ok=True)
        for s in ("old", "new"):
            (keep / f"{m.key}.{s}.stdout").write_bytes(first[s])
        row["first_stdouts"] = str(keep / f"{m.key}.{{old,new}}.stdout")
    return row


# ----- the report -------------------------------------------------------------------------------
def report(rows: list[dict[str, Any]], old: Side, new: Side, total_s: float) -> str:
    lines = [f"old: {old.rev} = {old.describe}  ({old.root})",
             f"new: {new.rev} = {new.describe}  ({new.root})",
             "",
             f"{'measurement':<27} {'runs':>4} {'old med s':>9} {'new med s':>9} {'ratio':>6} "
             f"{'old min s':>9} {'new min s':>9} {'old peak MB':>11} {'new peak MB':>11} {'ratio':>6}",
             "-" * 109]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['label']:<27} FAILED: {r['error'].splitlines()[0][:120]}")
            continue
        o, n = r["old"], r["new"]
        why = [f"time (min ratio {r['min_ratio']:.3f})" if w == "time" else w for w in r["worse"]]
        mark = f"  WORSE ({', '.join(why)})" if why else ""
        lines.append(f"{r['label']:<27} {r['repeat']:>4} {o['median_s']:>9.3f} {n['median_s']:>9.3f} "
                     f"{r['time_ratio']:>6.3f} {o['min_s']:>9.3f} {n['min_s']:>9.3f} "
                     f"{o['peak_mb']:>11.0f} {n['peak_mb']:>11.0f} {r['peak_ratio']:>6.3f}{mark}")
    lines.append("")
    for r in rows:
        if "error" in r:
            same = "n/a (a side failed)"
        else:
            same = "yes" if r["outputs_identical"] else (
                f"no ({r['why_not_identical']}; first stdouts in {r['first_stdouts']})")
        lines.append(f"{r['label']:<27} outputs identical: {same}")
    lines.append(f"\nratio = new / old; WORSE: ratio > {WORSE_RATIO:g}; peak = the process tree's "
                 f"largest RSS sum over the timed runs; total {total_s:.0f} s")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="a git revision, or WORKTREE")
    parser.add_argument("--new", required=True, help="a git revision, or WORKTREE")
    parser.add_argument("--repeat", type=int, help="timed pairs per measurement "
                        "(default: 5, and 3 for the 64-rank ones)")
    parser.add_argument("--only", action="append", choices=KEYS, help="just this measurement")
    parser.add_argument("--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "traceaug-jobs",
                        help="where the generated jobs are kept and reused")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat: at least 1")
    progress = sys.stderr if args.json else sys.stdout
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the worktrees are removed
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="traceaug-paired-"))
    sides: list[Side] = []
    rows: list[dict[str, Any]] = []
    try:
        print("preparing the inputs and the checkouts ...", file=progress, flush=True)
        todo = plan(args.out_dir, set(args.only) if args.only else None, args.repeat)
        old = prepare_side("old", args.old, tmp, sides)
        new = prepare_side("new", args.new, tmp, sides)
        cwd = tmp / "run"  # neutral: python -m puts the cwd before PYTHONPATH
        cwd.mkdir()
        for side in (old, new):
            check_import(side, cwd)
        live = {s.name: tree_fingerprint(s.root) for s in (old, new) if not s.added}
        for m in todo:
            print(f"{m.label}: traceaug {' '.join(m.args)}", file=progress, flush=True)
            rows.append(measure(m, old, new, cwd, args.timeout, args.out_dir, progress))
        changed = [n for n, fp in live.items() if tree_fingerprint(REPO_ROOT) != fp]
    finally:
        remove_sides(sides)
        shutil.rmtree(tmp, ignore_errors=True)
    total = time.perf_counter() - started
    if changed:
        print(f"warning: {REPO_ROOT}/traceaug changed during the run (the {' and '.join(changed)} "
              f"side WORKTREE): the figures mix two states of the code", file=sys.stderr)
    if args.json:
        info = [{"name": s.name, "rev": s.rev, "commit": s.commit, "describe": s.describe,
                 "traceaug_file": s.traceaug_file, "worktree_changed_during_run": s.name in changed}
                for s in (old, new)]
        print(json.dumps({"old": info[0], "new": info[1], "worse_ratio": WORSE_RATIO,
                          "python": sys.version.split()[0], "total_s": total, "measurements": rows},
                         indent=1))
    else:
        print(report(rows, old, new, total), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
