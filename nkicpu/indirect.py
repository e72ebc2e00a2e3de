"""Indirect (dynamic) access patterns: `t.ap(pattern, offset, scalar_offset=..., indirect_dim=d)` and
`t.ap(pattern, offset, vector_offset=..., indirect_dim=0)` on an HBM tensor, the `src` of a DMA
gather or the `dst` of a DMA scatter.

Address semantics (SDK nki/deep-dives/nki-aps.rst, "Dynamic Access with scalar_offset and
vector_offset"; nki/migration/index.rst, "Dynamic access pattern"): the offset is in rows of the
base tensor's `indirect_dim` (the tensor `.ap()` is called on, e.g. a reshaped view: the NKI library
scatters KV rows into `V_cache.reshape((B * S_max_ctx, d_head)).ap(..., vector_offset=...)`, LIB
experimental/transformer/attention_block_tkg.py), so element (i0, i1, ...) of the access is
`flat[offset + row * prod(base.shape[indirect_dim+1:]) + sum_k i_k * step_k]` with `row` the 1x1
SBUF `scalar_offset`; with a `vector_offset` ((P, 1) SBUF indices, indirect_dim 0 only), partition
i0 reads or writes row `vector_offset[i0]` and the pattern's first step is ignored. The indexed
tensor must be in HBM (SDK isa stub, dma_copy, "Indirect addressing (gather/scatter)").

Indices are read when the DMA runs. An index is out of range when it is < 0 or >= the base
tensor's size in `indirect_dim`, or when at that row the pattern leaves the tensor's storage.
"In both of these dynamic modes, out-of-bound address checking is turned on automatically during
execution. By default a runtime error is raised (oob_mode=oob_mode.error ...) ... skip the DMA
transfer for a given dynamic address or index when it is out of bound using oob_mode=oob_mode.skip"
(SDK isa stub, dma_copy): under `error` nkicpu raises `errors.DmaIndexError`; under `skip` a
scalar-offset DMA with a bad index moves nothing, and a vector-offset DMA skips the partitions whose
index is bad (their gathered dst partitions keep their contents; their scattered rows are not
written). Two partitions of a vector scatter with one row: nkicpu keeps the later partition's data
(no page says which the hardware keeps). The NKI library skips that way: padding tokens' expert weights by scalar_offset (LIB
core/moe/moe_cte/bwmm_shard_on_block.py) and invalid batches' KV rows by vector_offset
(attention_block_tkg.py, "skip writes for invalid batch (position_id = uint32_max)").

For the cost model the access is recorded at its pattern without the dynamic rows (its bytes and
contiguous runs are exact) and marked dynamic (record.Access), with the rows it moved in this run.
"""
import math

import numpy as np

from .errors import DmaIndexError, not_modeled, rule_error
from .memory import is_float, is_hbm, is_sbuf


class Indirection:
    """The dynamic part of an indirect view: its index tile, and the rows it may address."""

    def __init__(self, index, dim, base_shape, name, vector, valid):
        self.index, self.dim, self.base_shape, self.name, self.vector = index, dim, base_shape, name, vector
        self.rows = base_shape[dim]
        self.row_elems = math.prod(base_shape[dim + 1:])
        self.valid = valid          # (first, last) index at which the pattern stays in the tensor; None: none

    def rows_now(self):
        """The index of each partition (vector) or of the whole access (scalar), as int64, read now."""
        return np.asarray(self.index.numpy()).reshape(-1).astype(np.int64)


