"""VectorE instructions that reduce into the engine's accumulator registers, and GpSimd's
cross-partition reduction.

`tensor_scalar_reduce` and `range_select` share VectorE's per-lane accumulator registers (SDK isa
stub, tensor_scalar_reduce: "The accumulator registers are shared across Vector Engine
accumulation instructions"); `reduce_cmd` resets, continues or loads them, and `reduce_res`
(optional) reads them out. Signatures and defaults from the SDK isa stub (nki/api/nki/isa/__init__.py).
"""
import numpy as np

from .errors import not_modeled, rule_error
from .isa_enums import REDUCE_CMD, check_enum, reduce_cmd
from .memory import DTYPES, is_float, is_sbuf
from .operands import (F32, bitvec_dtypes, check_dst, check_op, fp32_rows, on_chip, record, same_layout,
                       same_start_partition, scalar_operand, write)
from .ops import OPS, Op
from .run import current_run
from .tensor import NkiTensor

# The identity a reset_reduce loads for each reduction (tensor_scalar_reduce docs).
REDUCE_IDENTITY = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def _lanes(data):
    """The accumulator lanes an operand drives: one per partition, from its start partition."""
    p0 = data.offset // data._alloc.row_elems
    return slice(p0, p0 + data.partitions)


def _accumulate(values, reduce_op, cmd, reduce_init, data, where):
    """Run reduce_cmd on VectorE's accumulators for `values` ([P, n] fp32) and return the lanes' values."""
    regs = current_run(where).vector_reduce_regs
    lanes = _lanes(data)
    if cmd == REDUCE_CMD.reset_reduce:
        regs[lanes] = REDUCE_IDENTITY[reduce_op.name]
    elif cmd == REDUCE_CMD.load_reduce:
        regs[lanes] = reduce_init[:, 0]
    elif cmd != REDUCE_CMD.reduce:
        raise not_modeled(f"{where} reduce_cmd={cmd.name}")
    regs[lanes] = reduce_op.fn(regs[lanes], reduce_op.reduce.reduce(values, axis=1, dtype=F32))
    return regs[lanes].copy()


def _reduce_res(reduce_res, data, where):
    on_chip(reduce_res, where, "reduce_res")
    if reduce_res.partitions != data.partitions or reduce_res.free_size != 1:
        raise rule_error("operand-shape", where, f"reduce_res must be a [{data.partitions}, 1] tile, got "
                                                 f"{list(reduce_res.shape)}")
    check_dst(reduce_res, where)


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None):
    where = "nisa.tensor_scalar_reduce"
    check_op(op0, where, "op0")
    if op0.bitvec:
        raise rule_error("alu-op", where, f"op0={op0!r}: bitvec operators are not supported here")
    check_op(reduce_op, where, "reduce_op")
    if reduce_op.name not in REDUCE_IDENTITY:
        raise rule_error("reduce-op", where, f"reduce_op must be nl.add, nl.multiply, nl.maximum or nl.minimum, "
                                             f"got {reduce_op!r}")
    if reverse0:
        raise not_modeled("tensor_scalar_reduce reverse0=True (documented as not supported yet)")
    cmd = check_enum(reduce_cmd, "reduce_cmd", where)
    if (reduce_init is not None) != (cmd == REDUCE_CMD.load_reduce):
        raise ValueError(f"{where}: reduce_init must be given exactly when reduce_cmd is load_reduce, got "
                         f"reduce_cmd={cmd.name}, reduce_init={reduce_init!r}")
    on_chip(dst, where, "dst")
    on_chip(data, where, "data")
    same_layout(dst, data, where, "dst", "data")
    if op0.unary and operand0 not in (None, 0):
        raise ValueError(f"{where}: operand0 must be None or 0 for the unary op0={op0!r}, got {operand0!r}")
    val = None if op0.unary else scalar_operand(operand0, data, where, "operand0")
    init = None if reduce_init is None else scalar_operand(reduce_init, data, where, "reduce_init")
    same_start_partition(where, data=data, operand0=operand0, reduce_init=reduce_init)
    check_dst(dst, where)
    x = fp32_rows(data)
    y = np.asarray(op0.fn(x) if op0.unary else op0.fn(x, val), dtype=F32)
    # The reduction runs on the fp32 result, before it is rounded to dst.dtype (estimate: the docs
    # write reduce_op(dst), but the engine computes in fp32 and rounds only on the way out).
    acc = _accumulate(y, reduce_op, cmd, None if init is None else np.broadcast_to(init, (data.partitions, 1)),
                      data, where)
    write(dst, y)
    writes = [dst]
    if reduce_res is not None:
        _reduce_res(reduce_res, data, where)
        write(reduce_res, -acc if reduce_res_negate else acc)
        writes.append(reduce_res)
    reads = [data] + [t for t in (operand0, reduce_init) if isinstance(t, NkiTensor)]
    return record("tensor_scalar_reduce", "vector", reads, writes, op0=op0.name, reduce_op=reduce_op.name,
                   reduce_cmd=cmd.name, name=name)


