"""Peak throughput and memory bandwidth per GPU (``data/peaks.json``, each row citing its datasheet), found
by a trace's ``deviceProperties`` name, or by its properties when the name says nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceaugError

GENERIC_NAMES = ("", "AMD Radeon Graphics")  # names ROCm gives any part: identified by properties
HOW_TO = ("no peaks for {what}, so no % of roofline: give them with --peaks FILE (JSON: "
          "{{\"devices\": [{{\"names\": [\"<deviceProperties name>\"], \"memory_gbps\": ..., "
          "\"bf16_matrix\": ..., ...}}]}})")


@dataclass(frozen=True)
class Peak:
    """One device's peaks: TFLOP/s per compute kind, memory GB/s, the row's name, its source and how it
    was found (by name, by properties, or from --peaks)."""

    device: str
    tflops: dict[str, float]
    memory_gbps: float
    source: str
    found_by: str

    def compute(self, kind: str) -> float | None:
        """The peak (TFLOP/s) for ``kind`` (``bf16_matrix``...): a matrix kind without matrix units
        runs on the vector ones; an integer or unknown vector kind against FP32's vector peak."""
        dtype, unit = kind.rsplit("_", 1)
        for k in (kind, "fp32_vector" if unit == "vector" else f"{dtype}_vector"):
            if self.tflops.get(k):
                return self.tflops[k]
        return None


def table(extra: str | Path | None = None) -> list[dict]:
    """The shipped rows, with ``extra`` (``--peaks FILE``) first: its rows win."""
    shipped = Path(__file__).parent.parent / "data" / "peaks.json"  # (importlib.resources imports zipfile)
    rows = json.loads(shipped.read_text())["devices"]
    if extra is None:
        return rows
    try:
        data = json.loads(Path(extra).read_text())
        added = data["devices"] if isinstance(data, dict) else data
        if not isinstance(added, list) or not all(isinstance(r, dict) and r.get("names") is not None
                                                  and "memory_gbps" in r for r in added):
            raise ValueError("each device needs names and memory_gbps")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TraceaugError(f"{extra}: not a peak table ({e})") from None
    return [{"source": str(extra), **r, "from_file": True} for r in added] + rows


def _peak(row: dict, found_by: str) -> Peak:
    per = row.get("per_device", 1)
    tflops = {k: v / per for k, v in row.items()
              if k.endswith(("_matrix", "_vector")) and isinstance(v, (int, float))}
    return Peak(row.get("device", row["names"][0] if row["names"] else "?"), tflops,
                row["memory_gbps"] / per, row.get("source", ""), found_by)


def identify(props: dict, rows: list[dict]) -> Peak | None:
    """The peaks of the device ``props`` describes: the row naming it; for a generic or empty name the one
    row whose ``match`` properties it has (none or several: unknown)."""
    name = str(props.get("name") or "")
    if name not in GENERIC_NAMES:
        for row in rows:
            if name in row["names"]:
                how = "--peaks" if row.get("from_file") else "name"
                return _peak(row, how)
        return None
    found = [r for r in rows if r.get("match") and all(props.get(k) == v for k, v in r["match"].items())]
    if len(found) != 1:
        return None
    what = ", ".join(f"{k}={v}" for k, v in found[0]["match"].items())
    return _peak(found[0], f"properties ({what}; name {name!r})")


def unknown_note(props: dict) -> str:
    """The one line said for a device with no peaks."""
    what = repr(props.get("name") or "a device with no name") if props else \
        "this trace's GPU (no deviceProperties)"
    return HOW_TO.format(what=what)
