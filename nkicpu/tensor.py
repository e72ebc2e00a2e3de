"""`NkiTensor`: a view (offset + [stride, count] pattern) over one allocation's storage.

Every view method of the documented API returns a new view and copies nothing, as in NKI. On-chip
tensors (SBUF, PSUM) keep the partition dim first: views may not move, merge or reshape it, and the
partition stride is the allocation's row length (elements per partition).
"""
import functools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import indirect
from .errors import not_modeled
from .memory import is_on_chip


@functools.lru_cache(maxsize=None)
def row_major(shape):
    """The element strides of a C-order array of `shape` (cached: the scheduler asks often)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= int(n)
    return tuple(reversed(strides))


class DynamicSlice:
    """`nl.ds(start, size)`: the slice start:start+size."""

    def __init__(self, start, size):
        self.start, self.size = start, size


class NkiTensor:
    _indirect = None   # an `indirect.Indirection` for a view made by .ap(scalar_offset= / vector_offset=)

    def __init__(self, alloc, shape, strides, offset):
        self._alloc = alloc
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.offset = int(offset)

    @classmethod
    def whole(cls, alloc):
        """All of an allocation, row-major: what `nl.ndarray` returns and a kernel argument is."""
        return cls(alloc, alloc.shape, row_major(alloc.shape), 0)

    # -- attributes of the documented API ---------------------------------------------------
    @property
    def dtype(self):
        return self._alloc.dtype

    @property
    def buffer(self):
        return self._alloc.buffer

    @property
    def name(self):
        return self._alloc.name

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))

    def __repr__(self):
        return f"NkiTensor({self.name}, shape={list(self.shape)}, {self.dtype.name}, {self.buffer.name})"

    def _view(self, shape, strides, offset=None):
        if self._indirect is not None:
            raise not_modeled("views of an indirect access pattern; pass it to dma_copy as it is")
        return NkiTensor(self._alloc, shape, strides, self.offset if offset is None else offset)

    @property
    def _on_chip(self):
        return is_on_chip(self.buffer)

    def _where(self, method):
        return f"{self.name}{list(self.shape)}.{method}"

    # -- NumPy access (nkicpu internal) -----------------------------------------------------
    def numpy(self):
        """A writeable NumPy view of exactly the elements this tensor addresses (of an indirect view:
        a read-only copy of the elements at the rows its index tile holds now)."""
        base = self._alloc.data
        if self._indirect is not None:
            return base[self.flat_indices()].view(indirect.Gathered)
        item = base.itemsize
        return as_strided(base[self.offset:], shape=self.shape, strides=[s * item for s in self.strides])

    def flat_indices(self):
        """Storage element index of every element of the view, in view order (of an indirect view: at
        the rows its index tile holds now; an index out of range raises errors.DmaIndexError)."""
        if self._indirect is not None:
            return indirect.resolve(self, f"{self.name}.ap view", "the view", skip=False)[0].reshape(self.shape)
        return self.static_indices()

    def static_indices(self):
        """Storage element index of every element of the view's pattern (offset + steps), in view order."""
        idx = np.full(self.shape, self.offset, dtype=np.int64)
        for d, (n, s) in enumerate(zip(self.shape, self.strides)):
            shape = [1] * self.ndim
            shape[d] = n
            idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
        return idx

    # -- indexing ---------------------------------------------------------------------------
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            i = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1:]
        if len(key) > self.ndim:
            raise IndexError(f"{self._where('__getitem__')}: {len(key)} indices for a {self.ndim}-d tensor")
        key = key + (slice(None),) * (self.ndim - len(key))
        shape, strides, offset = [], [], self.offset
        dropped = []
        for d, (k, n, s) in enumerate(zip(key, self.shape, self.strides)):
            if isinstance(k, DynamicSlice):
                k = slice(k.start, k.start + k.size)
            if isinstance(k, (int, np.integer)):
                i = int(k) + n if k < 0 else int(k)
                if not 0 <= i < n:
                    raise IndexError(f"{self._where('__getitem__')}: index {int(k)} out of range for dim {d} of size {n}")
                offset += i * s
                dropped.append((d, s))
            elif isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step <= 0:
                    raise not_modeled("negative slice steps")
                if (k.start is not None and not -n <= k.start <= n) or (k.stop is not None and not -n <= k.stop <= n):
                    raise IndexError(f"{self._where('__getitem__')}: slice {k.start}:{k.stop} out of range for dim {d} of size {n}")
                count = max(0, -(-(stop - start) // step))
                if count == 0:
                    raise IndexError(f"{self._where('__getitem__')}: empty slice on dim {d}")
                offset += start * s
                shape.append(count)
                strides.append(s * step)
            else:
                raise not_modeled(f"indexing with {type(k).__name__}")
        if self._on_chip:
            # The partition dim stays (size 1) under an integer index, and the result is at least 2-D.
            for d, s in dropped:
                if d == 0:
                    shape.insert(0, 1)
                    strides.insert(0, s)
            while len(shape) < 2:
                shape.append(1)
                strides.append(1)
        elif not shape:
            shape, strides = [1], [1]
        return self._view(shape, strides, offset)

    def __setitem__(self, key, value):
        raise TypeError("nkicpu: NKI tensors are written only by nisa instructions (dst=...), not by assignment")

    def slice(self, dim, start, end, step=1):
        key = [slice(None)] * self.ndim
        key[dim] = slice(start, end, step)
        return self[tuple(key)]

    def select(self, dim, index):
        if not isinstance(index, (int, np.integer)):
            raise not_modeled("dynamic select (an NkiTensor index)")
        key = [slice(None)] * self.ndim
        key[dim] = index
        return self[tuple(key)]

    # -- reshaping views --------------------------------------------------------------------
    def _axis(self, dim, method, extra=0):
        """`dim` as a non-negative axis (negative counts from the end), checked against ndim (+ extra)."""
        n = self.ndim + extra
        if not -n <= dim < n:
            raise IndexError(f"{self._where(method)}: dim {dim} out of range for {n} dims")
        return dim + n if dim < 0 else dim

    def _check_partition_dim(self, dim, method):
        if self._on_chip and dim == 0:
            raise ValueError(f"{self._where(method)}: the partition dim (0) of an on-chip tensor cannot be changed")

    def permute(self, dims):
        dims = tuple(dims)
        if sorted(dims) != list(range(self.ndim)):
            raise ValueError(f"{self._where('permute')}: dims must be a permutation of 0..{self.ndim - 1}, got {dims}")
        if self._on_chip and dims[0] != 0:
            raise ValueError(f"{self._where('permute')}: on-chip tensors keep the partition dim first, got dims {dims}")
        return self._view([self.shape[d] for d in dims], [self.strides[d] for d in dims])

    def broadcast(self, dim, size):
        dim = self._axis(dim, "broadcast")
        self._check_partition_dim(dim, "broadcast")
        if self.shape[dim] != 1:
            raise ValueError(f"{self._where('broadcast')}: dim {dim} must have size 1, got {self.shape[dim]}")
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = size, 0
        return self._view(shape, strides)

    def expand_dim(self, dim):
        dim = self._axis(dim, "expand_dim", extra=1)
        self._check_partition_dim(dim, "expand_dim")
        shape, strides = list(self.shape), list(self.strides)
        shape.insert(dim, 1)
        strides.insert(dim, 0)
        return self._view(shape, strides)

    def squeeze_dim(self, dim):
        dim = self._axis(dim, "squeeze_dim")
        self._check_partition_dim(dim, "squeeze_dim")
        if self.shape[dim] != 1:
            raise ValueError(f"{self._where('squeeze_dim')}: dim {dim} must have size 1, got {self.shape[dim]}")
        return self._view(self.shape[:dim] + self.shape[dim + 1:], self.strides[:dim] + self.strides[dim + 1:])

    def reshape_dim(self, dim, shape):
        dim = self._axis(dim, "reshape_dim")
        shape = list(shape)
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            shape[shape.index(-1)] = self.shape[dim] // known
        if int(np.prod(shape)) != self.shape[dim]:
            raise ValueError(f"{self._where('reshape_dim')}: {shape} does not split dim {dim} of size {self.shape[dim]}")
        if self._on_chip and dim == 0 and len(shape) != 1:
            raise ValueError(f"{self._where('reshape_dim')}: the partition dim of an on-chip tensor cannot be split")
        new = list(self.shape[:dim]) + shape + list(self.shape[dim + 1:])
        return self.reshape(new)

    def flatten_dims(self, start_dim, end_dim):
        start_dim, end_dim = self._axis(start_dim, "flatten_dims"), self._axis(end_dim, "flatten_dims")
        if self._on_chip and start_dim == 0:
            raise ValueError(f"{self._where('flatten_dims')}: start_dim must be > 0 for on-chip tensors")
        merged = int(np.prod(self.shape[start_dim:end_dim + 1]))
        return self.reshape(self.shape[:start_dim] + (merged,) + self.shape[end_dim + 1:])

    def reshape(self, shape):
        shape = tuple(int(s) for s in shape)
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        if int(np.prod(shape)) != self.size:
            raise ValueError(f"{self._where('reshape')}: cannot reshape {self.size} elements into {list(shape)}")
        if self._on_chip and shape[0] != self.shape[0]:
            raise ValueError(f"{self._where('reshape')}: on-chip tensors keep partition dim {self.shape[0]}, got {list(shape)}")
        # NumPy knows when a new shape is a pure view of the old strides (element strides as int8 byte
        # strides of a probe that is never read).
        probe = as_strided(np.zeros(1, np.int8), shape=self.shape, strides=self.strides)
        try:
            try:
                new_strides = np.reshape(probe, shape, copy=False).strides
            except TypeError:  # NumPy 2.0: no copy= yet; setting .shape raises AttributeError instead
                probe.shape = shape
                new_strides = probe.strides
        except (ValueError, AttributeError):
            raise ValueError(f"{self._where('reshape')}: the view's layout is not contiguous enough for shape "
                             f"{list(shape)} (a reshape must be a view; copy with an instruction instead)") from None
        return self._view(shape, new_strides)

    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        if self._indirect is not None:   # "Only one dynamic select is allowed per view" (nki-aps.rst)
            raise not_modeled(".ap() of an indirect access pattern; call .ap() on the tensor itself")
        if dtype is not None and np.dtype(dtype) != self.dtype:
            raise not_modeled("dtype reinterpretation in .ap()")
        pattern = [list(p) for p in pattern]
        if any(len(p) != 2 or p[1] < 1 or p[0] < 0 for p in pattern):
            raise ValueError(f"{self._where('ap')}: pattern must be [[step >= 0, count >= 1], ...], got {pattern}")
        if self._on_chip and pattern[0][1] > 1 and pattern[0][0] != self._alloc.row_elems:
            raise ValueError(f"{self._where('ap')}: the first (partition) step must be the allocation's "
                             f"{self._alloc.row_elems} elements per partition, got {pattern[0][0]}")
        base = self.offset if offset is None else self.offset + int(offset)
        if scalar_offset is not None or vector_offset is not None:
            view = NkiTensor(self._alloc, [n for _, n in pattern], [s for s, _ in pattern], base)
            view._indirect = indirect.make(self, pattern, base, scalar_offset, vector_offset, indirect_dim)
            return view
        if self._on_chip:
            row = self._alloc.row_elems
            free_last = base % row + sum((n - 1) * s for s, n in pattern[1:])
            if free_last >= row:
                raise ValueError(f"{self._where('ap')}: the free pattern {pattern[1:]} from element {base % row} of a "
                                 f"partition reaches element {free_last}; a partition holds {row}")
        view = self._view([n for _, n in pattern], [s for s, _ in pattern], base)
        last = base + sum((n - 1) * s for s, n in pattern)
        if base < 0 or last >= self._alloc.data.size:
            raise IndexError(f"{self._where('ap')}: pattern {pattern} at offset {base} leaves the allocation "
                             f"of {self._alloc.data.size} elements")
        return view

    def get_pattern(self):
        return [[s, n] for s, n in zip(self.strides, self.shape)]

    def is_contiguous(self):
        dims = range(1, self.ndim) if self._on_chip else range(self.ndim)
        expected = 1
        for d in reversed(list(dims)):
            if self.shape[d] != 1 and self.strides[d] != expected:
                return False
            expected *= self.shape[d]
        return True

    def is_indirect(self):
        return self._indirect is not None

    def view(self, dtype):
        raise not_modeled("NkiTensor.view (dtype reinterpretation)")

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
        raise not_modeled("NkiTensor.rearrange; use reshape / permute")

    # -- facts the instruction checks use ---------------------------------------------------
    @property
    def partitions(self):
        """Partition count of an on-chip view (dim 0)."""
        return self.shape[0]

    @property
    def free_size(self):
        """Elements per partition of an on-chip view."""
        return int(np.prod(self.shape[1:]))

    def partition_stride_ok(self):
        return self.shape[0] == 1 or self.strides[0] == self._alloc.row_elems
