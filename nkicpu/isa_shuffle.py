"""`nisa.nc_stream_shuffle`: VectorE moves whole partitions within each 32-partition quadrant.

Semantics and constraints from the SDK isa stub (nki/api/nki/isa/__init__.py, nc_stream_shuffle):
output partition i of each quadrant copies input partition shuffle_mask[i] of the same quadrant
(255: left unchanged); dst and src may differ in partition count and start, under the
start-partition rule for ceil(max(partitions) / 32) * 32 active partitions.
"""
import numpy as np

from .errors import rule_error
from .operands import check_dst, on_chip, record, write

QUADRANT = 32
KEEP = 255      # shuffle_mask entry: leave that output partition unchanged


def _start_rule(active):
    return (0,) if active > 64 else (0, 64) if active > 32 else (0, 32, 64, 96)


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    where = "nisa.nc_stream_shuffle"
    on_chip(dst, where, "dst")
    on_chip(src, where, "src")
    if dst.dtype != src.dtype:
        raise rule_error("shuffle-dtype", where, f"dst must have src's dtype {src.dtype.name}, got {dst.dtype.name}")
    if dst.free_size != src.free_size:
        raise rule_error("operand-shape", where, f"dst and src must have the same elements per partition, got "
                                                 f"{dst.free_size} and {src.free_size}")
    mask = list(shuffle_mask)
    if len(mask) != QUADRANT or any(not isinstance(m, (int, np.integer)) or isinstance(m, bool) for m in mask):
        raise rule_error("shuffle-mask", where, f"shuffle_mask must be a list of {QUADRANT} ints, got {shuffle_mask!r}")
    active = -(-max(src.partitions, dst.partitions) // QUADRANT) * QUADRANT
    for t, arg in ((src, "src"), (dst, "dst")):
        start = t.offset // t._alloc.row_elems
        if start not in _start_rule(active):
            raise rule_error("shuffle-start-partition", where,
                             f"{arg} starts at partition {start}; with {active} active partitions the start must be "
                             f"one of {_start_rule(active)}")
    out = np.array(dst.numpy()).reshape(dst.partitions, -1)         # a copy: in-place shuffles read src first
    data = np.array(src.numpy()).reshape(src.partitions, -1)
    for p in range(dst.partitions):
        quadrant, lane = divmod(p, QUADRANT)
        if mask[lane] == KEEP:
            continue
        q = quadrant * QUADRANT + mask[lane]
        if not 0 <= mask[lane] < QUADRANT or q >= src.partitions:
            raise rule_error("shuffle-mask", where, f"shuffle_mask[{lane}] = {mask[lane]} makes dst partition {p} read "
                                                    f"src partition {q}; src has {src.partitions} (entries are 0..31 "
                                                    f"within a quadrant, or {KEEP} to keep dst)")
        out[p] = data[q]
    check_dst(dst, where)
    write(dst, out, cast=False)
    kept = [dst] if KEEP in mask[:min(dst.partitions, QUADRANT)] else []     # partitions left as they were
    return record("nc_stream_shuffle", "vector", [src] + kept, [dst], name=name)
