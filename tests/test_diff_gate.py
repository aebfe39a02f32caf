"""`traceaug diff --fail-on-regression`: an op change gates only when significant across the steps
(Mann–Whitney U) and past both thresholds; pairs made from one trace never gate, a planted change does."""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import shared_trace
from test_diff import raw_per_step

from traceaug.analysis.ranktest import bh_q, mann_whitney_p, min_p
from traceaug.cli import main

V100 = "kineto/diff/v100_resnet50_2021"
# One complete event in Kineto's layout: its category, name, start and duration (integer µs, 2021 schema).
EVENT = re.compile(rb'"cat": "(?P<cat>[^"]*)",\s*"name": "(?P<name>(?:[^"\\]|\\.)*)",[^{}]*?'
                   rb'"ts": (?P<ts>\d+), "dur": (?P<dur>\d+)')
GPU_CATS = (b"Kernel", b"Memcpy", b"Memset")
CORRELATION = re.compile(rb'"correlation": (\d+)')


def run(a: Path, b: Path, *extra: str) -> tuple[int, dict, str]:
    """``diff A B --format json EXTRA`` in-process: exit code, its one rank's JSON, stderr."""
    r = CliRunner().invoke(main, ["diff", str(a), str(b), "--format", "json", *extra])
    assert r.exit_code in (0, 3), r.output
    (rank,) = json.loads(r.stdout)["ranks"]
    return r.exit_code, rank, r.stderr


@functools.lru_cache(maxsize=1)
def v100_a() -> tuple[bytes, list]:
    """Run A's raw text and its events (``EVENT`` matches)."""
    path = next(shared_trace(f"{V100}/a").iterdir())
    text = gzip.open(path).read()
    return text, list(EVENT.finditer(text))


def edited(text: bytes, events: list, durs: dict[int, int]) -> bytes:
    """``text`` with event ``i``'s duration made ``durs[i]`` (µs), every other byte as it was."""
    out, at = [], 0
    for i in sorted(durs):
        m = events[i]
        out += [text[at:m.start("dur")], str(durs[i]).encode()]
        at = m.end("dur")
    return b"".join(out + [text[at:]])


def name(m) -> str:
    return json.loads(b'"' + m["name"] + b'"')


def step_windows(events: list) -> list[tuple[int, int, int]]:
    """(start, end, number) of each ProfilerStep, from the raw events."""
    return sorted((int(m["ts"]), int(m["ts"]) + int(m["dur"]), int(name(m).split("#")[1]))
                  for m in events if re.fullmatch(r"ProfilerStep#\d+", name(m)))


def gpu_per_step(text: bytes, events: list) -> dict[str, dict[int, list[int]]]:
    """GPU op name -> step index -> the indices of its events; a GPU op's step is its launching
    call's (the runtime event with its correlation id), as HTA and traceaug assign it; -1: none."""
    windows = step_windows(events)
    ends = [m.start() for m in events[1:]] + [len(text)]
    corr = [CORRELATION.search(text, m.end(), end) for m, end in zip(events, ends, strict=True)]
    launch: dict = {}
    for m, c in sorted(zip(events, corr, strict=True), key=lambda mc: int(mc[0]["ts"])):
        if m["cat"] == b"Runtime" and c:
            ts = int(m["ts"])
            launch.setdefault(c[1], next((j for j, (lo, hi, _) in enumerate(windows) if lo <= ts < hi), -1))
    out: dict = defaultdict(lambda: defaultdict(list))
    for i, (m, c) in enumerate(zip(events, corr, strict=True)):
        if m["cat"] in GPU_CATS:
            out[name(m)][launch.get(c[1], -1) if c else -1].append(i)
    return out


def test_mann_whitney_p_equals_the_enumeration_of_every_split() -> None:
    """The exact p-value, ties included, is the share of the splits of the pooled samples whose U
    is at least as far from its mean as the observed one (enumerated here); swapping sides gives the
    same p; 3 vs 3 steps can never reach 0.05 (min 0.1), 6 vs 6 can (2/924)."""
    def brute(x, y):
        pooled = list(x) + list(y)

        def u(idx):
            xs, ys = [pooled[i] for i in idx], [pooled[i] for i in range(len(pooled)) if i not in idx]
            return sum((p > q) + 0.5 * (p == q) for p in xs for q in ys)

        mean = len(x) * len(y) / 2
        seen = abs(u(range(len(x))) - mean)
        splits = [abs(u(c) - mean) for c in itertools.combinations(range(len(pooled)), len(x))]
        return sum(d >= seen - 1e-9 for d in splits) / len(splits)

    rng = np.random.default_rng(7)
    for _ in range(60):
        n, m = rng.integers(1, 7, 2)
        x, y = rng.integers(0, 5, n).astype(float), rng.integers(0, 5, m).astype(float)
        assert mann_whitney_p(x, y) == pytest.approx(brute(x, y), abs=1e-12)
        assert mann_whitney_p(y, x) == mann_whitney_p(x, y)
    assert (min_p(3, 3), min_p(6, 6)) == (0.1, pytest.approx(2 / 924))
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    big_x, big_y = rng.normal(size=50), rng.normal(size=50) + 0.7  # normal approximation: |z| from U
    u = sum((p > q) + 0.5 * (p == q) for p in big_x for q in big_y)
    z = (abs(u - 1250) - 0.5) / math.sqrt(50 * 50 * 101 / 12)
    assert mann_whitney_p(big_x, big_y) == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert bh_q(np.array([0.01, 0.04, 0.03, 0.5])).tolist() == pytest.approx([0.04, 0.04 * 4 / 3,
                                                                               0.04 * 4 / 3, 0.5])


