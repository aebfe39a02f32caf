"""The CPU ops that launched GPU work and their recorded shapes (Kineto's ``Input Dims``, ``Input type``,
``Concrete Inputs`` args, read once per arg set): what ``efficiency`` models an op from (the ops of a trace
or of a graph's capture) and ``diff --by op`` groups GPU time by."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from .flops import Inputs
from .tables import Columns

if TYPE_CHECKING:
    from ..trace import Trace

NO_OP = "(no CPU op)"  # a GPU op no CPU op launched
_OP = "('cpu_op', 'Operator')"
# Each launch (the first runtime call of a correlation id) with its parent, in one join: most launches' parent
# is their CPU op (``is_op``); {calls}: a filter on the calls
LAUNCH_PARENT_SQL = f"""
SELECT l.correlation, s.parent_id AS op, p.name, COALESCE(p.arg_set_id, -1) AS arg_set_id,
       p.category IN {_OP} AS is_op
FROM _traceaug_first_launch l JOIN slice s ON s.id = l.id{{calls}} JOIN slice p ON p.id = s.parent_id"""
# The nearest CPU op above each of slices {ids} (the parents of the few other launches): a walk up
OP_ABOVE_SQL = f"""
WITH RECURSIVE up(start, at) AS (
  SELECT id, parent_id FROM slice WHERE id IN ({{ids}})
  UNION ALL
  SELECT up.start, p.parent_id FROM up JOIN slice p ON p.id = up.at
  WHERE p.category NOT IN {_OP} AND p.parent_id IS NOT NULL)
SELECT up.start, up.at AS op, s.name, COALESCE(s.arg_set_id, -1) AS arg_set_id
FROM up JOIN slice s ON s.id = up.at WHERE s.category IN {_OP}"""
OPS_SQL = "SELECT id, name, COALESCE(arg_set_id, -1) AS arg_set_id FROM slice WHERE id IN ({ids})"
# The shapes of arg sets (ops of one name and shapes share their arg set), named by id: no scan of the slices.
ARGS_SQL = """
SELECT arg_set_id, key, int_value, string_value FROM args WHERE arg_set_id IN ({sets})
  AND (key GLOB 'args.Input Dims*' OR key GLOB 'args.Input type*' OR key GLOB 'args.Concrete Inputs*')
"""
KEY = re.compile(r"args\.(Input Dims|Input type|Concrete Inputs)((?:\[\d+\])+)$")


def _nest(into: dict, path: list[int], value: object) -> None:
    for i in path[:-1]:
        into = into.setdefault(i, {})
    into[path[-1]] = value


def _listed(tree: object) -> object:
    if not isinstance(tree, dict):
        return tree
    return [_listed(tree.get(i, {})) if isinstance(tree.get(i, {}), dict) else tree[i]
            for i in range(max(tree) + 1)] if tree else []


def read_inputs(rows: Columns) -> dict[int, Inputs]:
    """Each arg set's recorded inputs (only sets with ``Input Dims``) from its arg rows."""
    out: dict[int, Inputs] = {}
    sets: dict[int, dict] = {}
    for arg_set, key, iv, sv in zip(*(rows[c].tolist() for c in ("arg_set_id", "key", "int_value",
                                                                  "string_value")), strict=True):
        m = KEY.match(key)
        if m:
            path = [int(x) for x in re.findall(r"\d+", m.group(2))]
            _nest(sets.setdefault(arg_set, {}).setdefault(m.group(1), {}), path,
                  sv if isinstance(sv, str) else iv)
    for arg_set, fields in sets.items():
        if "Input Dims" not in fields:
            continue
        types = [t if isinstance(t, str) else "" for t in _listed(fields.get("Input type", {}))]
        scalars = [s if isinstance(s, str) else str(s) for s in _listed(fields.get("Concrete Inputs", {}))]
        dims_tree = fields["Input Dims"]
        dims = [_listed(dims_tree[i]) if isinstance(dims_tree.get(i), dict) else None
                for i in range(max(len(types), max(dims_tree) + 1))]
        out[arg_set] = Inputs(tuple(dims), tuple(types), tuple(scalars))
    return out


def recorded(trace: Trace, ids: list[int]) -> tuple[dict, dict[int, Inputs]]:
    """For the CPU ops of slice ``ids``: each one's (name, arg set id; -1: none), and each arg set's
    recorded inputs (``read_inputs``)."""
    if not ids:
        return {}, {}
    named = trace.columns(OPS_SQL.format(ids=", ".join(map(str, ids))))
    op_set = dict(zip(named["id"].tolist(), zip(named["name"].tolist(), named["arg_set_id"].tolist()),
                      strict=True))
    return op_set, inputs(trace, [a for _, a in op_set.values()])


def launch_ops(trace: Trace) -> Columns:
    """Each launch's nearest enclosing CPU op: ``correlation``, ``op`` (its slice id), ``name``,
    ``arg_set_id`` (-1: none); launches under no CPU op left out, and the calls that never launch
    (``kinds.HOST_ONLY_CALLS``: no GPU op shares their id) where the load kept them (the critical path's
    kinds: on the A100 6-stream trace 33,924 first calls of an id, of which 6,675 may launch)."""
    from ..read.kinds import HOST_ONLY_CALLS, kind_of

    calls = "" if kind_of(trace.kind).skip_calls >= HOST_ONLY_CALLS else \
        " AND s.name NOT IN ({})".format(", ".join(f"'{n}'" for n in sorted(HOST_ONLY_CALLS)))
    link = trace.columns(LAUNCH_PARENT_SQL.format(calls=calls))
    is_op = link.pop("is_op").astype(bool)
    out = {k: v[is_op] for k, v in link.items()}
    parent = link["op"][~is_op]
    if not len(parent):
        return out
    above = trace.columns(OP_ABOVE_SQL.format(ids=", ".join(map(str, sorted(set(parent.tolist()))))))
    op_of = {p: i for i, p in enumerate(above["start"].tolist())}  # one row a parent: the walk stops there
    found = np.array([op_of.get(p, -1) for p in parent.tolist()], np.int64)
    has = found >= 0
    walked = {"correlation": link["correlation"][~is_op][has], "op": above["op"][found[has]],
              "name": above["name"][found[has]], "arg_set_id": above["arg_set_id"][found[has]]}
    return {k: np.concatenate([out[k], walked[k].astype(out[k].dtype)]) for k in out}


def inputs(trace: Trace, sets: list[int]) -> dict[int, Inputs]:
    """The recorded inputs (``read_inputs``) of arg sets ``sets`` (-1: none)."""
    wanted = sorted(set(sets) - {-1})
    return read_inputs(trace.columns(ARGS_SQL.format(sets=", ".join(map(str, wanted))))) if wanted else {}