def make(tensor, pattern, base, scalar_offset, vector_offset, indirect_dim):
    """Check the dynamic arguments of `tensor.ap(...)` (`base`: the access's static start element)
    and return their `Indirection`."""
    where = f"{tensor.name}.ap"
    if scalar_offset is not None and vector_offset is not None:
        raise ValueError(f"{where}: scalar_offset and vector_offset are mutually exclusive")
    if not is_hbm(tensor.buffer):
        raise rule_error("indirect-hbm", where, f"an indirect access indexes a tensor in HBM, got {tensor.buffer.name}")
    shape = tensor.shape
    if tensor.strides != tuple(math.prod(shape[d + 1:]) for d in range(len(shape))):   # not row-major
        raise not_modeled(f"an indirect .ap() on a strided view {list(shape)} (strides {list(tensor.strides)}): "
                          f"its rows would not be rows of its storage; call it on the tensor or a reshape of it")
    if not 0 <= indirect_dim < len(shape):
        raise ValueError(f"{where}: indirect_dim {indirect_dim} is not a dim of the base tensor {list(shape)}")
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
    # The rows at which the pattern stays in the allocation (steps are >= 0: its first element is `base`).
    row_elems = math.prod(shape[indirect_dim + 1:])
    reach = sum((n - 1) * s for s, n in (pattern[1:] if vector_offset is not None else pattern))
    first = max(0, -(base // row_elems))
    last = min(shape[indirect_dim] - 1, (tensor._alloc.data.size - 1 - base - reach) // row_elems)
    return Indirection(index, indirect_dim, shape, tensor.name, vector_offset is not None,
                       (first, last) if first <= last else None)


def resolve(view, where, arg, skip):
    """Where an indirect view's elements are now: (storage index of every element, in view order and
    flat; which of them the DMA moves, a bool array or None for all; the part starts for
    `record.Access.moved`). An out-of-range index raises `DmaIndexError`, or under `skip` leaves
    out the whole access (scalar_offset) or its partition (vector_offset)."""
    ind = view._indirect
    rows = ind.rows_now()
    ok = np.zeros(rows.shape, bool) if ind.valid is None else (rows >= ind.valid[0]) & (rows <= ind.valid[1])
    if not skip and not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        raise _out_of_range(view, where, arg, int(rows[k]), k if ind.vector else None)
    static = view.static_indices()
    if ind.vector:   # partition i0 goes to its row: its pattern step is replaced by the row's offset
        column = (-1,) + (1,) * (view.ndim - 1)
        idx = static + ((np.where(ok, rows, 0) * ind.row_elems) - np.arange(view.shape[0]) * view.strides[0]).reshape(column)
        starts = view.offset + rows[ok] * ind.row_elems
        keep = None if ok.all() else np.broadcast_to(ok.reshape(column), view.shape).reshape(-1)
    else:
        idx = static + (int(rows[0]) * ind.row_elems if ok[0] else 0)
        starts = [view.offset + int(rows[0]) * ind.row_elems] if ok[0] else []
        keep = None if ok[0] else np.zeros(view.size, bool)
    return idx.reshape(-1), keep, tuple(int(s) for s in starts)


def _out_of_range(view, where, arg, value, partition):
    ind = view._indirect
    kind = "scalar_offset" if partition is None else f"vector_offset partition {partition}"
    tensor = f"dim {ind.dim} of {ind.name}{list(ind.base_shape)} ({ind.rows} rows) at {kind}"
    leaves = (f"the pattern {view.get_pattern()} from element {view.offset} leaves the tensor's "
              f"{view._alloc.data.size} elements")
    valid = "no index is valid" if ind.valid is None else f"valid indices are {ind.valid[0]}..{ind.valid[1]}"
    if 0 <= value < ind.rows:
        what = f"is inside {tensor}, but there {leaves}; {valid}"
    else:
        narrower = ind.valid != (0, ind.rows - 1)
        what = f"is outside {tensor}; {valid}" + (f" (at other rows {leaves})" if narrower else "")
    return DmaIndexError(
        f"{where}: {arg} index {value} {what} (oob_mode=error, the default, raises at run time; "
        f"oob_mode=oob_mode.skip skips {'the partition' if partition is not None else 'the transfer'})",
        where, arg, value, partition, ind.valid)


class Gathered(np.ndarray):
    """What `numpy()` gives for an indirect view: the gathered values, a copy; a scatter is a dma_copy."""

    def __setitem__(self, key, value):
        raise TypeError("nkicpu: an indirect view is written only by nisa.dma_copy(dst=...) (a DMA scatter)")
