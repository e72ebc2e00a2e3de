"""`nisa.tensor_tensor_scan`: a first-order recurrence along the free dim on VectorE.

Semantics, operand rules and defaults from the SDK isa stub (nki/api/nki/isa/__init__.py,
tensor_tensor_scan): per partition, r[0] = op1(op0(data0[0], initial), data1[0]) and
r[i] = op1(op0(data0[i], r[i-1]), data1[i]), in fp32, each r rounded once to dst.dtype.
"""
import numpy as np

from .errors import rule_error
from .operands import (F32, binary_operands, check_dst, check_op, fp32_rows, record,
                       same_start_partition, scalar_operand, write)
from .tensor import NkiTensor


def _binary_arithmetic(op, where, arg):
    check_op(op, where, arg)
    if op.unary or op.bitvec:
        raise rule_error("alu-op", where, f"{arg}={op!r} must be a binary arithmetic operator")
    return op


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    where = "nisa.tensor_tensor_scan"
    _binary_arithmetic(op0, where, "op0")
    _binary_arithmetic(op1, where, "op1")
    binary_operands(where, dst, data0, data1, "data0", "data1")
    # The docs take initial as an fp32 constant or a tile with one element per partition (any dtype).
    state = np.broadcast_to(scalar_operand(initial, data0, where, "initial", fp32=False), (data0.partitions, 1))
    same_start_partition(where, data0=data0, data1=data1, initial=initial)
    check_dst(dst, where)
    a, b = fp32_rows(data0), fp32_rows(data1)
    out = np.empty_like(a)
    state = np.asarray(state, dtype=F32)[:, 0]
    for i in range(a.shape[1]):   # the engine keeps the running state in fp32
        x = np.asarray(op0.fn(state, a[:, i]) if reverse0 else op0.fn(a[:, i], state), dtype=F32)
        state = np.asarray(op1.fn(b[:, i], x) if reverse1 else op1.fn(x, b[:, i]), dtype=F32)
        out[:, i] = state
    write(dst, out)
    reads = [data0, data1] + ([initial] if isinstance(initial, NkiTensor) else [])
    return record("tensor_tensor_scan", "vector", reads, [dst], op0=op0.name, op1=op1.name, name=name)
