"""Indirect (dynamic) access patterns: `t.ap(pattern, scalar_offset=...)` and
`t.ap(pattern, vector_offset=..., indirect_dim=0)`, the DMA gather of the SDK `dma_copy` docs.

Semantics from the SDK migration guide (nki/migration/index.rst, "Dynamic access pattern"): the
offset is in rows of the base tensor's `indirect_dim`, so element (i0, i1, ...) of the access is
`flat[offset + row * prod(base.shape[indirect_dim+1:]) + sum_k i_k * step_k]` with `row` the 1x1
SBUF `scalar_offset`; with a `vector_offset` ((P, 1) SBUF indices, indirect_dim 0 only), partition
i0 reads row `vector_offset[i0]` and the pattern's first step is ignored. The indexed tensor must be
in HBM (dma_copy docs). Indices are read when the DMA runs; one out of range raises (oob_mode=error).

nkicpu models the gather (an indirect `src`); an indirect `dst` (scatter) is not modeled. For the
cost model the access is recorded at its pattern without the dynamic rows: its bytes and
contiguous runs are exact, the rows it touches are not.
"""
import math

import numpy as np

from .errors import not_modeled, rule_error
from .memory import is_float, is_hbm, is_sbuf


class Indirection:
    def __init__(self, index, dim, row_elems, rows, vector):
        self.index, self.dim, self.row_elems, self.rows, self.vector = index, dim, row_elems, rows, vector

    def rows_read(self):
        """The dynamic row of each partition (vector) or of the whole access (scalar), as int64."""
        rows = np.asarray(self.index.numpy()).reshape(-1).astype(np.int64)
        bad = rows[(rows < 0) | (rows >= self.rows)]
        if bad.size:
            raise IndexError(f"indirect access: index {int(bad[0])} is outside dim {self.dim} of the base tensor "
                             f"({self.rows} rows; oob_mode=error)")
        return rows


def make(tensor, pattern, scalar_offset, vector_offset, indirect_dim):
    """Check the dynamic arguments of `tensor.ap(...)` and return their `Indirection`."""
    where = f"{tensor.name}.ap"
    if scalar_offset is not None and vector_offset is not None:
        raise ValueError(f"{where}: scalar_offset and vector_offset are mutually exclusive")
    if not is_hbm(tensor.buffer):
        raise rule_error("indirect-hbm", where, f"an indirect access indexes a tensor in HBM, got {tensor.buffer.name}")
    base = tensor._alloc.shape
    if not 0 <= indirect_dim < len(base):
        raise ValueError(f"{where}: indirect_dim {indirect_dim} is not a dim of the base tensor {list(base)}")
    index = vector_offset if vector_offset is not None else scalar_offset
    arg = "vector_offset" if vector_offset is not None else "scalar_offset"
    if not hasattr(index, "_alloc"):
        raise not_modeled(f".ap({arg}={type(index).__name__}) (a register offset); pass a 1x1 SBUF tile")
    if not is_sbuf(index.buffer) or is_float(index.dtype):
        raise rule_error("indirect-index", where, f"{arg} must be an integer tile in SBUF, got {index.dtype.name} in "
                                                  f"{index.buffer.name}")
    if vector_offset is not None:
        if indirect_dim != 0:
            raise rule_error("indirect-index", where, f"vector_offset supports indirect_dim=0 only, got {indirect_dim}")
        if index.free_size != 1 or index.partitions != pattern[0][1]:
            raise rule_error("indirect-index", where, f"vector_offset must be [{pattern[0][1]}, 1] (one row per "
                                                      f"partition of the pattern), got {list(index.shape)}")
    elif index.partitions != 1 or index.free_size != 1:
        raise rule_error("indirect-index", where, f"scalar_offset must be a 1x1 tile, got {list(index.shape)}")
    return Indirection(index, indirect_dim, math.prod(base[indirect_dim + 1:]), base[indirect_dim],
                       vector_offset is not None)


def flat_indices(view, static):
    """Storage indices of an indirect view: its static pattern indices plus the dynamic rows."""
    ind = view._indirect
    rows = ind.rows_read()
    if ind.vector:
        static = static - (np.arange(view.shape[0]) * view.strides[0]).reshape((-1,) + (1,) * (view.ndim - 1))
        static = static + (rows * ind.row_elems).reshape((-1,) + (1,) * (view.ndim - 1))
    else:
        static = static + rows[0] * ind.row_elems
    if static.min() < 0 or static.max() >= view._alloc.data.size:
        raise IndexError(f"indirect access of {view.name}: the pattern leaves the allocation at the rows read "
                         f"(oob_mode=error)")
    return static


class Gathered(np.ndarray):
    """What `numpy()` gives for an indirect view: the gathered values; writing them (a scatter) is not modeled."""

    def __setitem__(self, key, value):
        raise not_modeled("an indirect access pattern as a destination (DMA scatter)")
