"""The instruction record: what every `nisa` call did, for the cost model to schedule.

An `Access` names the memory an operand touches (allocation, buffer, dtype, offset and
[stride, count] pattern in elements, bytes); an `Instruction` is one engine instruction with its
reads and writes; an `AllocationInfo` describes an allocation an access names. Nothing here
holds tensor data, so recording a run keeps no allocation alive.

An indirect access (a DMA gather or scatter, `.ap(scalar_offset=...)` / `vector_offset=`) is
recorded at its static pattern, which gives its bytes and contiguous runs, and marked `dynamic`:
the rows it touches depend on an index tile the compiler cannot see, so the scheduler orders it
conservatively. `moved` keeps where its parts landed in this run, for `indices()`.
"""
from dataclasses import dataclass, field
from typing import NamedTuple

import math

import numpy as np

from .memory import dtype_name


class AllocationInfo(NamedTuple):
    """One allocation of a run (`Capture.allocations` maps its id to this): metadata only."""
    name: str
    buffer: str            # "sbuf", "psum", "private_hbm", "shared_hbm"
    dtype: str             # the NKI dtype name
    shape: tuple
    region: tuple = None   # on chip: ((first byte, end byte), ...) within a partition (`memory.Allocation.region`)


@dataclass(frozen=True)
class Access:
    alloc: int             # the allocation's id in its run
    buffer: str            # "sbuf", "psum", "private_hbm", "shared_hbm"
    dtype: str
    offset: int            # elements into the allocation
    pattern: tuple         # ((stride, count), ...) in elements, outermost first; on chip: partitions first
    itemsize: int
    row_elems: int = None  # on chip: elements per partition of the allocation
    dynamic: str = None    # an indirect access: "scalar" (scalar_offset) or "vector" (vector_offset)
    # dynamic: the storage element where each part it moved in this run began: the scalar access's one
    # start (none if oob_mode=skip skipped it), or one per vector partition moved (skipped ones left
    # out); a part is the whole pattern (scalar) or the pattern without its partition step (vector).
    moved: tuple = field(default=(), compare=False, repr=False)

    @property
    def elements(self):
        return math.prod(n for _, n in self.pattern)  # hot in the scheduler: math.prod is ~20x faster

    @property
    def nbytes(self):
        return self.elements * self.itemsize

    @property
    def on_chip(self):
        return self.buffer in ("sbuf", "psum")

    @property
    def partitions(self):
        """Number of partitions an on-chip access spans (1 for HBM)."""
        return self.pattern[0][1] if self.on_chip else 1

    @property
    def free_elements(self):
        return self.elements // self.partitions

    def span(self):
        """First and last storage element touched (inclusive); for a dynamic access, in this run
        ((offset, offset - 1) if it moved nothing)."""
        if self.dynamic is not None:
            idx = self.indices()
            return (int(idx.min()), int(idx.max())) if idx.size else (self.offset, self.offset - 1)
        last = self.offset + sum((n - 1) * s for s, n in self.pattern)
        return self.offset, last

    def indices(self):
        """The storage element of every element touched, in pattern order; for a dynamic access,
        the ones it moved in this run."""
        if self.dynamic is None:
            return _walk([self.offset], self.pattern)
        return _walk(self.moved, self.pattern if self.dynamic == "scalar" else self.pattern[1:])


def _walk(starts, pattern):
    idx = np.array(starts, dtype=np.int64)
    for s, n in pattern:
        idx = (idx[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).ravel()
    return idx


@dataclass
class Instruction:
    index: int
    engine: str            # "tensor", "vector", "scalar", "gpsimd", "dma"
    opcode: str            # the nisa function name, e.g. "nc_matmul"
    reads: list
    writes: list
    args: dict = field(default_factory=dict)  # op names, accumulate, tile sizes, dma queue hints, name, ...
    depends_on: list = field(default_factory=list)  # explicit producers (NkiInstruction.depends_on)
    core: int = 0          # physical NeuronCore of an LNC launch grid (nl.program_id); 0 without a grid

    @property
    def partitions(self):
        """Lanes the instruction drives: the partitions of its first on-chip operand."""
        for a in self.writes + self.reads:
            if a.on_chip:
                return a.partitions
        return 1

    @property
    def free_elements(self):
        """Elements per partition it streams: the largest over its on-chip operands."""
        sizes = [a.free_elements for a in self.reads + self.writes if a.on_chip]
        return max(sizes) if sizes else 0

    @property
    def nbytes(self):
        """Bytes moved (DMA: the destination's bytes)."""
        return sum(a.nbytes for a in self.writes)


def access_of(t, moved=()):
    """The Access of tensor view `t`; `moved`: an indirect view's part starts in this run (see Access)."""
    a = t._alloc
    dynamic = None if t._indirect is None else ("vector" if t._indirect.vector else "scalar")
    return Access(alloc=a.id, buffer=a.buffer.value, dtype=dtype_name(a.dtype), offset=t.offset,
                  pattern=tuple(zip(t.strides, t.shape)), itemsize=a.dtype.itemsize, row_elems=a.row_elems,
                  dynamic=dynamic, moved=tuple(moved))
