"""Golden outputs of every command: run each command x output format on the shared traces (one
trace, a job directory, a diff pair, an nsys export) and store what it printed and wrote, so a
restructuring can show that every output stays byte for byte the same.

Each case runs ``python -m traceaug ARGS`` (or a Python API snippet) in a fresh process, its
outputs under one fixed work directory (the same absolute paths on every run, so messages
that name them compare as they are); stdout, stderr, the exit code and every file written are
stored. ``--compare`` reports every case whose stored outputs differ.

Run: ``python bench/golden.py store DIR [--only SUBSTR] [--jobs 2]`` on one revision, the same
on another, then ``python bench/golden.py compare DIR_A DIR_B``. The code run is whatever
``python -m traceaug`` imports (put a checkout first on PYTHONPATH to run another revision).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
K = SHARED / "kineto"
WORK = Path(os.environ.get("TRACEAUG_GOLDEN_WORK", "/tmp/traceaug-golden-work"))
INPUTS = WORK / "inputs"  # small bad inputs made here (never in the source tree or shared/)

S = str(ROOT / "testdata" / "small_training.json.gz")
A100 = str(K / "a100_rank0_of16_6streams.json.gz")
NCCL = str(K / "a100_nccl_rank0_of2.json.gz")
SYNC = str(K / "a100_simple_add_cuda_sync.json.gz")
ALEX = str(K / "a100_alexnet_cuda_sync.json.gz")
MI = str(K / "mi250_rocm62.json.gz")
NS = str(K / "v100_ns_resolution.json.gz")
VLLM = str(K / "inference" / "vllm_decode_full" / "graph_execution.json.gz")
JOB = str(K / "jobs" / "dlrm_v100_8ranks")
RANKDIR = str(ROOT / "testdata" / "rank_dir")
SAMPLED = str(K / "multi_rank_sampled")
HA = str(K / "diff" / "h100_runs" / "a" / "trace.json.gz")
HB = str(K / "diff" / "h100_runs" / "b" / "trace.json.gz")
TA, TB = str(K / "diff" / "tiny_base" / "base.json.gz"), str(K / "diff" / "tiny_test" / "test.json.gz")
AV_A, AV_B = str(K / "diff" / "a100_vs_v100" / "control"), str(K / "diff" / "a100_vs_v100" / "test")
NSYS = str(SHARED / "nsys" / "a100_saxpy_mpi_rank0.sqlite")
GPA_LLAMA = str(SHARED / "nsys" / "gpa" / "llama2-70B_config.json")
GPA_GPT = str(SHARED / "nsys" / "gpa" / "gpt5b_fp8_config.json")
BAD = str(INPUTS / "bad.json")
EMPTY = str(INPUTS / "empty.json")
FORMATS = ("table", "csv", "json")
COMMANDS = ("info", "query", "counters", "diff", "open", "convert", "summary", "patterns", "kernels",
            "gaps", "breakdown", "launches", "report", "collectives", "stragglers", "merge",
            "critical-path", "whatif")


def cases() -> list[tuple[str, list[str]]]:
    """(name, argv) of every case; ``{O}`` in an argument is the case's output directory."""
    out: list[tuple[str, list[str]]] = [("version", ["--version"]), ("help", ["--help"])]
    out += [(f"help-{c}", [c, "--help"]) for c in COMMANDS]

    def each_format(name: str, argv: list[str], formats=FORMATS) -> None:
        out.extend((f"{name}-{f}", [*argv, "--format", f]) for f in formats)

    # info, query
    for label, t in (("s", S), ("a100", A100), ("mi", MI), ("job", JOB), ("rankdir", RANKDIR),
                     ("nsys", NSYS), ("sampled", SAMPLED)):
        each_format(f"info-{label}", ["info", t])
    each_format("info-job-rank3", ["info", JOB, "--rank", "3"])
    each_format("query-s", ["query", S, "SELECT name, COUNT(*) AS n, SUM(dur) AS d FROM slice "
                            "GROUP BY name ORDER BY n DESC, name LIMIT 20"])
    each_format("query-s-gpuop", ["query", S, "SELECT * FROM traceaug_gpu_op ORDER BY ts"])
    each_format("query-s-args", ["query", S, "SELECT key, COUNT(*) FROM args GROUP BY key ORDER BY 1"])
    out.append(("query-s-lean", ["query", S, "SELECT COUNT(*) FROM args", "--lean"]))
    out.append(("query-job-rank", ["query", JOB, "SELECT COUNT(*) AS n FROM slice", "--rank", "2"]))
    out.append(("query-job-norank", ["query", JOB, "SELECT 1"]))
    out.append(("query-bad-sql", ["query", S, "SELEC nonsense"]))
    out.append(("query-nsys", ["query", NSYS, "SELECT COUNT(*) AS n FROM slice"]))

    # analyses
    for label, t in (("s", S), ("a100", A100), ("job", JOB), ("mi", MI), ("rankdir", RANKDIR)):
        each_format(f"kernels-{label}", ["kernels", t])
        each_format(f"gaps-{label}", ["gaps", t])
        each_format(f"breakdown-{label}", ["breakdown", t])
        each_format(f"launches-{label}", ["launches", t])
        each_format(f"report-{label}", ["report", t])
        out.append((f"report-{label}-html", ["report", t, "--html", "{O}/r.html"]))
    for label, t in (("s", S), ("a100", A100), ("job", JOB)):
        out.append((f"kernels-{label}-opts", ["kernels", t, "--top", "5", "--sort", "count",
                                              "--type", "comp", "--wide"]))
        out.append((f"kernels-{label}-step", ["kernels", t, "--step", "551" if t == A100 else
                                              "10" if t == JOB else "1"]))
        out.append((f"gaps-{label}-opts", ["gaps", t, "--hist-min", "1", "--hist-max", "1000",
                                           "--bins", "7", "--top", "3", "--sort", "mean"]))
        out.append((f"breakdown-{label}-opts", ["breakdown", t, "--kernel-wait-us", "5"]))
        out.append((f"launches-{label}-opts", ["launches", t, "--runtime-cutoff", "10",
                                               "--delay-cutoff", "20", "--top", "4"]))
        out.append((f"report-{label}-top", ["report", t, "--top", "3"]))
    out.append(("kernels-job-rank5", ["kernels", JOB, "--rank", "5"]))
    out.append(("report-job-step", ["report", JOB, "--step", "10", "--html", "{O}/r.html"]))
    out.append(("kernels-badstep", ["kernels", S, "--step", "999"]))
    out.append(("kernels-dask", ["kernels", JOB, "--workers", "2"]))
    out.append(("report-nsys", ["report", NSYS]))
    out.append(("kernels-vllm", ["kernels", VLLM]))

    # collectives, stragglers
    for label, t in (("job", JOB), ("sampled", SAMPLED)):
        each_format(f"collectives-{label}", ["collectives", t])
        each_format(f"collectives-{label}-rank", ["collectives", t, "--by", "rank"])
        each_format(f"stragglers-{label}", ["stragglers", t])
    out.append(("collectives-job-noalign", ["collectives", JOB, "--no-align", "--rank", "2"]))
    out.append(("stragglers-job-step", ["stragglers", JOB, "--step", "10", "--rank", "7"]))
    out.append(("collectives-single", ["collectives", S]))

    # rewriters
    for label, t in (("s", S), ("a100", A100), ("mi", MI), ("ns", NS)):
        each_format(f"counters-{label}", ["counters", t, "{O}/c.json.gz"])
    out.append(("counters-s-hta", ["counters", S, "{O}/c.json", "--style", "hta", "--series", "queue"]))
    out.append(("counters-s-keep", ["counters", S, "{O}/c.json.gz", "--keep-bytes"]))
    out.append(("counters-s-summary", ["counters", S, "--summary-only"]))
    out.append(("counters-s-stdout", ["counters", S, "-"]))
    out.append(("counters-job", ["counters", JOB, "{O}/out/"]))
    out.append(("counters-rankdir-json", ["counters", RANKDIR, "{O}/out/", "--format", "json"]))
    out.append(("counters-nsys", ["counters", NSYS, "{O}/c.json"]))
    out.append(("counters-same", ["counters", S, S]))
    out.append(("counters-noout", ["counters", S]))
    for label, t in (("s", S), ("a100", A100), ("nccl", NCCL)):
        each_format(f"patterns-{label}", ["patterns", t, "{O}/p.json.gz"])
    out.append(("patterns-s-opts", ["patterns", S, "{O}/p.json", "--operator", "aten::*",
                                    "--min-len", "2", "--top-k", "2"]))
    out.append(("patterns-job", ["patterns", JOB, "{O}/out/", "--summary-only"]))
    out.append(("patterns-job-out", ["patterns", JOB, "{O}/out/", "--rank", "1"]))
    for label, t in (("s", S), ("sync", SYNC), ("alex", ALEX), ("a100", A100)):
        each_format(f"cp-{label}", ["critical-path", t, "{O}/cp.json.gz"])
    out.append(("cp-a100-step", ["critical-path", A100, "{O}/cp.json", "--step", "551", "--top", "4"]))
    out.append(("cp-sync-hta", ["critical-path", SYNC, "{O}/cp.json", "--hta-weights", "--all-edges"]))
    out.append(("cp-sync-annot", ["critical-path", SYNC, "{O}/cp.json", "--annotation", "Profiler",
                                  "--instance", "0", "--max-gap-us", "0"]))
    out.append(("cp-job", ["critical-path", JOB, "{O}/out/", "--summary-only"]))
    out.append(("cp-job-rank", ["critical-path", JOB, "{O}/cp.json.gz", "--rank", "4"]))
    for f in FORMATS:
        out.append((f"cp-jobpath-{f}", ["critical-path", JOB, "{O}/job.json.gz", "--job",
                                        "--format", f]))
    out.append(("cp-jobpath-hta", ["critical-path", JOB, "--job", "--summary-only", "--hta-weights"]))
    out.append(("cp-jobpath-step", ["critical-path", JOB, "--job", "--summary-only", "--step", "10"]))
    out.append(("cp-step-annot", ["critical-path", S, "{O}/x.json", "--step", "1", "--annotation", "x"]))
    out.append(("merge-job", ["merge", JOB, "{O}/m.json.gz"]))
    out.append(("merge-job-noalign", ["merge", JOB, "{O}/m.json", "--no-align"]))
    out.append(("merge-sampled", ["merge", SAMPLED, "{O}/m.json.gz"]))
    out.append(("merge-single", ["merge", S, "{O}/m.json.gz"]))

    # diff
    for label, a, b in (("h100", HA, HB), ("tiny", TA, TB), ("s-s", S, S)):
        each_format(f"diff-{label}", ["diff", a, b])
    out.append(("diff-h100-opts", ["diff", HA, HB, "--by", "short-name", "--device", "gpu",
                                   "--top", "3", "--threshold", "1"]))
    out.append(("diff-h100-cat", ["diff", HA, HB, "--by", "category", "--step-index", "-1"]))
    out.append(("diff-h100-html", ["diff", HA, HB, "--html", "{O}/d.html", "--trace", "{O}/d.json.gz"]))
    out.append(("diff-h100-gate", ["diff", HA, HB, "--fail-on-regression", "0.1"]))
    out.append(("diff-h100-gate-step", ["diff", HA, HB, "--fail-on-regression", "0.1", "--gate",
                                        "step", "--min-delta", "3"]))
    for f in FORMATS:
        out.append((f"diff-h100-explain-{f}", ["diff", HA, HB, "--explain", "--format", f]))
    out.append(("diff-av", ["diff", AV_A, AV_B]))
    out.append(("diff-av-explain", ["diff", AV_A, AV_B, "--explain", "--step-a", "551"]))
    each_format("diff-job", ["diff", JOB, JOB])
    out.append(("diff-job-explain", ["diff", JOB, JOB, "--explain", "--format", "csv"]))
    out.append(("diff-job-rank", ["diff", JOB, JOB, "--rank", "3", "--trace", "{O}/d.json.gz"]))
    out.append(("diff-job-rankdir", ["diff", JOB, RANKDIR]))
    out.append(("diff-gate-noflag", ["diff", HA, HB, "--gate", "step"]))
    out.append(("diff-step-ab", ["diff", S, S, "--step-a", "1", "--step-b", "2"]))

    # whatif
    for label, t in (("s", S), ("sync", SYNC), ("job", JOB)):
        each_format(f"whatif-{label}", ["whatif", t, "--scale", "comp=0.5", "--scale", "cpu=0.8",
                                        "--no-launch-delay"])
    out.append(("whatif-job-strag", ["whatif", JOB, "--no-stragglers", "--step", "10"]))
    out.append(("whatif-job-rank", ["whatif", JOB, "--rank", "2", "--scale", "nccl*=0.5"]))
    out.append(("whatif-bad-scale", ["whatif", S, "--scale", "comp"]))
    out.append(("whatif-strag-single", ["whatif", S, "--no-stragglers"]))

    # nsys: convert, summary
    out.append(("convert", ["convert", NSYS, "{O}/n.json.gz"]))
    out.append(("convert-plain", ["convert", NSYS, "{O}/n.json"]))
    for f in ("text", "json"):
        out.append((f"summary-nsys-{f}", ["summary", NSYS, "--format", f]))
        out.append((f"summary-s-{f}", ["summary", S, "--format", f, "--iter-tag", "ProfilerStep*"]))
        out.append((f"summary-llama-{f}", ["summary", "--config", GPA_LLAMA, "--format", f]))
        out.append((f"summary-gpt-{f}", ["summary", "--config", GPA_GPT, "--format", f]))
    out.append(("summary-none", ["summary"]))

    # bad inputs
    for c in ("info", "kernels", "counters", "critical-path", "report", "diff", "whatif"):
        extra = {"counters": ["{O}/o.json"], "critical-path": ["{O}/o.json"], "diff": [S]}.get(c, [])
        out.append((f"bad-{c}", [c, BAD, *extra]))
        out.append((f"missing-{c}", [c, str(INPUTS / "nope.json"), *extra]))
    out.append(("empty-info", ["info", EMPTY]))
    out.append(("open-busy-check", ["open", S, "--port", "70000"]))
    out.append(("x-cp-alex-annot", ["critical-path", ALEX, "{O}/cp.json", "--annotation", "param|cuda",
                                    "--instance", "0", "--max-gap-us", "0"]))
    out.append(("x-cp-job-rank", ["critical-path", JOB, "{O}/out/", "--rank", "4"]))
    out.append(("x-diff-av-explain", ["diff", AV_A, AV_B, "--explain"]))
    out.append(("x-diff-av-json", ["diff", AV_A, AV_B, "--format", "json", "--step-index", "0"]))
    out.append(("x-query-file", ["query", S, "-f", str(INPUTS / "q.sql")]))
    return out


