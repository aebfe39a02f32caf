"""``traceaug cache info|clear``: the job table cache's place, bound and entries per load kind, or all
of it removed (``job.cache``)."""

from __future__ import annotations

import click

import traceaug.runtime as runtime

from .declare import Call, Command, argument, echo, fmt, option


def compute(call: Call) -> dict:
    """The cache's figures (``clear``: after removing every entry, what was removed)."""
    from ..job.cache import place
    from ..read.storage import parse_options

    with runtime.using(storage=parse_options(call["storage"]) or None):
        store = place(call["cache"])
        found = store.clear() if call["action"] == "clear" else store.listing()
    kinds: dict[str, list[int]] = {}
    for name, size, _ in found:
        kind = kinds.setdefault(name.rsplit("/", 1)[-1].split(".", 1)[0], [0, 0])
        kind[0], kind[1] = kind[0] + 1, kind[1] + size
    return {"cache": store.root, "action": call["action"], "max_bytes": store.bound,
            "entries": len(found), "bytes": sum(e[1] for e in found),
            "files": len({name.split("/", 1)[0] for name, _, _ in found}),
            "kinds": {k: {"entries": n, "bytes": b} for k, (n, b) in sorted(kinds.items())}}


def show(found: dict, call: Call) -> None:
    from ..output import render_records

    if call["fmt"] != "table":
        echo(render_records([found], call["fmt"]))
        return
    done = "removed: " if found["action"] == "clear" else ""
    text = (f"cache      {found['cache']}\nbound      {found['max_bytes'] / 1e9:.1f} GB "
            f"(TRACEAUG_CACHE_MAX)\n{done}{found['entries']} entries of {found['files']} files, "
            f"{found['bytes'] / 1e6:.1f} MB\n")
    for kind, n in found["kinds"].items():
        text += f"  {kind:<12} {n['entries']:>6} entries {n['bytes'] / 1e6:>10.1f} MB\n"
    echo(text)


COMMAND = Command(
    "cache", "The table cache of jobs' ranks: `info` (where, bound, entries by load kind) or `clear`.",
    (argument("action", type=click.Choice(["info", "clear"])),
     option("--cache", metavar="DIR", help="The cache (default: TRACEAUG_CACHE, else "
            "$XDG_CACHE_HOME/traceaug/tables)."),
     option("--storage-option", "storage", multiple=True, metavar="KEY=VALUE",
            help="An fsspec storage option for a URL cache; repeatable."),
     fmt(choices=("table", "json", "csv"))),
    compute, show, api=lambda found, call: found)
