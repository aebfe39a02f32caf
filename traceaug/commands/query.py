"""``traceaug query``: PerfettoSQL on one trace, loaded as the SQL needs (``sql_modules``) with
the traceaug modules it names included; ``traceaug.query`` answers the same SQL alike."""

from __future__ import annotations

import click

import traceaug.paths as paths

from ..errors import TraceaugError
from ..job import parts
from ..job.run import Work, items_of, run
from ..output import render_columns
from ..sql_modules import needs_full_load
from .declare import Call, Command, argument, echo, fmt, option, rank


def sql_of(call: Call) -> str:
    """The SQL: the argument, or ``-f FILE``'s text."""
    sql, sql_file = call.get("sql"), call.get("sql_file")
    if sql_file is not None:
        from ..read import source

        try:
            sql = source.read_side(sql_file, "an SQL file").decode()
        except UnicodeDecodeError as e:
            raise TraceaugError(f"{sql_file}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not sql:
        raise click.UsageError("give the SQL as an argument or with -f FILE")
    return sql


def kind(params: dict) -> str:
    """A full load when the SQL reads args or flows (``--full`` / ``--lean`` decide)."""
    if params.get("kind"):
        return params["kind"]
    full = params.get("full")
    return "full" if (needs_full_load(params["sql"]) if full is None else full) else "analysis"


def compute(call: Call) -> dict:
    """The SQL's result columns (``Trace.columns``) on the one trace it runs on."""
    files = call.files()
    if len(files) > 1:
        raise TraceaugError(f"{call['trace']}: holds {len(files)} ranks; choose one with --rank "
                            "(rank= in Python)")
    done = run(Work(kind(call.params), parts.query, {"sql": call["sql"]}), items_of(files),
               call.job)
    return next(iter(done.values()))


def _api(columns: dict, call: Call):
    from ..trace import frame

    return frame(columns)


COMMAND = Command(
    "query", "Run PerfettoSQL on TRACE (timestamps are ns from `traceaug_meta.time_base_ns`).",
    (argument("trace", type=paths.Input()), argument("sql", required=False),
     option("-f", "--file", "sql_file", type=click.Path(allow_dash=True),
            help="Read the SQL from a file (- for stdin)."),
     fmt("Output format (NULL: empty in csv, null in json; inf as \"inf\" in json)."),
     rank("For a directory: the rank to query."),
     option("--full/--lean", default=None,
            help="Load every arg and flow event, or only what analyses read. "
                 "[default: full when the SQL mentions args, flows or other modules]")),
    compute, show=lambda columns, call: echo(render_columns(columns, call["fmt"])),
    api=_api, kind=kind, inputs=("trace",), cli_only=("fmt", "sql_file"),
    api_params={"kind": None}, prepare=lambda call: call.params.update(sql=sql_of(call)))
