"""Buffers, allocations and on-chip capacity accounting of a trn2 NeuronCore (NeuronCore-v3).

An allocation owns a flat NumPy array. New allocations are filled with NaN (floats) or the int
sentinel, as the SDK simulator does, so a read of memory nothing wrote shows up in the output.
SBUF and PSUM capacity is counted per partition over live allocations: an allocation is live
while any tensor view of it is referenced from Python, which is how a kernel that allocates its
tiles inside a loop lets the next iteration reuse the space. Each on-chip allocation gets an
address range within a partition (`Allocation.region`; PSUM in whole banks), the next free one
after the previous allocation's, wrapping around at the end ("next fit": the compiler's allocator
is not documented, and next fit reuses the memory freed longest ago, as a ring buffer would). A
new allocation may take memory one freed before it had, and the cost model orders its accesses
after the old contents' last ones (`nkicpu.schedule`, rule 2): the on-chip capacity bounds how far
ahead a kernel can load.
"""
import weakref
from enum import Enum

import ml_dtypes
import numpy as np

from .errors import rule_error

# trn2 NeuronCore-v3 numbers (SDK about-neuron/arch/neuron-hardware/neuron-core-v3.rst, nl.tile_size).
PMAX = 128                               # partitions
SBUF_PARTITION_BYTES = 224 * 1024        # 28 MiB / 128 partitions
# What a kernel's allocations may use of it: the NKI library budgets 224 KiB less the runtime's
# DynamicDMAScratchLoc (16 KiB) and EvalAccelReservedLoc (8 B) (LIB core/mlp/mlp_cte/
# mlp_cte_constants.py MAX_AVAILABLE_SBUF_SIZE, which also takes off its own 256 B identity tile).
SBUF_RESERVED_BYTES = 16384 + 8
SBUF_USABLE_BYTES = SBUF_PARTITION_BYTES - SBUF_RESERVED_BYTES
PSUM_BANK_BYTES = 2 * 1024               # one bank = 512 fp32 per partition
PSUM_NUM_BANKS = 8                       # 16 KiB per partition
INT_SENTINEL = 4                         # what the SDK simulator writes into new int allocations


class MemoryRegion(Enum):
    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"


def is_hbm(buffer):
    return buffer in (MemoryRegion.private_hbm, MemoryRegion.shared_hbm)


def is_on_chip(buffer):
    return buffer in (MemoryRegion.sbuf, MemoryRegion.psum)


def is_psum(buffer):
    return buffer is MemoryRegion.psum


def is_sbuf(buffer):
    return buffer is MemoryRegion.sbuf


# NKI dtypes as NumPy dtypes; bf16 and fp8 through ml_dtypes.
DTYPES = {
    "bool_": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    # tf32 (1S,8E,10M; SDK nki/api/nki.api.shared.rst) has no NumPy type: 4-byte float32 storage, told
    # apart by its metadata (see dtype_name). It compares equal to float32, so fp32 rules accept it;
    # values keep fp32 precision (the 10-bit mantissa rounding of the hardware is not modeled).
    "tfloat32": np.dtype(np.float32, metadata={"nki": "tfloat32"}),
}


def dtype_name(dtype):
    """The NKI name of a dtype (NumPy's name, except for tfloat32)."""
    dt = np.dtype(dtype)
    return (dt.metadata or {}).get("nki", dt.name)


def is_float(dtype):
    return np.dtype(dtype).kind == "f" or np.dtype(dtype) in (DTYPES["bfloat16"],) or "float8" in np.dtype(dtype).name


def check_dtype(dtype, where):
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in DTYPES.values():
        raise TypeError(f"{where}: expected an NKI dtype (nl.float32, nl.bfloat16, ...), got {dtype!r}")
    return dt


class Allocation:
    """One `nl.ndarray` or NumPy kernel argument: its storage and where it lives. Its `id` numbers
    it within its run (`nkicpu.run.Run` counts from 1 in every run)."""

    def __init__(self, id, shape, dtype, buffer, name, accounting=None):
        self.id = id
        self.shape = tuple(shape)
        self.dtype = dtype
        self.buffer = buffer
        self.name = name or f"t{self.id}"
        size = int(np.prod(self.shape))
        fill = np.nan if is_float(dtype) else INT_SENTINEL
        self.data = np.full(size, fill, dtype=dtype)
        # Per element: written by a matmul since its last non-matmul write (PSUM only), so that
        # `accumulate=None` can tell a first write (overwrite) from a later one (accumulate).
        self.matmul_written = np.zeros(size, dtype=bool) if is_psum(buffer) else None
        self.row_elems = size // self.shape[0] if is_on_chip(buffer) else None
        self.region = None      # on chip: ((first byte, end byte), ...) within each partition of its buffer
        if accounting is not None:
            accounting.allocate(self)


