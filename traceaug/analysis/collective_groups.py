"""A rank's collectives by process group in matching order (GPU order, or by seq when every instance has one
on every rank): the partition ``collectives.match`` and ``collective_windows`` share."""

from __future__ import annotations

import numpy as np
import pandas as pd


def stream_ids(colls: pd.DataFrame) -> set:
    """The NCCL streams of a rank's collectives that carry no process group."""
    bare = colls["pg_name"].isna() & colls["stream"].notna()
    return set(colls.loc[bare, "stream"].tolist())


def group_keys(colls: pd.DataFrame, by_id: bool) -> tuple[list[str], dict[str, str]]:
    """Each collective's group key on a rank and each key's label: its process group, else its NCCL stream
    (``by_id``: its id, when every rank uses the same ones; else the rank's i-th stream), else "all"."""
    keys, labels, streams = [], {}, {}
    for pg, desc, dev, stream in zip(colls["pg_name"].tolist(), colls["pg_desc"].tolist(),
                                     colls["device"].tolist(), colls["stream"].tolist()):
        if isinstance(pg, str) or (pg is not None and pg == pg):
            key = f"pg {pg}"
            labels[key] = f"pg {pg}" + (f" ({desc})" if isinstance(desc, str) and desc else "")
        elif stream is not None and stream == stream:
            i = streams.setdefault((dev, stream), len(streams))
            key = f"stream {stream}" if by_id else f"stream#{i}"
            labels[key] = f"stream {stream}"
        else:
            key = "all"
            labels[key] = "all ranks"
        keys.append(key)
    return keys, labels


def has_seqs(seqs: np.ndarray) -> bool:
    """Whether a rank's instances of a group all carry a sequence number (and it has some)."""
    return bool(len(seqs)) and all(v is not None and v is not pd.NA for v in seqs)


def seq_order(seqs: np.ndarray) -> np.ndarray:
    """The positions of ``seqs`` (all present) in sequence order, ties in GPU order."""
    return np.argsort(np.array([int(v) for v in seqs]), kind="stable")


def predecessors(colls: pd.DataFrame) -> set[tuple[int, int]]:
    """Every (row, previous row of its group; -1 for a group's first) matching may pair on this rank: groups
    keyed by stream id and by stream order, each in GPU order and, where all instances have one, seq order."""
    out: set[tuple[int, int]] = set()
    for by_id in (True, False):
        rows: dict[str, list[int]] = {}
        for i, k in enumerate(group_keys(colls, by_id)[0]):
            rows.setdefault(k, []).append(i)
        for mine in rows.values():
            orders = [mine]
            seqs = colls["seq"].to_numpy(dtype=object)[mine]  # (None / NA where a row has none)
            if has_seqs(seqs):
                orders.append([mine[i] for i in seq_order(seqs)])
            for order in orders:
                out.update(zip(order, [-1, *order[:-1]]))
    return out
