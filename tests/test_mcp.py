"""``traceaug mcp`` through the MCP SDK's own client over stdio: the tools listed, each called on the
shared traces gives the CLI's JSON, progress reported, paths outside the roots refused, a huge query
capped; and a question set whose answers come from the raw JSON, scored exactly."""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import statistics
import sys
from collections import defaultdict

import pytest
from collectives_raw import raw_kernels, raw_ranks
from conftest import ROOT, SHARED, shared_trace, skip_or_fail
from rawjson import load_raw, ns

A100 = "kineto/a100_rank0_of16_6streams.json.gz"
SMALL = "kineto/a100_simple_add_cuda_sync.json.gz"
DLRM = "kineto/jobs/dlrm_v100_8ranks"
H100_A, H100_B = "kineto/diff/h100_runs/a/trace.json.gz", "kineto/diff/h100_runs/b/trace.json.gz"
# One call of every tool (a new command with --format json needs its case here).
CASES = {
    "info": {"trace": A100},
    "report": {"trace": A100},
    "kernels": {"trace": A100, "top": 5},
    "breakdown": {"trace": A100},
    "gaps": {"trace": A100, "top": 5},
    "launches": {"trace": SMALL},
    "stragglers": {"trace": DLRM, "step": 10},
    "collectives": {"trace": DLRM},
    "critical_path": {"src": SMALL},
    "whatif": {"trace": H100_A, "scale": ["comp=0.5"]},
    "diff": {"a": H100_A, "b": H100_B, "fail_pct": 1.0},
    "query": {"trace": A100, "sql": "select count(*) as n from slice"},
    "counters": {"src": SMALL},
    "patterns": {"src": SMALL},
    "cupti": {"trace": "kineto/a100_cupti_counters.json.gz"},
    "efficiency": {"src": "kineto/h100_qwen05b_inference.json.gz"},
    "serving": {"src": "kineto/inference/vllm_decode_full/graph_execution.json.gz"},
}
ENV = {"PYTHONPATH": str(ROOT), "TRACEAUG_NO_PROGRESS": "1"}


async def _session(roots: list[str], calls: list[tuple[str, dict]], extra: tuple = ()) -> tuple:
    """The server's tools and the result of each call (is_error, text, progress notifications)."""
    import mcp
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, env=ENV, cwd=str(ROOT),
                                   args=["-m", "traceaug", "mcp", *[a for r in roots for a in ("--root", r)],
                                         *extra])
    async with stdio_client(params) as (read, write), mcp.ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        results = []
        for name, arguments in calls:
            progress = []

            async def on_progress(done, total, message, progress=progress):
                progress.append((done, message))
            r = await session.call_tool(name, arguments, progress_callback=on_progress)
            results.append((r.is_error, r.content[0].text, progress))
        return tools, results


def session(roots: list[str], calls: list[tuple[str, dict]], extra: tuple = ()) -> tuple:
    try:
        import mcp  # noqa: F401
    except ImportError:
        skip_or_fail("the MCP SDK is not installed (pip install 'traceaug[mcp]')")
    return asyncio.run(asyncio.wait_for(_session(roots, calls, extra), 600))