def test_halves_of_one_run_never_gate(tmp_path: Path) -> None:
    """Run A's first three steps against its last three (the other steps renamed so that no step
    holds them), both ways: with no floor at all ops grow by over 10 %, reported, not gated: 3 vs 3
    steps are too few to tell (p >= 0.1)."""
    text, events = v100_a()
    windows = step_windows(events)
    halves = []
    for keep in (windows[:3], windows[3:]):
        drop = {n for *_, n in windows} - {n for *_, n in keep}
        out = text
        for n in drop:
            out = out.replace(f'"ProfilerStep#{n}"'.encode(), f'"ProfilerStepX{n}"'.encode())
        path = tmp_path / f"half{len(halves)}.json"
        path.write_bytes(out)
        halves.append(path)
    for a, b in (halves, halves[::-1]):
        code, rank, err = run(a, b, "--fail-on-regression", "10", "--min-delta", "0")
        gate = rank["gate"]
        assert code == 0 and (gate["steps_a"], gate["steps_b"]) == (3, 3) and not gate["enough_steps"]
        grew = [o for o in gate["ops"] if o["change"] == "regression"]
        assert grew and not any(o["gates"] for o in gate["ops"])
        assert all(o["p_value"] >= 0.1 for o in gate["ops"])
        assert "reported, not gated: 3 vs 3 steps are too few to tell" in err


# The copies below only shorten GPU ops: a longer one could overlap the next on its stream, which the
# 2021 schema's string tids ("stream 7") cannot load today (base.sql's _traceaug_track: the lane's
# traceaug_tid is text where thread tids are numbers).


def test_noise_from_the_runs_own_spread_never_gates(tmp_path: Path) -> None:
    """Run A's steps against the same steps with every GPU op's time in each step scaled by noise
    drawn from that op's own step-to-step spread (both copies at 80 % of A, so that no op grows past
    its slot): ops pass 1 % and no floor, and none is significant, both ways."""
    text, events = v100_a()
    rng = np.random.default_rng(2021)
    base, noisy = {}, {}
    for per_step in gpu_per_step(text, events).values():
        totals = np.array([sum(int(events[i]["dur"]) for i in per_step.get(j, [])) for j in range(6)])
        spread = totals.std() / totals.mean() if totals.mean() else 0.0
        for idx in per_step.values():
            factor = 0.8 * min(max(1 + rng.normal(0, spread), 0.5), 1.25)
            base.update({i: round(int(events[i]["dur"]) * 0.8) for i in idx})
            noisy.update({i: round(int(events[i]["dur"]) * factor) for i in idx})
    a, b = tmp_path / "base.json", tmp_path / "noisy.json"
    a.write_bytes(edited(text, events, base))
    b.write_bytes(edited(text, events, noisy))
    for x, y in ((a, b), (b, a)):
        code, rank, err = run(x, y, "--fail-on-regression", "1", "--min-delta", "0")
        gate = rank["gate"]
        assert code == 0, err
        assert gate["enough_steps"] and len(gate["ops"]) >= 5  # the test, not the thresholds, decides
        assert not any(o["gates"] for o in gate["ops"])
        assert "not significant (q > 0.05)" in err


