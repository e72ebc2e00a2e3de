"""The experimental `nl.*` wrappers over `nki.isa`: data movement, copies, reductions, broadcasts,
shared constants and the binary ALU calls (`nl.add(x, y)`, ...).

Each allocates its result tile and issues the nisa instructions it lowers to, so the hardware
rules and the cost of every call live in one place (nkicpu/isa.py). Names, argument order and
defaults follow the Neuron SDK 2.32 stub (nki/api/nki/language/__init__.py); the lowering follows
the SDK where it says (nl.copy: VectorE tensor_copy, NKI 0.6.0 release notes) and is nkicpu's
choice where it does not (said at each function).
"""
import os

import numpy as np

from . import isa as nisa
from .allocate import ndarray
from .errors import not_modeled, rule_error
from .memory import MemoryRegion, check_dtype, dtype_name, is_hbm, is_psum
from .operands import tensor_arg as _tensor
from .ops import OPS, Op
from .run import current_run
from .tensor import NkiTensor


def _new_tile(shape, dtype, like):
    """A new SBUF tile; `dtype=None` means the dtype of `like`."""
    return ndarray(shape, like.dtype if dtype is None else dtype, buffer=MemoryRegion.sbuf)


# -- data movement (one DMA each) -----------------------------------------------------------------

def load(src, dtype=None):
    where = "nl.load"
    if not is_hbm(_tensor(src, where, "src").buffer):
        raise ValueError(f"{where}: src must be an HBM tensor, got {src!r}")
    tile = _new_tile(src.shape, dtype, src)
    nisa.dma_copy(dst=tile, src=src)
    return tile


def store(dst, value):
    where = "nl.store"
    if not is_hbm(_tensor(dst, where, "dst").buffer):
        raise ValueError(f"{where}: dst must be an HBM tensor, got {dst!r}")
    nisa.dma_copy(dst=dst, src=_tensor(value, where, "value"))   # a PSUM value is dma_copy's [dma-psum]


def copy(x, dtype=None):
    """A new SBUF tile with x's layout, by one VectorE tensor_copy (NKI 0.6.0 release notes)."""
    tile = _new_tile(_tensor(x, "nl.copy", "x").shape, dtype, x)
    nisa.tensor_copy(dst=tile, src=x, engine=nisa.engine.vector)
    return tile


# -- reductions along free dims (one VectorE tensor_reduce each) ----------------------------------

def _axes(axis, ndim, where):
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    if not axes or any(not isinstance(a, (int, np.integer)) or not -ndim <= a < ndim for a in axes):
        raise ValueError(f"{where}: axis must be an int or a list of ints in [-{ndim}, {ndim}), got {axis!r}")
    return tuple(sorted(int(a) % ndim for a in axes))


def _reduce(op, x, axis, dtype, keepdims, where):
    _tensor(x, where, "x")
    axes = _axes(axis, x.ndim, where)
    shape = [1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes]
    shape += [1] * (2 - len(shape))   # an on-chip tile is at least 2-D, as under integer indexing
    tile = _new_tile(shape, dtype, x)
    nisa.tensor_reduce(dst=tile, op=op, data=x, axis=axes, keepdims=keepdims)
    return tile


def sum(x, axis, dtype=None, keepdims=False):
    return _reduce(OPS["add"], x, axis, dtype, keepdims, "nl.sum")


def max(x, axis, dtype=None, keepdims=False):
    return _reduce(OPS["maximum"], x, axis, dtype, keepdims, "nl.max")


def min(x, axis, dtype=None, keepdims=False):
    return _reduce(OPS["minimum"], x, axis, dtype, keepdims, "nl.min")


# -- broadcast ------------------------------------------------------------------------------------

def broadcast_to(x, shape, dtype=None):
    """A new SBUF tile of `shape` holding x repeated along its size-1 dims.

    The SDK does not say which instructions nl.broadcast_to emits. nkicpu issues one: a dma_copy
    from a stride-0 view when the partition dim is broadcast (a compute engine lane reads only its
    own partition; a DMA reads any address), else a VectorE tensor_copy from a stride-0 view.
    """
    where = "nl.broadcast_to"
    _tensor(x, where, "x")
    if is_hbm(x.buffer):
        raise ValueError(f"{where}: x must be a tile in SBUF or PSUM, got {x!r}")
    shape = tuple(shape)
    if len(shape) != x.ndim or any(n != m and n != 1 for n, m in zip(x.shape, shape)):
        raise ValueError(f"{where}: shape must have x's rank {x.ndim} and match each dim of x.shape "
                         f"{list(x.shape)} or broadcast it from size 1, got {list(shape)}")
    if shape == x.shape:
        return x if dtype is None or check_dtype(dtype, where) == x.dtype else copy(x, dtype)
    strides = [0 if n != m else s for n, m, s in zip(x.shape, shape, x.strides)]
    view = x._view(shape, strides)
    tile = _new_tile(shape, dtype, x)
    if shape[0] == x.shape[0]:
        nisa.tensor_copy(dst=tile, src=view, engine=nisa.engine.vector)
    elif is_psum(x.buffer):
        raise not_modeled("nl.broadcast_to across partitions from PSUM (a DMA cannot read PSUM; the SDK does not "
                          "say what it emits)")
    else:
        nisa.dma_copy(dst=tile, src=view)
    return tile


