"""Kernel-pattern mining (``analysis.repeats``, ``analysis.patterns``) against a brute force
computed here, on real traces and on ``testdata/patterns_planted.json`` (planted answers)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from conftest import TESTDATA, shared_trace

import traceaug
from traceaug.analysis.patterns import compute
from traceaug.analysis.repeats import repeats

PLANTED = TESTDATA / "patterns_planted.json"


# ----- the brute force: the definition in analysis/repeats.py, spelled out ---------------
def _greedy(occ: list[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    picked: list[tuple[int, int]] = []
    for s, p in sorted(occ):
        if not picked or picked[-1][0] != s or p >= picked[-1][1] + length:
            picked.append((s, p))
    return picked


def _root(p: tuple) -> int:
    for d in range(1, len(p)):
        if len(p) % d == 0 and p[d:] == p[:-d]:
            return d
    return len(p)


def _in_squares(seqs: list[list[int]], where: list[tuple[int, int]], n: int) -> bool:
    """Does every occurrence start at one same offset 0 < j < n into a square QQ (2n symbols
    of period n)? Tried offset by offset, symbol by symbol."""
    for j in range(1, n):
        if all(p - j >= 0 and p - j + 2 * n <= len(seqs[s])
               and all(seqs[s][p - j + i] == seqs[s][p - j + n + i] for i in range(n))
               for s, p in where):
            return True
    return False


def brute_force(seqs: list[list[int]], min_len: int) -> dict[tuple, list[tuple[int, int]]]:
    """Every reported pattern -> its counted occurrences (sequence, start), by enumerating
    every substring: frequent (>= 2 non-overlapping), not absorbed by a one-symbol extension
    that every occurrence shares and that is frequent itself, not a power R^j with
    len(R^(j-1)) >= min_len, not a rotation sitting in squares of its block."""
    occ: dict[tuple, list[tuple[int, int]]] = {}
    length = min_len
    while True:
        found: dict[tuple, list[tuple[int, int]]] = {}
        for s, seq in enumerate(seqs):
            for p in range(len(seq) - length + 1):
                found.setdefault(tuple(seq[p:p + length]), []).append((s, p))
        found = {k: v for k, v in found.items() if len(v) >= 2}
        if not found:
            break
        occ.update(found)
        length += 1

    def frequent(p: tuple) -> bool:
        return p in occ and len(_greedy(occ[p], len(p))) >= 2

    out = {}
    for p, where in occ.items():
        counted = _greedy(where, len(p))
        if len(counted) < 2:
            continue
        before = {seqs[s][i - 1] if i > 0 else None for s, i in where}
        after = {seqs[s][i + len(p)] if i + len(p) < len(seqs[s]) else None for s, i in where}
        if len(before) == 1 and None not in before and frequent((*before, *p)):
            continue
        if len(after) == 1 and None not in after and frequent((*p, *after)):
            continue
        if len(p) - _root(p) >= min_len:
            continue
        if _in_squares(seqs, where, len(p)):
            continue
        out[p] = counted
    return out


def mined(seqs: list[list[int]], min_len: int) -> dict[tuple, list[tuple[int, int]]]:
    return {r.symbols: list(zip(r.seq.tolist(), r.start.tolist(), strict=True))
            for r in repeats([np.array(s) for s in seqs], min_len)}


# ----- small known cases ------------------------------------------------------------------
@pytest.mark.parametrize(("seqs", "min_len", "expected"), [
    ([[0, 1, 2] * 5], 3, {(0, 1, 2): [(0, 0), (0, 3), (0, 6), (0, 9), (0, 12)]}),
    ([[5, 0, 1, 2, 3, 4, 0, 1, 2, 7, 0, 1, 2]], 3, {(0, 1, 2): [(0, 1), (0, 6), (0, 10)]}),
    ([[1, 2, 1, 2, 1]], 3, {}),  # 121 twice, overlapping: counted once
    ([[0] * 10], 3, {(0, 0, 0): [(0, 0), (0, 3), (0, 6)]}),  # a run: its shortest power only
    ([[0, 1, 2, 3], [9, 0, 1, 2, 3, 8]], 3, {(0, 1, 2, 3): [(0, 0), (1, 1)]}),
    ([[1, 2, 1, 2, 1, 9, 1, 2, 1]], 3, {(1, 2, 1): [(0, 0), (0, 6)]}),
    # three identical "steps": the step, not its rotations (count 2 each)
    ([[7, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 8]], 3, {(0, 1, 2, 3): [(0, 1), (0, 5), (0, 9)]}),
    ([[0, 1, 2, 0, 1, 2, 0, 1, 2]], 3, {(0, 1, 2): [(0, 0), (0, 3), (0, 6)]}),
])
def test_known_answers(seqs, min_len, expected) -> None:
    assert mined(seqs, min_len) == expected
    assert brute_force(seqs, min_len) == expected


def test_random_sequences_equal_brute_force() -> None:
    rng = np.random.default_rng(16)
    for trial in range(60):
        k = int(rng.integers(2, 5))
        seqs = [rng.integers(0, k, int(rng.integers(1, 40))).tolist()
                for _ in range(int(rng.integers(1, 4)))]
        min_len = int(rng.integers(1, 5))
        assert mined(seqs, min_len) == brute_force(seqs, min_len), (trial, seqs, min_len)


def test_repeated_blocks_equal_brute_force() -> None:
    """Sequences made of a block repeated (with a mutation now and then): squares, rotations
    and powers everywhere."""
    rng = np.random.default_rng(61)
    for trial in range(40):
        block = rng.integers(0, 4, int(rng.integers(2, 7))).tolist()
        seqs = []
        for _ in range(int(rng.integers(1, 3))):
            seq = [9] * int(rng.integers(0, 2)) + block * int(rng.integers(2, 6))
            if rng.random() < 0.5:
                seq[int(rng.integers(0, len(seq)))] = 5
            seqs.append(seq)
        min_len = int(rng.integers(2, 5))
        assert mined(seqs, min_len) == brute_force(seqs, min_len), (trial, seqs, min_len)


@pytest.mark.perf
def test_mining_is_not_quadratic() -> None:
    """A 200k-kernel stream of a 37-kernel layer with noise mines in well under a second
    per 100k (a quadratic pass over it would take minutes)."""
    import time

    rng = np.random.default_rng(1)
    layer = rng.integers(0, 50, 37)
    parts = []
    for _ in range(200_000 // 40):
        parts += [layer, [1000 + len(parts)] * 3]  # unique noise between layers
    seq = np.concatenate(parts)
    t0 = time.perf_counter()
    found = repeats([seq], 3)
    assert time.perf_counter() - t0 < 15
    assert found[0].symbols == tuple(layer.tolist()) and found[0].count == 200_000 // 40


# ----- real traces ---------------------------------------------------------------------
def _stream_sequences(found) -> list[np.ndarray]:
    gpu = found.gpu
    codes = {n: i for i, n in enumerate(found.kernel_names)}
    kernel = np.array([codes[n] for n in gpu["name"].tolist()], np.int64)
    key = gpu["device"] * (1 << 32) + (gpu["stream"] & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    cut = np.flatnonzero(np.diff(key[order])) + 1
    return [kernel[o] for o in np.split(order, cut)]


def _count(seqs: list[np.ndarray], pattern: np.ndarray) -> int:
    """Non-overlapping occurrences of ``pattern``, greedily, by a plain scan."""
    total = 0
    for seq in seqs:
        i, n, m = 0, len(seq), len(pattern)
        while i + m <= n:
            if seq[i] == pattern[0] and np.array_equal(seq[i:i + m], pattern):
                total += 1
                i += m
            else:
                i += 1
    return total


@pytest.mark.parametrize("rel", ["kineto/a100_rank0_of16_6streams.json.gz",
                                 "kineto/h100_qwen05b_inference.json.gz",
                                 "kineto/v100_ns_resolution.json.gz"])
def test_real_trace_counts_equal_brute_force(rel: str) -> None:
    """Every stream pattern's count (the 40 most frequent) equals a plain scan of the whole
    streams; on a 120-kernel slice of each stream, the full set of reported patterns and
    their counted positions equal the brute force's."""
    with traceaug.load(shared_trace(rel), only="ops", progress=False) as t:
        found = compute(t, None, 3)
    seqs = _stream_sequences(found)
    p = found.patterns
    stream = np.flatnonzero(p["scope"] == "stream")
    assert len(stream) > 0
    k_of = {f"K{i + 1}": i for i in range(len(found.kernel_names))}
    for row in stream[:40].tolist():
        pattern = np.array([k_of[k] for k in p["kernel_ids"][row].split()], np.int64)
        assert int(p["count"][row]) == _count(seqs, pattern), p["kernel_ids"][row]
    for start in (0, len(max(seqs, key=len)) // 2):
        slices = [s[start:start + 120].tolist() for s in seqs if len(s) > start]
        expected = brute_force(slices, 3)
        assert mined(slices, 3) == expected
        if start == 0:
            assert expected, "the slices hold repeats"


def test_patterns_kind_reads_the_same() -> None:
    """The command's lighter "patterns" load (no stream-priority or capture queries, no copy
    sizes) finds exactly the patterns and occurrences of the "ops" load, with one slice less
    per call it leaves out (annotations are in both; counted in the raw JSON)."""
    import gzip

    from traceaug.read.kinds import NO_LAUNCH_CALLS, RUNTIME_CATEGORIES

    path = shared_trace("kineto/v100_ns_resolution.json.gz")
    events = json.loads(gzip.open(path).read())["traceEvents"]
    skipped = sum(e.get("ph") == "X" and e.get("cat") in RUNTIME_CATEGORIES
                  and e.get("name") in NO_LAUNCH_CALLS for e in events)
    assert skipped > 3000  # cudaStreamGetPriority and cudaDeviceGetStreamPriorityRange
    annotations = sum(e.get("ph") == "X" and e.get("cat") == "user_annotation" for e in events)
    assert annotations > 0  # kept by both loads (``ops`` keeps them for serving steps)
    found, slices = {}, {}
    for kind in ("ops", "patterns"):
        with traceaug.load(path, kind=kind, progress=False) as t:
            found[kind] = compute(t, None, 3)
            slices[kind] = int(t.columns("SELECT COUNT(*) AS n FROM slice")["n"][0])
    assert slices["ops"] - slices["patterns"] == skipped  # both keep the annotations (serving steps)
    for table in ("patterns", "occurrences"):
        a, b = getattr(found["ops"], table), getattr(found["patterns"], table)
        assert a.keys() == b.keys()
        for k in a:
            if k in ("instance", "first_op"):  # slice ids: fewer slices, other numbers
                assert ((a[k] >= 0) == (b[k] >= 0)).all(), (table, k)
            else:
                assert a[k].tolist() == b[k].tolist(), (table, k)
    assert len(found["ops"].patterns["pattern"]) > 100


# ----- planted patterns ----------------------------------------------------------------
def test_planted_file_is_current(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("gen_patterns", TESTDATA / "generate_patterns.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(tmp_path)
    for name in ("patterns_planted.json", "patterns_planted.answers.json"):
        assert (tmp_path / name).read_bytes() == (TESTDATA / name).read_bytes(), name


def test_planted_patterns_found_exactly() -> None:
    """Every planted pattern, in every scope, with its count and the GPU start of each
    counted occurrence; nothing else (every other kernel is unique noise)."""
    answers = json.loads((TESTDATA / "patterns_planted.answers.json").read_text())
    with traceaug.load(PLANTED, progress=False) as t:
        found = compute(t, None, 3)
        base = t.base_ns  # engine ns + base = the file's epoch ns
    p, o = found.patterns, found.occurrences
    names = found.kernel_names
    got: dict[str, dict] = {s: {} for s in answers}
    for row in range(len(p["pattern"])):
        kernels = " ".join(names[int(k[1:]) - 1] for k in p["kernel_ids"][row].split())
        scope = p["scope"][row]
        key = f"{p['operators'][row]}: {kernels}" if scope == "whole" else kernels
        ts = sorted((o["gpu_ts"][o["pattern"] == p["pattern"][row]] + base).tolist())
        got[scope][key] = {"count": int(p["count"][row]), "gpu_ts_ns": ts}
    assert got == answers
    # nested: A is found inside B's occurrences as well as alone
    assert answers["stream"]["a1 a2 a3 a4"]["count"] == 10
    assert answers["stream"]["x y x"]["count"] == 3  # one of the two overlapping in x y x y x


def test_operator_glob_and_instances() -> None:
    """--operator picks the outermost matching ops: "l*" matches only "layer" here."""
    with traceaug.load(PLANTED, progress=False) as t:
        found = compute(t, "l*", 3)
    p = found.patterns
    whole = p["scope"] == "whole"
    assert p["operators"][whole].tolist() == ["layer"] and p["count"][whole].tolist() == [5]
    # only layer instances in the operator scope: A alone 5 times is the whole pattern
    assert (p["scope"] == "operator").sum() == 0


# ----- HTA's whole-sequence answer ------------------------------------------------------
# HTA's get_frequent_cuda_kernel_sequences("aten::conv2d") on the A100 ResNet trace, run with
# HTA_DISABLE_NS_ROUNDING=1: 0.5.0 (with a pandas-3 shim) and 0.6.1 (traceinsight, as it is, checked
# 2026-11-26) give the same rows, as
# (count, first 16 hex digits of sha1 of the pattern's kernel names joined by "|"; HTA's own
# pattern text is "aten::conv2d|" followed by that).
HTA_CONV2D = [(12, "9b3457cbefa4ebfa"), (12, "b98a701140184a38"), (10, "aeb5eb1b5275f188"),
              (6, "6b029980efcd27ef"), (6, "357a724e1dd016be"), (2, "388b1152275562ab")]


def test_whole_sequences_include_hta() -> None:
    """HTA's patterns and counts on the A100 ResNet trace for aten::conv2d are ours
    restricted to instances before the last ProfilerStep: HTA drops everything from the
    start of the last step on (include_last_profiler_step=False). Over the whole trace
    (3 steps, the same layers every step) each count is 3/2 of HTA's."""
    import hashlib

    with traceaug.load(shared_trace("kineto/a100_nccl_rank0_of2.json.gz"), kind="patterns",
                       progress=False) as t:
        found = compute(t, "aten::conv2d", 3)
        steps = t.columns("SELECT ts FROM traceaug_step ORDER BY ts")["ts"]
    p, o = found.patterns, found.occurrences
    whole = np.flatnonzero(p["scope"] == "whole")
    assert p["count"][whole].tolist() == [18, 18, 15, 9, 9, 3]
    assert set(p["operators"][whole].tolist()) == {"aten::conv2d"}
    before_last = o["cpu_ts"] < steps[-1]
    ours = []
    for r in whole.tolist():
        names = "|".join(found.kernel_names[int(k[1:]) - 1] for k in p["kernel_ids"][r].split())
        count = int(((o["pattern"] == p["pattern"][r]) & before_last).sum())
        ours.append((count, hashlib.sha1(names.encode()).hexdigest()[:16]))
    assert sorted(ours, reverse=True) == sorted(HTA_CONV2D, reverse=True)


# ----- periodic texts: a loop repeated many times -----------------------------------------
def _periodic_cases() -> list[tuple[list[list[int]], int]]:
    """Runs of several roots and lengths, alone, with a prefix and suffix, two periodic
    regions in one sequence, a run inside random symbols, nested periodicity (R^3 S)^m,
    and a run that ends part-way through its root."""
    rng = np.random.default_rng(77)
    cases = []
    for root in ([0], [0, 1], [0, 1, 2], [0, 1, 0, 2], [3, 1, 4, 1, 5]):
        for m in (2, 3, 5, 9):
            cases.append(([root * m], 3))
            cases.append(([[7, 8] + root * m + [9]], 2))
            cases.append(([root * m + root[:len(root) // 2 + 1]], 3))
    for a, b in (([0, 1], [2, 3, 4]), ([0, 1, 2], [0, 1, 3]), ([5], [0, 1])):
        cases.append(([a * 6 + [9] + b * 5], 3))
        cases.append(([a * 4 + b * 4 + a * 3], 2))
    for _ in range(6):
        noise = rng.integers(10, 14, 12).tolist()
        cases.append(([noise[:6] + [0, 1, 2] * 7 + noise[6:]], 3))
    for k in (3, 6):  # a long run between short ones of its root at both ends
        cases.append(([[0, 1, 0, 9] + [0, 1] * 2 * k + [0, 8, 0, 1, 0, 7]], 3))
        cases.append(([[0, 1, 0, 9, 0, 1, 0, 1, 0, 8] + [0, 1] * 3 * k + [0, 7, 0, 1, 0, 6]], 3))
    for r, s, m in (([0, 1], [2], 4), ([0, 1, 2], [3], 3), ([0], [1], 6)):
        cases.append(([(r * 3 + s) * m], 3))
        cases.append(([(r * 3 + s) * m, r * 5], 2))
    return cases


@pytest.fixture
def listed(monkeypatch) -> list[int]:
    """The sizes of every occurrence array the mining lists (its real ``_occurrences``)."""
    import traceaug.analysis.repeats as mining

    sizes: list[int] = []
    real = mining._occurrences

    def counting(sa, lo, hi):
        group, occ = real(sa, lo, hi)
        sizes.append(len(occ))
        return group, occ

    monkeypatch.setattr(mining, "_occurrences", counting)
    return sizes


@pytest.mark.parametrize(("seqs", "min_len"), _periodic_cases())
def test_periodic_texts_equal_brute_force(seqs, min_len) -> None:
    assert mined(seqs, min_len) == brute_force(seqs, min_len)


def test_runs_side_by_side_equal_brute_force() -> None:
    """Sequences of runs of short random roots end to end (runs of one period that overlap,
    progressions whose greedy picks reach into the next run), against the brute force."""
    rng = np.random.default_rng(2)
    for trial in range(300):
        seqs = []
        for _ in range(int(rng.integers(1, 3))):
            seq: list[int] = []
            for _ in range(int(rng.integers(1, 5))):
                root = rng.integers(0, int(rng.integers(2, 4)), int(rng.integers(1, 4))).tolist()
                seq += root * int(rng.integers(1, 7))
            seqs.append(seq[:60])
        min_len = int(rng.integers(1, 5))
        assert mined(seqs, min_len) == brute_force(seqs, min_len), (trial, seqs, min_len)
    # (0 1)^2 then (1 0 1)^... : 1 0 1 1 at 15 overlaps the next run's first at 16
    seq = [0, 1, 0, 1] + [0, 1, 1] * 5 + [1] + [0, 1, 1] * 5 + [0]
    assert mined([seq], 3)[(1, 0, 1, 1)] == [(0, 3), (0, 9), (0, 15), (0, 19), (0, 25), (0, 31)]
    assert mined([seq], 3) == brute_force([seq], 3)


def test_periodic_text_is_mined_without_every_occurrence(listed) -> None:
    """A 200,000-symbol loop (R^m, and (R^3 S)^m) mines to its step with count m, and the
    occurrences ever listed stay within 2n (R, R^2, ... R^(m-1) hold ~ n^2 / 2|R| in all)."""
    root = [0, 1, 2, 3]
    found = repeats([np.array(root * 50_000)], 3)
    assert [(r.symbols, r.count) for r in found] == [((0, 1, 2, 3), 50_000)]
    assert found[0].start.tolist()[:3] == [0, 4, 8] and sum(listed) <= 2 * 200_000
    listed.clear()
    found = repeats([np.array(([0, 1] * 3 + [2]) * 28_571)], 3)
    # 0 1 0 1 is (0 1)^2 with 0 1 shorter than min_len: reported, once per step
    assert [(r.symbols, r.count) for r in found] == [((0, 1, 0, 1, 0, 1, 2), 28_571),
                                                     ((0, 1, 0, 1), 28_571)]
    assert sum(listed) <= 2 * 200_000


def test_periodic_patterns_counted_by_progressions(listed) -> None:
    """(0 1)^m 0 2: every (0 1)^k 0 is a reported pattern (period 2, not a power) with
    m - k overlapping occurrences, ~n^2 / 16 in all; they are counted from one progression
    each, listing under 2n occurrences, and every count equals a plain scan."""
    seq = np.array([0, 1] * 5_000 + [0, 2])
    found = {r.symbols: r for r in repeats([seq], 3)}
    assert sum(listed) <= 2 * len(seq)
    assert set(found) == {(0, 1) * k + (0,) for k in range(1, 2_500)}  # longer: overlap
    for k in (1, 2, 3, 7, 100, 1_666, 2_499):
        r = found[(0, 1) * k + (0,)]
        assert r.count == _count([seq], np.array(r.symbols)) == 10_002 // (2 * k + 2)
        assert r.start.tolist()[:2] == [0, 2 * k + 2]
    # the same run between short runs of 0 1 at both ends (the pattern's first and last
    # two occurrences are far apart): still progressions
    listed.clear()
    seq = np.array([0, 1, 0, 9] + [0, 1] * 5_000 + [0, 8, 0, 1, 0, 7])
    found = {r.symbols: r for r in repeats([seq], 3)}
    assert sum(listed) <= 2 * len(seq)
    for k in (1, 2, 100):
        r = found[(0, 1) * k + (0,)]
        assert r.count == _count([seq], np.array(r.symbols)) == 10_002 // (2 * k + 2) + 2 * (k == 1)


def test_command_on_a_20000_step_loop(tmp_path, listed) -> None:
    """``traceaug patterns`` on 20,000 identical steps (kernel, copy: one stream of 40,000
    GPU ops, one run of period 2): K1 K2 K1 K2 (K1 K2 is under --min-len 3) counted
    10,000 times, listing at most 2n occurrences; with --min-len 2, K1 K2 20,000 times."""
    import csv
    import io

    from click.testing import CliRunner
    from kineto_gen import write_large

    from traceaug.cli import main

    trace = write_large(tmp_path / "loop.json", 20_000)
    rows = {}
    for min_len in (3, 2):
        result = CliRunner().invoke(main, ["patterns", str(trace), str(tmp_path / "out.json"),
                                           "--summary-only", "--format", "csv",
                                           "--min-len", str(min_len)])
        assert result.exit_code == 0, result.output
        rows[min_len] = [(r["kernel_ids"], int(r["count"]))
                         for r in csv.DictReader(io.StringIO(result.stdout))
                         if r["scope"] == "stream"]
    assert rows == {3: [("K1 K2 K1 K2", 10_000)], 2: [("K1 K2", 20_000)]}
    assert 0 < sum(listed) <= 2 * 2 * 40_000
    assert not (tmp_path / "out.json").exists()