# API snippets: what the Python API returns, printed (DataFrames as CSV with dtypes).
API = {
    "api-load-query": "import traceaug\nwith traceaug.load(S) as t:\n"
                      "    show(t.query('SELECT name, dur FROM slice ORDER BY ts, name LIMIT 30'))",
    "api-query": "import traceaug\nshow(traceaug.query(S, 'SELECT * FROM traceaug_gpu_op'))",
    "api-info": "import traceaug\nprint(traceaug.info(JOB))",
    "api-analyses": "import traceaug.analyses as ta\nfor f in ('kernels', 'stream_gaps', 'device_gaps', "
                    "'kernel_transitions', 'gap_histogram', 'temporal_breakdown', 'idle_breakdown', "
                    "'comm_comp_overlap', 'launches', 'launch_summary'):\n    show(getattr(ta, f)(S))\n"
                    "show(ta.kernels_across_ranks(JOB))",
    "api-analyses-job": "import traceaug, traceaug.analyses as ta\nwith traceaug.load_job(JOB) as j:\n"
                        "    show(ta.kernels(j)); show(ta.temporal_breakdown(j, rank=3))\n"
                        "    print(j.info()[0]['rank'])",
    "api-counters": "import traceaug\nr = traceaug.counters(S, O + '/c.json.gz')\n"
                    "show(r.queue); show(r.bandwidth)",
    "api-patterns": "import traceaug\nr = traceaug.patterns(S, None)\nshow(r.patterns); show(r.occurrences)",
    "api-diff": "import traceaug\ns, o = traceaug.diff(HA, HB, step_index=0)\nshow(s); show(o)",
    "api-cp": "import traceaug\np, s = traceaug.critical_path(SYNC)\nshow(p); show(s)",
    "api-cp-job": "import inspect, traceaug\n"  # (job=True before issue 33 named it whole_job)
                  "named = 'whole_job' in inspect.signature(traceaug.critical_path).parameters\n"
                  "p, s = traceaug.critical_path(JOB, **{'whole_job' if named else 'job': True})\n"
                  "show(p); show(s); show(s.attrs['ranks'])",
    "api-whatif": "import traceaug\nr = traceaug.whatif(S, scale=['comp=0.5'])\n"
                  "show(r.steps); show(r.changes)",
    "api-whatif-job": "import traceaug\nr = traceaug.whatif(JOB, no_stragglers=True)\n"
                      "show(r.steps); show(r.changes)",
    "api-collectives": "import traceaug\nshow(traceaug.collectives(JOB))\n"
                       "show(traceaug.collectives(JOB, by='rank'))",
    "api-stragglers": "import traceaug\nd = traceaug.stragglers(JOB)\nshow(d); print(d.attrs['findings'])",
    "api-load-ranks": "import traceaug\n"
                      "print(sorted(traceaug.load_ranks(JOB, then=lambda r, t: (r, t.rank)).items()))",
}