# range_select's documented limits (SDK isa stub, range_select).
RANGE_SELECT_CMP = ("equal", "less", "less_equal", "greater", "greater_equal")
RANGE_SELECT_FILL = float(np.finfo(F32).min)      # "this must be FP32_MIN (-3.4028235e+38)"
RANGE_SELECT_INDEX_MAX = 2 ** 24                  # range_start + free index is compared in fp32


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.reset_reduce,
                 reduce_res=None, reduce_op=OPS["maximum"],
                 range_start=0, on_false_value=RANGE_SELECT_FILL, name=None):
    where = "nisa.range_select"
    for op, arg in ((comp_op0, "comp_op0"), (comp_op1, "comp_op1")):
        if not isinstance(op, Op) or op.name not in RANGE_SELECT_CMP:
            raise rule_error("range-select-op", where, f"{arg} must be one of nl.{', nl.'.join(RANGE_SELECT_CMP)}, "
                                                       f"got {op!r}")
    if not isinstance(reduce_op, Op) or reduce_op.name != "maximum":
        raise rule_error("range-select-op", where, f"reduce_op must be nl.maximum (the only one supported), got "
                                                   f"{reduce_op!r}")
    if on_false_value != RANGE_SELECT_FILL:
        raise rule_error("range-select-fill", where, f"on_false_value must be FP32_MIN ({RANGE_SELECT_FILL!r}) on the "
                                                     f"hardware, got {on_false_value!r}")
    for t, arg in ((dst, "dst"), (on_true_tile, "on_true_tile"), (bound0, "bound0"), (bound1, "bound1")):
        on_chip(t, where, arg)
    same_layout(dst, on_true_tile, where, "dst", "on_true_tile")
    if not is_float(on_true_tile.dtype):
        raise rule_error("range-select-dtype", where, f"on_true_tile must have a float dtype, got "
                                                      f"{on_true_tile.dtype.name}")
    for t, arg in ((bound0, "bound0"), (bound1, "bound1")):
        if t.partitions != on_true_tile.partitions or t.free_size != 1 or t.dtype != DTYPES["float32"]:
            raise rule_error("range-select-dtype", where, f"{arg} must be a float32 [{on_true_tile.partitions}, 1] "
                                                          f"tile, got {list(t.shape)} {t.dtype.name}")
    if not isinstance(range_start, (int, np.integer)) or isinstance(range_start, bool):
        raise TypeError(f"{where}: range_start must be a compile-time int, got {range_start!r}")
    last = range_start + on_true_tile.free_size - 1
    if max(abs(range_start), abs(last)) > RANGE_SELECT_INDEX_MAX:
        raise rule_error("range-select-index", where, f"range_start + free index spans {range_start}..{last}; it is "
                                                      f"compared in fp32 and must stay within 2^24")
    same_start_partition(where, on_true_tile=on_true_tile, bound0=bound0, bound1=bound1)
    cmd = check_enum(reduce_cmd, "reduce_cmd", where)
    check_dst(dst, where)
    index = (range_start + np.arange(on_true_tile.free_size, dtype=np.int64)).astype(F32)[None, :]
    mask = (comp_op0.fn(index, fp32_rows(bound0)) != 0) & (comp_op1.fn(index, fp32_rows(bound1)) != 0)
    y = np.where(mask, fp32_rows(on_true_tile), F32(on_false_value))
    acc = _accumulate(y, reduce_op, cmd, None, on_true_tile, where)
    write(dst, y)
    writes = [dst]
    if reduce_res is not None:
        _reduce_res(reduce_res, on_true_tile, where)
        write(reduce_res, acc)
        writes.append(reduce_res)
    return record("range_select", "vector", [on_true_tile, bound0, bound1], writes, reduce_cmd=cmd.name, name=name)


# tensor_partition_reduce's operators (SDK isa stub: "add, average, max, bitwise_or, bitwise_and").
PARTITION_REDUCE_OPS = ("add", "maximum", "bitwise_or", "bitwise_and")


def tensor_partition_reduce(dst, op, data, name=None):
    where = "nisa.tensor_partition_reduce"
    check_op(op, where, "op")
    if op.name not in PARTITION_REDUCE_OPS:
        raise rule_error("reduce-op", where, f"op must be one of nl.{', nl.'.join(PARTITION_REDUCE_OPS)}, got {op!r}")
    on_chip(dst, where, "dst")
    on_chip(data, where, "data")
    if not (is_sbuf(dst.buffer) and is_sbuf(data.buffer)):
        raise rule_error("gpsimd-psum", where, "tensor_partition_reduce runs on GpSimd, which cannot access PSUM")
    if dst.partitions != 1 or dst.free_size != data.free_size:
        raise rule_error("operand-shape", where, f"dst must be one partition of data's {data.free_size} elements, "
                                                 f"[1, ...], got {list(dst.shape)}")
    check_dst(dst, where)
    if op.bitvec:
        bitvec_dtypes(op, (dst, data), where)
        raw = np.asarray(data.numpy()).reshape(data.partitions, -1)
        write(dst, op.reduce.reduce(raw, axis=0)[None, :].astype(dst.dtype), cast=False)
    else:
        write(dst, op.reduce.reduce(fp32_rows(data), axis=0, dtype=F32)[None, :])
    return record("tensor_partition_reduce", "gpsimd", [data], [dst], op=op.name, name=name)