# -- allocation and constants ---------------------------------------------------------------------

def empty_like(x, dtype=None, buffer=None, name=""):
    _tensor(x, "nl.empty_like", "x")
    return ndarray(x.shape, x.dtype if dtype is None else dtype, buffer=x.buffer if buffer is None else buffer,
                   name=name)


# The element types shared_constant supports (SDK 2.32 stub); packed types and tfloat32 are "not
# yet tested end-to-end on hardware" there, and nkicpu has no float8_e8m0fnu.
SHARED_CONSTANT_DTYPES = {"float32", "float16", "bfloat16", "int32", "int16", "int8", "uint32", "uint16", "uint8",
                          "float8_e4m3fn", "float8_e5m2"}


def _constant(array, name, where):
    """A shared-HBM tensor holding `array`. The data is in HBM when the kernel starts (embedded in
    the compiled binary), so no instruction is recorded; in a launch grid every program gets the
    same storage and must pass the same data."""
    dt = check_dtype(array.dtype, where)
    if dtype_name(dt) not in SHARED_CONSTANT_DTYPES:
        raise TypeError(f"{where}: the constant's dtype must be one of {sorted(SHARED_CONSTANT_DTYPES)}, got "
                        f"{dtype_name(dt)}")
    t = ndarray(array.shape or (1,), dt, buffer=MemoryRegion.shared_hbm, name=name)
    values = np.ascontiguousarray(array, dtype=dt).reshape(-1)
    data = t._alloc.data
    if current_run(where).core == 0:
        data[...] = values
    elif data.tobytes() != values.tobytes():
        raise rule_error("lnc-shared-hbm", where, f"{name} differs from program 0's; a shared constant is one tensor "
                                                  f"for all programs of a launch grid, and its data must not diverge")
    return t


def shared_constant(constant):
    where = "nl.shared_constant"
    if isinstance(constant, (str, os.PathLike)):
        array = np.load(constant)   # a .npy file; pickled objects are refused (allow_pickle=False)
    elif isinstance(constant, np.ndarray):
        array = constant
    else:
        raise TypeError(f"{where}: constant must be a NumPy array or the path of a .npy file, got "
                        f"{type(constant).__name__}")
    return _constant(array, "shared_constant", where)


def shared_identity_matrix(n, dtype=np.uint8, dst=None):
    """An [n, n] identity in a new SBUF tile: a shared constant (as the SDK describes it) moved in by
    one dma_copy. The compiler's reuse of identities of one dtype across a kernel is not modeled:
    every call issues its DMA."""
    where = "nl.shared_identity_matrix"
    if dst is not None:
        raise not_modeled("nl.shared_identity_matrix(dst=...) (the SDK does not document dst)")
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{where}: n must be a positive int, got {n!r}")
    dt = check_dtype(dtype, where)
    identity = _constant(np.eye(n).astype(dt), f"identity{n}_{dtype_name(dt)}", where)
    tile = _new_tile((n, n), dt, identity)
    nisa.dma_copy(dst=tile, src=identity)
    return tile


# -- binary ALU calls: nl.add(x, y, dtype=None), ... ----------------------------------------------

def binary(op, x, y, dtype=None):
    """`nl.<op>(x, y)`: one VectorE tensor_tensor for two tiles of one shape, one tensor_scalar for a
    tile and a number. The wrappers do not broadcast, and nl.power takes no number (NKI 0.3.0 to
    0.6.0 release notes, "Known Issues")."""
    where = f"nl.{op.name}"
    tx, ty = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    if not (tx or ty):
        raise TypeError(f"{where}: x or y must be a tile (NkiTensor), got {type(x).__name__} and {type(y).__name__}")
    if tx and ty:
        if x.shape != y.shape:
            raise ValueError(f"{where}: x and y must have one shape (the nl wrappers do not broadcast), got "
                             f"{list(x.shape)} and {list(y.shape)}")
        if dtype is None and x.dtype != y.dtype:
            raise not_modeled(f"{where} of {dtype_name(x.dtype)} and {dtype_name(y.dtype)} tiles without dtype= "
                              f"(the SDK does not document the result dtype)")
        tile = _new_tile(x.shape, dtype, x)
        nisa.tensor_tensor(dst=tile, data1=x, data2=y, op=op)
        return tile
    if op.name == "power":
        raise ValueError(f"{where}: the exponent and base must both be tiles; nl.power(tile, scalar) is not "
                         f"supported (NKI release notes)")
    data = x if tx else y
    tile = _new_tile(data.shape, dtype, data)
    nisa.tensor_scalar(dst=tile, data=data, op0=op, operand0=y if tx else x, reverse0=not tx)
    return tile


def call(op, *args, **kwargs):
    """What calling an `nl.*` operator object does (nkicpu.ops.Op.__call__): nl.copy(x) copies, a
    binary operator computes; the other unary wrappers (nl.exp(x), ...) are not modeled."""
    if op.name == "copy":
        return copy(*args, **kwargs)
    if op.unary:
        raise not_modeled(f"the experimental unary nl.{op.name}(x) wrapper; pass nl.{op.name} as op= to a nisa call")
    return binary(op, *args, **kwargs)


# Calling an operator object, nl.add(x, y), runs `call` (nkicpu.ops.Op.__call__).
Op.wrapper = call
