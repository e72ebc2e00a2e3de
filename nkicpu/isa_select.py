"""Selection instructions: `affine_select` (GpSimd: keep a tile where an iota-like affine
predicate holds, else a constant) and `tensor_copy_predicated` (VectorE: copy where a mask is set).

Signatures, defaults, placement and dtype rules from the SDK isa stub (nki/api/nki/isa/__init__.py).
"""
import numpy as np

from .errors import rule_error
from .memory import is_psum, is_sbuf
from .operands import (F32, cast_to, check_dst, fp32_rows, on_chip, record, same_layout,
                       same_start_partition, write)
from .ops import OPS, Op
from .tensor import NkiTensor

CMP_OPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")


def _affine_values(pattern, offset, channel_multiplier, partitions, where):
    """offset + p * channel_multiplier + sum_k i_k * step_k, as int64, [partitions, elements per partition]."""
    pattern = [list(p) for p in pattern]
    if not 1 <= len(pattern) <= 4 or any(len(p) != 2 for p in pattern):
        raise ValueError(f"{where}: pattern must have 1 to 4 [step, num] pairs, got {pattern}")
    values = np.zeros([n for _, n in pattern], dtype=np.int64) + offset
    for d, (step, n) in enumerate(pattern):
        shape = [1] * len(pattern)
        shape[d] = n
        values = values + (np.arange(n) * step).reshape(shape)
    return values.reshape(1, -1) + (np.arange(partitions) * channel_multiplier)[:, None]


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=OPS["equal"], offset=0,
                  name=None):
    where = "nisa.affine_select"
    if not isinstance(cmp_op, Op) or cmp_op.name not in CMP_OPS:
        raise rule_error("alu-op", where, f"cmp_op must be a comparison (nl.{', nl.'.join(CMP_OPS)}), got {cmp_op!r}")
    on_chip(dst, where, "dst")
    on_chip(on_true_tile, where, "on_true_tile")
    if not (is_sbuf(dst.buffer) and is_sbuf(on_true_tile.buffer)):
        raise rule_error("gpsimd-psum", where, "affine_select runs on GpSimd: dst and on_true_tile must be in SBUF")
    same_layout(dst, on_true_tile, where, "dst", "on_true_tile")
    if isinstance(on_false_value, (bool, np.bool_)) or not isinstance(on_false_value, (int, float, np.number)):
        raise TypeError(f"{where}: on_false_value must be a number (taken as float32), got {on_false_value!r}")
    values = _affine_values(pattern, offset, channel_multiplier, dst.partitions, where)
    if values.shape[1] != dst.free_size:
        raise rule_error("operand-shape", where, f"pattern counts make {values.shape[1]} elements per partition; dst "
                                                 f"has {dst.free_size}")
    check_dst(dst, where)
    keep = cmp_op.fn(values.astype(np.int32), np.int32(0)) != 0
    if dst.dtype == on_true_tile.dtype:   # a selected element is copied as it is; else through fp32
        fill = cast_to(np.asarray([F32(on_false_value)]), dst.dtype)[0]
        write(dst, np.where(keep, np.asarray(on_true_tile.numpy()).reshape(dst.partitions, -1), fill), cast=False)
    else:
        write(dst, np.where(keep, fp32_rows(on_true_tile), F32(on_false_value)))
    return record("affine_select", "gpsimd", [on_true_tile], [dst], cmp_op=cmp_op.name, name=name)


PREDICATE_DTYPES = ("uint8", "uint16", "uint32")


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    where = "nisa.tensor_copy_predicated"
    on_chip(dst, where, "dst")
    on_chip(predicate, where, "predicate")
    same_layout(dst, predicate, where, "dst", "predicate")
    if predicate.dtype.name not in PREDICATE_DTYPES:
        raise rule_error("predicate-dtype", where, f"predicate must be {', '.join(PREDICATE_DTYPES)}, got "
                                                   f"{predicate.dtype.name}")
    if isinstance(src, NkiTensor):
        on_chip(src, where, "src")
        same_layout(dst, src, where, "dst", "src")
        if is_psum(src.buffer) and is_psum(predicate.buffer):
            raise rule_error("psum-operands", where, "src and predicate cannot both be in PSUM")
        if src.dtype != dst.dtype:
            raise rule_error("predicated-dtype", where, f"src and dst must share a dtype, got {src.dtype.name} -> "
                                                        f"{dst.dtype.name}")
        same_start_partition(where, src=src, predicate=predicate)
        values = np.asarray(src.numpy()).reshape(dst.partitions, -1)
    elif isinstance(src, (int, float, np.number)) and not isinstance(src, (bool, np.bool_)):
        values = cast_to(np.full((dst.partitions, dst.free_size), src, dtype=F32), dst.dtype)
    else:
        raise TypeError(f"{where}: src must be an NkiTensor or a number, got {type(src).__name__}")
    check_dst(dst, where)
    mask = np.asarray(predicate.numpy()).reshape(dst.partitions, -1) != 0
    if reverse_pred:
        mask = ~mask
    old = np.asarray(dst.numpy()).reshape(dst.partitions, -1)
    write(dst, np.where(mask, values, old), cast=False)
    reads = ([src] if isinstance(src, NkiTensor) else []) + [predicate, dst]   # unselected elements keep dst
    return record("tensor_copy_predicated", "vector", reads, [dst], reverse_pred=bool(reverse_pred), name=name)