def test_a_kernel_planted_10_pct_slower_gates_and_one_doubled_instance_does_not(tmp_path: Path) -> None:
    """Run A against a copy whose steadiest large kernel is 10 % shorter on every instance: A's
    kernel is +10 % on every instance, and A exits 3 naming it (read the other way: a significant
    improvement, same p and q). A against a copy with one instance of a once-per-step kernel halved
    (A: that instance doubled, +19 % per step, past both thresholds) does not gate."""
    text, events = v100_a()
    a = next(shared_trace(f"{V100}/a").iterdir())
    kernels = {k: v for k, v in gpu_per_step(text, events).items()
               if all(events[i]["cat"] == b"Kernel" for idx in v.values() for i in idx)}

    def totals(per_step):
        return np.array([sum(int(events[i]["dur"]) for i in per_step.get(j, [])) for j in range(6)])

    steady = max((k for k, v in kernels.items() if totals(v).std() < 0.01 * totals(v).mean()),
                 key=lambda k: totals(kernels[k]).mean())
    shorter = {i: round(int(events[i]["dur"]) / 1.1) for idx in kernels[steady].values() for i in idx}
    faster = tmp_path / "faster.json"
    faster.write_bytes(edited(text, events, shorter))
    in_steps = [i for j, idx in kernels[steady].items() if j >= 0 for i in idx]
    grew_ns = sum(int(events[i]["dur"]) - shorter[i] for i in in_steps) * 1e3 / 6
    flags = ("--fail-on-regression", "5", "--min-delta", "20")
    code, rank, err = run(faster, a, *flags)
    (op,) = rank["gate"]["ops"]
    assert code == 3 and op["key"] == steady and op["gates"] and op["change"] == "regression"
    assert op["delta_ns"] == pytest.approx(grew_ns, rel=1e-3)
    assert op["delta_pct"] == pytest.approx(10, abs=0.1)
    assert "1 op(s) grew by over 5% and 20.0 us per step, significant over 6 vs 6 steps" in err
    assert f"gpu {steady[:50]}" in err and op["p_value"] == pytest.approx(2 / 924)
    code, back, _ = run(a, faster, *flags)
    (op_back,) = back["gate"]["ops"]
    assert code == 0 and op_back["change"] == "improvement" and not op_back["gates"]
    assert (op_back["p_value"], op_back["q_value"]) == (op["p_value"], op["q_value"])

    once = [k for k, v in kernels.items() if all(len(v.get(j, [])) == 1 for j in range(6))]
    lone, i = max(((k, idx[0]) for k in once for j, idx in kernels[k].items()
                   if j >= 0 and int(events[idx[0]]["dur"]) % 2 == 0),
                  key=lambda ki: int(events[ki[1]]["dur"]))
    halved = tmp_path / "halved.json"
    halved.write_bytes(edited(text, events, {i: int(events[i]["dur"]) // 2}))
    high = raw_per_step(a)[("gpu", lone)][1]
    grew_ns = int(events[i]["dur"]) // 2 * 1e3 / 6
    assert grew_ns > 20e3 and grew_ns / (high - grew_ns) > 0.05  # past both thresholds
    code, rank, err = run(halved, a, *flags)
    (op,) = rank["gate"]["ops"]
    assert code == 0 and op["key"] == lone and not op["gates"] and op["p_value"] > 0.2
    assert op["delta_ns"] == pytest.approx(grew_ns)
    assert "1 op(s) grew by over 5% and 20.0 us per step, reported, not gated: not significant" in err


def test_v100_pair_differs_for_real_and_gates_by_time() -> None:
    """The two ResNet-50 runs differ for real: B's step is 14 % shorter and A's DataLoader op
    takes over half as long again (self time, from the raw events). B -> A exits 3 on the step time
    and names the op changes in order of their time per step, not their percent; A -> B is quiet and
    lists the same ops as improvements with the same p-values."""
    folder = shared_trace(V100)
    fa, fb = (next((folder / s).iterdir()) for s in ("a", "b"))
    want_a, want_b = raw_per_step(fa), raw_per_step(fb)
    code, rank, err = run(folder / "b", folder / "a", "--fail-on-regression", "10", "--min-delta", "300")
    gate = rank["gate"]
    assert code == 3 and gate["step_regressed"] and gate["step_change_pct"] == pytest.approx(14.3, abs=0.05)
    assert "step time 152,955.167 -> 174,829.333 us (+14.3%)" in err
    gated = [o for o in gate["ops"] if o["gates"]]
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert gated[0]["key"] == loader and len(gated) >= 2
    grow = {o["key"]: want_a[(o["device"], o["key"])][1] - want_b[(o["device"], o["key"])][1]
            for o in gated}
    assert [o["key"] for o in gated] == sorted(grow, key=lambda k: -grow[k])  # by time
    assert max(gated, key=lambda o: o["delta_pct"]) is not gated[0]  # not by percent
    ta, tb = want_a[("cpu", loader)][1], want_b[("cpu", loader)][1]
    assert gated[0]["delta_pct"] == pytest.approx(100 * (ta - tb) / tb) and ta / tb > 1.5
    message = next(line for line in err.splitlines() if "regression over" in line and "op(s)" in line)
    assert message.index(loader[:40]) < message.index(gated[1]["key"][:30])
    code, rank, err = run(folder / "a", folder / "b", "--fail-on-regression", "10", "--min-delta", "300")
    back = {o["key"]: o for o in rank["gate"]["ops"]}
    assert set(back) == {o["key"] for o in gate["ops"]}  # one family of changes both ways
    for o in gate["ops"]:
        r = back[o["key"]]
        assert r["change"] != o["change"] and (r["p_value"], r["q_value"]) == (o["p_value"], o["q_value"])
        assert r["gates"] == (r["change"] == "regression" and r["q_value"] <= 0.05)
    # A -> B: the step is 12.5 % shorter, but B's aten::mul_ takes 11 % longer, significantly
    mul_a, mul_b = want_a[("cpu", "aten::mul_")][1], want_b[("cpu", "aten::mul_")][1]
    assert 1.1 < mul_b / mul_a < 1.12 and code == 3 and "step time" not in err
    assert [o["key"] for o in back.values() if o["gates"]] == ["aten::mul_"]
