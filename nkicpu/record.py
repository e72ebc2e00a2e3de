"""The instruction record: what every `nisa` call did, for the cost model to schedule.

An `Access` names the memory an operand touches (allocation, buffer, dtype, offset and
[stride, count] pattern in elements, bytes); an `Instruction` is one engine instruction with its
reads and writes; an `AllocationInfo` describes an allocation an access names. Nothing here
holds tensor data, so recording a run keeps no allocation alive.
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
        """First and last storage element touched (inclusive)."""
        last = self.offset + sum((n - 1) * s for s, n in self.pattern)
        return self.offset, last

    def indices(self):
        idx = np.array([self.offset], dtype=np.int64)
        for s, n in self.pattern:
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


def access_of(t):
    a = t._alloc
    return Access(alloc=a.id, buffer=a.buffer.value, dtype=dtype_name(a.dtype), offset=t.offset,
                  pattern=tuple(zip(t.strides, t.shape)), itemsize=a.dtype.itemsize, row_elems=a.row_elems)
