"""Write docs/schemas/NAME.json, the JSON Schema of ``traceaug NAME --format json``, from the command's real
outputs: ``python docs/schemas/generate.py [NAME...]`` (default: every command) runs the command on each
of its runs in tests/test_schemas.py's ``CASES`` (the shared traces) and infers one schema covering them
all (every key and type seen; a key is required when every output has it; objects closed).
Hand-tighten the result where an inference
is too loose (a number that may also be null, an enum), keep ``schema_version``'s ``const`` equal to the
command's ``Command.schema_version``, bump both when the output changes, and list the change in
README.md's "JSON schemas" section. A node of the old schema with a ``$comment`` (the reason it was
tightened or loosened by hand) is kept as it is, so regenerating never undoes a hand edit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def infer(values: list) -> dict:
    """The schema of every value in ``values`` (as JSON decodes them)."""
    kinds = {TYPES.get(type(v), "object" if isinstance(v, dict) else "array") for v in values}
    if "integer" in kinds and "number" in kinds:
        kinds.discard("integer")
    if kinds == {"null"}:  # seen only missing: any scalar another trace may give
        kinds = {"null", "number", "string", "boolean"}
    schema: dict = {"type": sorted(kinds)[0] if len(kinds) == 1 else sorted(kinds)}
    objects = [v for v in values if isinstance(v, dict)]
    if objects:
        keys = list(dict.fromkeys(k for o in objects for k in o))
        schema["properties"] = {k: infer([o[k] for o in objects if k in o]) for k in keys}
        schema["required"] = [k for k in keys if all(k in o for o in objects)]
        schema["additionalProperties"] = False
    items = [x for v in values if isinstance(v, list) for x in v]
    if items:
        schema["items"] = infer(items)
    return schema


def kept(old: dict | None, new: dict) -> dict:
    """``new`` with every node the ``old`` schema marks with a ``$comment`` (a hand edit) kept as it was."""
    if not isinstance(old, dict):
        return new
    if "$comment" in old:
        return old
    out = dict(new)
    for key in ("properties",):
        if key in new and key in old:
            out[key] = {k: kept(old[key].get(k), v) for k, v in new[key].items()}
    if "items" in new and "items" in old:
        out["items"] = kept(old["items"], new["items"])
    return out


def schema_of(name: str, outputs: list[dict], old: dict | None = None) -> dict:
    """The command's schema: ``infer`` of its outputs, ``schema_version`` a const, hand edits kept."""
    body = kept(old, infer(outputs))
    body["properties"]["schema_version"] = {"const": outputs[0]["schema_version"]}
    head = {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:traceaug:schema:{name}",
            "title": f"traceaug {name} --format json",
            "description": (old or {}).get("description", f"The output of `traceaug {name} --format json`.")}
    return {**head, **body}


def main(names: list[str]) -> None:
    sys.path.insert(0, str(HERE.parent.parent / "tests"))
    from test_schemas import CASES, output

    for name in names or sorted(CASES):
        outputs = [output(name, args) for args in CASES[name]]
        path = HERE / f"{name}.json"
        old = json.loads(path.read_text()) if path.exists() else None
        path.write_text(json.dumps(schema_of(name, outputs, old), indent=2) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
