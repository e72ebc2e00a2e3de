"""`nisa.tensor_tensor_scan`: a first-order recurrence along the free dim on VectorE.

Semantics, operand rules and defaults from the SDK isa stub (nki/api/nki/isa/__init__.py,
tensor_tensor_scan): per partition, r[0] = op1(op0(data0[0], initial), data1[0]) and
r[i] = op1(op0(data0[i], r[i-1]), data1[i]), in fp32, each r rounded once to dst.dtype.
"""
import numpy as np

from .errors import rule_error
from .isa import F32, _dst, _on_chip, _op, _pf, _record, _same_layout, _same_start_partition, _scalar_operand, _write
from .memory import is_psum
from .tensor import NkiTensor


def _binary_arithmetic(op, where, arg):
    _op(op, where, arg)
    if op.unary or op.bitvec:
        raise rule_error("alu-op", where, f"{arg}={op!r} must be a binary arithmetic operator")
    return op


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    where = "nisa.tensor_tensor_scan"
    _binary_arithmetic(op0, where, "op0")
    _binary_arithmetic(op1, where, "op1")
    for t, arg in ((dst, "dst"), (data0, "data0"), (data1, "data1")):
        _on_chip(t, where, arg)
    _same_layout(data0, data1, where, "data0", "data1")
    _same_layout(dst, data0, where, "dst", "data0")
    if is_psum(data0.buffer) and is_psum(data1.buffer):
        raise rule_error("psum-operands", where, "data0 and data1 cannot both be in PSUM")
    # The docs take initial as an fp32 constant or a tile with one element per partition (any dtype).
    state = np.broadcast_to(_scalar_operand(initial, data0, where, "initial", fp32=False), (data0.partitions, 1))
    _same_start_partition(where, data0=data0, data1=data1, initial=initial)
    _dst(dst, where)
    a, b = _pf(data0), _pf(data1)
    out = np.empty_like(a)
    state = np.asarray(state, dtype=F32)[:, 0]
    for i in range(a.shape[1]):   # the engine keeps the running state in fp32
        x = np.asarray(op0.fn(state, a[:, i]) if reverse0 else op0.fn(a[:, i], state), dtype=F32)
        state = np.asarray(op1.fn(b[:, i], x) if reverse1 else op1.fn(x, b[:, i]), dtype=F32)
        out[:, i] = state
    _write(dst, out)
    reads = [data0, data1] + ([initial] if isinstance(initial, NkiTensor) else [])
    return _record("tensor_tensor_scan", "vector", reads, [dst], op0=op0.name, op1=op1.name, name=name)
