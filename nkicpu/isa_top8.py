"""Top-8 search on VectorE: `max8` (the 8 largest values of each partition, descending) and
`nc_find_index8` (where 8 given values first occur in each partition), the pair top-k routers use.

Signatures and limits from the SDK isa stub (nki/api/nki/isa/__init__.py). The stub names no engine
for these two; VectorE is an estimate (they are per-partition streaming searches, VectorE's kind of
work, and nki-library's router_topk interleaves them with VectorE tensor_copy calls).
"""
import numpy as np

from .errors import rule_error
from .operands import check_dst, fp32_rows, on_chip, record, same_start_partition, write

TOP8_MIN, TOP8_MAX = 8, 16384          # elements read per partition, inclusive
INDEX8_DTYPES = ("uint16", "uint32")


def _searched(t, where, arg):
    on_chip(t, where, arg)
    if not TOP8_MIN <= t.free_size <= TOP8_MAX:
        raise rule_error("top8-size", where, f"{arg} must have {TOP8_MIN} to {TOP8_MAX} elements per partition, got "
                                             f"{t.free_size} ({list(t.shape)})")
    return t


def _eight(t, partitions, where, arg):
    if t.partitions != partitions or t.free_size != 8:
        raise rule_error("operand-shape", where, f"{arg} must be [{partitions}, 8], got {list(t.shape)}")


def max8(dst, src, name=None):
    where = "nisa.max8"
    _searched(src, where, "src")
    on_chip(dst, where, "dst")
    _eight(dst, src.partitions, where, "dst")
    check_dst(dst, where)
    write(dst, -np.sort(-fp32_rows(src), axis=1)[:, :8])
    return record("max8", "vector", [src], [dst], name=name)


def nc_find_index8(dst, data, vals, name=None):
    where = "nisa.nc_find_index8"
    _searched(data, where, "data")
    on_chip(vals, where, "vals")
    on_chip(dst, where, "dst")
    _eight(vals, data.partitions, where, "vals")
    _eight(dst, data.partitions, where, "dst")
    if dst.dtype.name not in INDEX8_DTYPES:
        raise rule_error("top8-dtype", where, f"dst holds indices: uint16 or uint32, got {dst.dtype.name}")
    same_start_partition(where, data=data, vals=vals)
    check_dst(dst, where)
    x, v = fp32_rows(data), fp32_rows(vals)                     # compared as fp32, like every VectorE input
    hit = x[:, None, :] == v[:, :, None]            # [P, 8, n]
    first = hit.argmax(axis=2)
    missing = np.iinfo(dst.dtype).max               # "an all-ones sentinel" where a value is absent
    write(dst, np.where(hit.any(axis=2), first, missing).astype(dst.dtype), cast=False)
    return record("nc_find_index8", "vector", [data, vals], [dst], name=name)