API_PRELUDE = """
import sys
S, JOB, HA, HB, SYNC, O = {S!r}, {JOB!r}, {HA!r}, {HB!r}, {SYNC!r}, {O!r}
def show(df):
    print(df.dtypes.to_string())
    print(df.to_csv(index=False))
"""


def _digest(path: Path) -> dict:
    data = path.read_bytes()
    out = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if data[:2] == b"\x1f\x8b":
        out["gunzip_sha256"] = hashlib.sha256(gzip.decompress(data)).hexdigest()
    return out


def run_case(name: str, argv: list[str] | None, store: Path, timeout: int = 900) -> str:
    """Run one case in its work directory and store what it printed and wrote."""
    work = WORK / "cases" / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "TRACEAUG_NO_PROGRESS": "1", "COLUMNS": "200"}
    if argv is None:
        code = API_PRELUDE.format(S=S, JOB=JOB, HA=HA, HB=HB, SYNC=SYNC, O=str(work)) + API[name]
        cmd = [sys.executable, "-c", code]
    else:
        cmd = [sys.executable, "-m", "traceaug", *[a.replace("{O}", str(work)) for a in argv]]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, cwd=work, env=env,
                           stdin=subprocess.DEVNULL)
        stdout, stderr, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        stdout, stderr, rc = e.stdout or b"", (e.stderr or b"") + b"\n<TIMEOUT>", -999
    files = {}
    for f in sorted(work.rglob("*")):
        if f.is_file():
            rel = str(f.relative_to(work))
            files[rel] = _digest(f)
            dest = store / "files" / name / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    record = {"argv": argv, "rc": rc, "stdout": stdout.decode("utf-8", "surrogateescape"),
              "stderr": stderr.decode("utf-8", "surrogateescape"), "files": files}
    (store / "cases").mkdir(parents=True, exist_ok=True)
    (store / "cases" / f"{name}.json").write_text(json.dumps(record, indent=1, sort_keys=True))
    shutil.rmtree(work, ignore_errors=True)
    return f"{name}: rc {rc}"