def cli_json(name: str, arguments: dict) -> object:
    """``traceaug NAME ... --format json`` on the command line (in this process), same arguments."""
    from click.testing import CliRunner

    from traceaug.cli import main

    args = [name.replace("_", "-")]
    for key, value in arguments.items():
        if key in ("trace", "src", "a", "b", "sql"):
            args.append(str(SHARED / value) if key != "sql" else value)
        else:
            option = {"fail_pct": "--fail-on-regression"}.get(key, "--" + key.replace("_", "-"))
            for v in value if isinstance(value, list) else [value]:
                args += [option, str(v)]
    if name in ("critical_path", "counters", "patterns", "serving", "efficiency"):
        args.append("--summary-only")
    done = CliRunner().invoke(main, [*args, "--format", "json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def served():
    shared_trace(DLRM)
    return session([str(SHARED)], list(CASES.items()) + [
        ("query", {"trace": A100, "sql": "select * from slice"}),  # 67k rows: capped
        ("kernels", {"trace": "/etc/hostname"}),  # outside the root
        ("kernels", {"trace": "../traces/" + A100 + "/../../../../../etc/passwd"}),
        ("kernels", {"trace": A100, "no_such": 1}),
        ("kernels", {"trace": "kineto/no_such_file.json"}),
        ("diff", {"a": H100_A, "b": "kineto/diff/tiny_test/test.json.gz", "fail_pct": 1.0})])  # exits 3


def test_tools_listed_with_their_declared_parameters(served):
    tools = {t.name: t for t in served[0]}
    assert set(tools) == set(CASES)
    kernels = tools["kernels"].input_schema
    assert kernels["required"] == ["trace"]
    assert kernels["properties"]["sort"]["enum"][0] == "total"
    assert kernels["properties"]["top"] == {"type": "integer", "minimum": 0,
                                            "maximum": 2**63 - 1,
                                            "description": "Only the first N kernels (per rank)."}
    assert "dst" not in tools["critical_path"].input_schema["properties"]  # tools write nothing
    assert all(t.annotations.read_only_hint for t in tools.values())


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_tool_gives_the_clis_json(served, name):
    is_error, text, progress = served[1][list(CASES).index(name)]
    assert not is_error, text
    assert json.loads(text) == cli_json(name, CASES[name])
    assert progress and progress[0][1] == f"traceaug {name.replace('_', '-')}: started"


def test_huge_query_capped(served):
    is_error, text, _ = served[1][len(CASES)]
    data = json.loads(text)
    assert not is_error and len(text) <= 200_000 + 200
    (cut,) = data["truncated"]
    raw_slices = len(_raw(A100)["traceEvents"])
    assert cut["at"] == "/rows" and cut["kept"] == len(data["rows"]) <= 1000
    assert 1000 < cut["of"] <= raw_slices


def test_paths_outside_the_roots_refused(served):
    out = served[1][len(CASES) + 1:-1]
    assert all(is_error for is_error, _, _ in out)
    assert out[0][1] == (f"traceaug: error: /etc/hostname: outside the roots this server reads ({SHARED})")
    assert "/etc/passwd: outside the roots" in out[1][1]
    assert out[2][1].startswith("traceaug: error: kernels: no such argument no_such")
    assert out[3][1].startswith("traceaug: error: ") and "no_such_file.json" in out[3][1]
    assert all("\n" not in text and "Traceback" not in text for _, text, _ in out)


def test_symlink_out_of_a_root_refused_and_size_capped(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "escape.json.gz").symlink_to(shared_trace(A100))
    shutil.copy(SHARED / SMALL, root / "small.json.gz")
    _, results = session([str(root)], [("kernels", {"trace": "escape.json.gz"}),
                                       ("kernels", {"trace": "small.json.gz"})], ("--max-chars", "2000"))
    assert results[0][0] and "escape.json.gz: outside the roots" in results[0][1]
    data = json.loads(results[1][1])
    assert len(results[1][1]) <= 2000 and data["truncated"][0]["at"] == "/kernels"
    assert data["truncated"][0]["of"] > data["truncated"][0]["kept"] == len(data["kernels"])


# The question set: each answer derived from the raw JSON here, then asked through MCP.

@functools.lru_cache
def _raw(path: str) -> dict:
    return load_raw(SHARED / path)


def _dlrm_answer() -> tuple[int, float]:
    """The rank that arrived last at most of the DLRM job's collectives, and how late (µs) it started
    ProfilerStep#10 after the earliest rank, on clocks aligned by the median difference of the NCCL
    kernels' ends."""
    events = raw_ranks(SHARED / DLRM)
    ks = {r: raw_kernels(e) for r, e in events.items()}
    n = min(map(len, ks.values()))
    off = {r: round(statistics.median(ks[r][p][1] - ks[0][p][1] for p in range(n))) for r in ks}
    last = defaultdict(int)
    for p in range(n):
        last[max(ks, key=lambda r: ks[r][p][0] - off[r])] += 1
    straggler = max(last, key=last.get)
    start = {r: next(ns(e["ts"]) for e in ev if e.get("name") == "ProfilerStep#10") - off[r]
             for r, ev in events.items()}
    return straggler, (start[straggler] - min(start.values())) / 1e3


def _top_kernel() -> tuple[str, int]:
    total = defaultdict(int)
    for e in _raw(A100)["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            total[e["name"]] += ns(e["dur"])
    name = max(total, key=total.get)
    return name, total[name]


def _step_means_us() -> tuple[float, float]:
    def mean(path: str) -> float:
        return statistics.mean(ns(e["dur"]) for e in load_raw(SHARED / path)["traceEvents"]
                               if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")) / 1e3
    return mean(H100_A), mean(H100_B)


def test_question_set_scored_exactly(served):
    straggler, late_us = _dlrm_answer()
    top_name, top_ns = _top_kernel()
    a_us, b_us = _step_means_us()
    assert (straggler, late_us) == (7, 7513.5)  # the figures the brief names
    answers = {name: json.loads(text) for name, (_, text, _) in zip(CASES, served[1])}
    verdict = answers["stragglers"]["verdict"][0]
    top = answers["kernels"]["kernels"][0]
    gate = answers["diff"]["ranks"][0]["gate"]
    score = [verdict["rank"] == straggler, verdict["late_start_ns"] / 1e3 == late_us,
             verdict["step"] == 10, (top["name"], top["total_ns"]) == (top_name, top_ns),
             gate["step_regressed"] is (b_us > a_us * 1.01),
             round(gate["step_change_pct"], 9) == round(100 * (b_us - a_us) / a_us, 9)]
    assert score == [True] * len(score)


def test_a_gate_that_fails_still_answers(served):
    """``diff --fail-on-regression`` exits 3 on a regression: the tool returns its JSON (its gate says so)."""
    is_error, text, _ = served[1][-1]
    assert not is_error, text
    gate = json.loads(text)["ranks"][0]["gate"]
    assert gate["step_regressed"] or any(op["gates"] for op in gate["ops"])


def test_a_root_named_through_a_symlink_keeps_its_name(tmp_path):
    """A root reached through a symlink (``../shared`` is one on some machines): a tool's output names the
    file as the user named it, as the CLI does (it named the resolved path: every "file" differed), and a
    symlink out of the roots is still refused."""
    from traceaug.commands.mcp import Server
    from traceaug.errors import TraceaugError

    (tmp_path / "link").symlink_to(SHARED)
    (tmp_path / "out").symlink_to("/etc")
    server = Server([tmp_path / "link"])
    assert server.path(SMALL) == str(tmp_path / "link" / SMALL)
    with pytest.raises(TraceaugError, match=f"outside the roots this server reads \\({tmp_path / 'link'}\\)"):
        server.path(str(tmp_path / "out" / "hostname"))
