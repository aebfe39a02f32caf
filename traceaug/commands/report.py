"""``traceaug report``: every analysis of TRACE or of every rank of a job, a job's verdict
(``analysis.job_verdict``) and who waited for whom first; as titled tables, or (``--html``) one
offline page of charts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import traceaug.paths as paths

from ..analysis import report
from ..job.parts import RankPart
from .analysis import rank_parts, reliability, sections_api, shown, tables
from .declare import COUNT, JOB, Call, Command, argument, echo, fmt, option, rank, said, step


def _job(found: list | None, ranks: list, call: Call, top: int | None) -> list[tuple[str, dict]]:
    """A job's section from its ranks' collective tables and ``RankPart``s (none without
    collectives)."""
    held = {p.rank: p.path for p in ranks}
    for p in ranks:  # (their replay models and collective tables: freed here, before the page is made)
        p.path = p.collectives = None
    if found is None or not any(len(t.colls) for t in found):
        return []  # (one trace: none of the job's modules imported)
    from ..analysis import collectives as co
    from ..analysis.job_path import keyed
    from ..render.job_sections import job_sections
    from .collectives import by_step
    from .stragglers import verdicts

    job = co.match_job(found)  # (the verdict's replay matches the same: aligned, every step)
    matched = by_step(job, call["step"], call["trace"])
    return job_sections(matched, top, verdicts(matched, keyed(held), job, call))


OVERVIEW = "verdict and findings"
# one read per rank gives every section: gpu_steps' events with the CPU ops' shapes and the [memory] events
# (``read.kinds``; a job's "job_path" keeps them too)
KIND = "report"


def held(call: Call) -> Callable:
    """``on_result`` of a report's ranks: each rank's ``RankPart`` with its efficiency and memory cut to
    what ``more_sections`` reads, as it arrives (a job's report holds that of each rank, not the whole)."""
    from ..analysis.memory import pick
    from ..render.efficiency_text import report_part

    def cut(rank, p: RankPart) -> RankPart:
        return replace(p, sections={"efficiency": report_part(p.sections["efficiency"], call["top"]),
                                    "memory": pick(p.sections["memory"], call["step"], call["top"])})

    return cut


def more_sections(call: Call, found: list) -> list[tuple[str, dict]]:
    """The efficiency and memory sections (``render.efficiency_text``, ``render.memory_text``) from what
    each rank's one read gave (``RankPart.sections``, cut by ``held``)."""
    from ..render.efficiency_text import report_sections
    from ..render.memory_text import report_sections as memory_sections

    cut = {f.rank: p.sections for f, p in zip(call.files(), found, strict=True)}
    return [*report_sections({r: s["efficiency"] for r, s in cut.items()}),
            *memory_sections({r: s["memory"] for r, s in cut.items()})]


def text_part(g, in_job: bool, step: int | None, top: int) -> dict:
    """A rank's part of the terminal report: its tables (``analysis.report.part``) and what the
    verdict and findings need (``findings.overview_part``)."""
    from ..analysis import serving_figures
    from ..render.findings import overview_part

    text = report.part(g, in_job, step, top)
    return {"text": text, "overview": overview_part(g, step, text),
            "serving": serving_figures.part(g) if len(g.serving["step"]) else None}


def compute(call: Call) -> list | tuple:
    """The report's sections, the verdict and findings first (as the page's); with ``--html``, the
    page written: (charts, ranks)."""
    out = call.get("html_out")
    if out is None:
        from ..render.findings import overview, overview_table
        from ..render.serving_text import sections as serving_sections

        found, colls = rank_parts(call, text_part, {"step": call["step"], "top": call["top"]}, True,
                                  held(call))
        job = _job(colls, found, call, call["top"])  # the terminal's heatmap: the ``top`` worst
        del colls
        parts = tables(found)
        seen = overview({k: [p["overview"][k] for p in parts] for k in parts[0]["overview"]},
                        call["step"], job=job)
        served = [p["serving"] for p in parts if p["serving"]]
        return [*(serving_sections(served) if served else ()), (OVERVIEW, overview_table(seen)), *job,
                *report.combine([p["text"] for p in parts], call["top"]), *reliability(found),
                *more_sections(call, found)]
    from ..render.analyses_html import analyses, write_report

    found, colls = rank_parts(call, analyses, {"step": call["step"]}, True, held(call))
    job = _job(colls, found, call, None)  # the page's heatmap: every collective in order
    del colls
    ranks = tables(found)
    title = f"traceaug report: {paths.name_of(call['trace'])}"
    return write_report(ranks, out, call["step"], call["top"], title=title, job=job,
                        tables=more_sections(call, found)), len(ranks)


def show(result, call: Call) -> None:
    if call.get("html_out") is None:
        if call["fmt"] == "table":  # the verdict and findings first, whole (a table cuts its cells)
            from textwrap import fill

            from ..render.collectives_text import verdict_text
            from ..render.findings import JOB_VERDICT
            from ..render.serving_text import SERVING_VERDICT

            first = [(title, t) for title, t in result[:3] if title.startswith("serving")]
            if first:  # a serving trace: its verdict and tables first
                echo(f"{SERVING_VERDICT}\n{fill(' '.join(first[0][1]['text'].tolist()), 100)}\n\n")
                shown(first[1:], call)
                echo("\n")
                result = result[len(first):]
            texts = next(t["text"].tolist() for title, t in result if title == OVERVIEW)
            found = "".join(f"{fill(f'{i}. {t}', 100, subsequent_indent='   ')}\n"
                            for i, t in enumerate(texts[1:], 1))
            echo(f"{OVERVIEW}\n{verdict_text(texts[:1])}\n\n{found}\n")
            result = [(title, t) for title, t in result if title not in (OVERVIEW, JOB_VERDICT)]
        shown(result, call)
    else:
        said(f"wrote {call['html_out']} ({result[0]} charts, {result[1]} rank(s))")


def _findings(result: list, call: Call) -> list[dict]:
    """``report.top_kernel`` (``render.findings``), verified on its rank's file."""
    from ..render.findings import top_kernel_finding

    kernels = dict(result).get("kernels", {})
    return top_kernel_finding(kernels, {f.rank: f.path for f in call.files()}, call["step"])


def _check(call: Call) -> None:
    if call["html_out"] is not None:
        from ..render.paths import check_output

        check_output(call["html_out"], call["trace"])


COMMAND = Command(
    "report", "Kernels, breakdowns, gaps and launches of TRACE or every rank of a directory; "
    "--html writes them as one page of plotly charts.",
    (argument("trace", type=paths.Input()), JOB, rank(), step(), fmt(),
     option("--html", "html_out", type=paths.Output(),
            help="Write a self-contained page with every chart (works offline)."),
     option("--top", type=COUNT, default=10, show_default=True, help="Kernels per chart / table.")),
    compute, show, sections_api, kind=lambda p: KIND, inputs=("trace",), prepare=_check,
    cli_only=("fmt", "html_out"), findings=_findings, schema_version=2)