def make_inputs() -> None:
    INPUTS.mkdir(parents=True, exist_ok=True)
    (INPUTS / "bad.json").write_bytes(b'{"traceEvents": [{"ph": "X", "ts": 1, ')
    (INPUTS / "empty.json").write_bytes(b"")
    (INPUTS / "q.sql").write_text("SELECT device, stream, COUNT(*) AS n FROM traceaug_gpu_op GROUP BY 1, 2")


def store_all(store: Path, only: str | None, jobs: int) -> None:
    make_inputs()
    todo: list[tuple[str, list[str] | None]] = [(n, a) for n, a in cases()]
    todo += [(n, None) for n in API]
    if only:
        todo = [(n, a) for n, a in todo if only in n]
    store.mkdir(parents=True, exist_ok=True)
    with cf.ThreadPoolExecutor(jobs) as pool:
        for line in pool.map(lambda c: run_case(c[0], c[1], store), todo):
            print(line, flush=True)


def compare(a: Path, b: Path) -> int:
    names = sorted({p.stem for p in (a / "cases").glob("*.json")} |
                   {p.stem for p in (b / "cases").glob("*.json")})
    bad = 0
    for n in names:
        try:
            ra = json.loads((a / "cases" / f"{n}.json").read_text())
            rb = json.loads((b / "cases" / f"{n}.json").read_text())
        except OSError:
            print(f"{n}: only on one side")
            bad += 1
            continue
        diffs = [k for k in ("rc", "stdout", "stderr") if ra[k] != rb[k]]
        fa, fb = ra["files"], rb["files"]
        if set(fa) != set(fb):
            diffs.append(f"files {sorted(fa)} vs {sorted(fb)}")
        diffs += [f"file {f}" for f in sorted(set(fa) & set(fb)) if fa[f] != fb[f]]
        if diffs:
            bad += 1
            print(f"{n}: differs in {', '.join(diffs)}")
    print(f"{len(names) - bad} of {len(names)} cases identical")
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("store")
    s.add_argument("dir", type=Path)
    s.add_argument("--only")
    s.add_argument("--jobs", type=int, default=2)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    sub.add_parser("list")
    args = ap.parse_args()
    if args.what == "store":
        store_all(args.dir, args.only, args.jobs)
    elif args.what == "compare":
        sys.exit(compare(args.a, args.b))
    else:
        for n, a in cases():
            print(n, " ".join(a))
        print("\n".join(API))


if __name__ == "__main__":
    main()