class Accounting:
    """Live SBUF bytes (of the usable SBUF_USABLE_BYTES) and PSUM banks per partition for one kernel
    run, and where each allocation lies."""

    def __init__(self):
        self.sbuf_bytes = 0
        self.sbuf_regions = {}                     # allocation id -> its region (`Allocation.region`)
        self.psum_banks = [None] * PSUM_NUM_BANKS  # allocation id holding each bank
        self.sbuf_next = self.psum_next = 0        # where the next allocation's search starts (next fit)
        self.peak_sbuf_bytes = 0
        self.peak_psum_banks = 0

    def allocate(self, alloc):
        if not is_on_chip(alloc.buffer):
            return
        nbytes = alloc.row_elems * alloc.dtype.itemsize
        where = f"nl.ndarray {alloc.name} {list(alloc.shape)} {alloc.dtype.name} in {alloc.buffer.name}"
        if is_sbuf(alloc.buffer):
            if self.sbuf_bytes + nbytes > SBUF_USABLE_BYTES:
                raise rule_error("sbuf-capacity", where,
                                 f"needs {nbytes} B per partition but only {SBUF_USABLE_BYTES - self.sbuf_bytes} B "
                                 f"of {SBUF_USABLE_BYTES} B are free in live allocations (trn2 SBUF: "
                                 f"{SBUF_PARTITION_BYTES} B less {SBUF_RESERVED_BYTES} B the runtime reserves)")
            alloc.region = self._next_fit(nbytes)
            self.sbuf_regions[alloc.id] = alloc.region
            self.sbuf_next = alloc.region[-1][1]
            self.sbuf_bytes += nbytes
            self.peak_sbuf_bytes = max(self.peak_sbuf_bytes, self.sbuf_bytes)
            weakref.finalize(alloc, self._free_sbuf, alloc.id, nbytes)
            return
        banks = -(-nbytes // PSUM_BANK_BYTES)
        starts = range(PSUM_NUM_BANKS - banks + 1)
        for start in sorted(starts, key=lambda s: (s < self.psum_next, s)):   # next fit
            if all(b is None for b in self.psum_banks[start:start + banks]):
                self.psum_banks[start:start + banks] = [alloc.id] * banks
                self.psum_next = start + banks
                alloc.region = ((start * PSUM_BANK_BYTES, start * PSUM_BANK_BYTES + nbytes),)
                used = sum(b is not None for b in self.psum_banks)
                self.peak_psum_banks = max(self.peak_psum_banks, used)
                weakref.finalize(alloc, self._free_psum, alloc.id)
                return
        raise rule_error("psum-capacity", where,
                         f"needs {banks} bank(s) of {PSUM_BANK_BYTES // 1024} KiB per partition but trn2 PSUM has "
                         f"{PSUM_NUM_BANKS} banks ({PSUM_NUM_BANKS * PSUM_BANK_BYTES // 1024} KiB) and "
                         f"{sum(b is None for b in self.psum_banks)} are free in live allocations")

    def _next_fit(self, nbytes):
        """SBUF for `nbytes` per partition: the first free range large enough at or after
        `sbuf_next`, else from address 0. When live allocations leave no free range large enough
        (a fragmentation the compiler, which knows every lifetime ahead, would plan around), the
        free ranges from `sbuf_next` on, wrapping around, in pieces."""
        gaps, start = [], 0
        for first, end in sorted(p for pieces in self.sbuf_regions.values() for p in pieces):
            if first > start:
                gaps.append((start, first))
            start = max(start, end)
        if start < SBUF_USABLE_BYTES:
            gaps.append((start, SBUF_USABLE_BYTES))
        for low in (self.sbuf_next, 0):
            for first, end in gaps:
                if max(first, low) + nbytes <= end:
                    return ((max(first, low), max(first, low) + nbytes),)
        pieces, need = [], nbytes
        for first, end in sorted(gaps, key=lambda g: (g[1] <= self.sbuf_next, g[0])):
            pieces.append((first, first + min(need, end - first)))
            need -= pieces[-1][1] - first
            if not need:
                return tuple(pieces)

    def _free_sbuf(self, alloc_id, nbytes):
        del self.sbuf_regions[alloc_id]
        self.sbuf_bytes -= nbytes

    def _free_psum(self, alloc_id):
        self.psum_banks = [None if b == alloc_id else b for b in self.psum_banks]
