"""Small helpers the nkicpu tests share: bf16, random data, bit comparisons, HBM <-> SBUF moves.

`load` and `store` are plain functions (building blocks), called from inside `@nki.jit` kernels.
"""
import ml_dtypes
import numpy as np

import kernels  # noqa: F401  registers nkicpu as `nki` where the Neuron SDK is absent
import nki
import nki.isa as nisa
import nki.language as nl
from nkicpu import NkiValidationError  # noqa: F401  re-exported for the tests

F32 = np.float32
BF16 = ml_dtypes.bfloat16
FLOAT_DTYPES = [F32, BF16]
DTYPE_IDS = ["fp32", "bf16"]


def rand(shape, dtype=F32, lo=-2.0, hi=2.0, seed=0):
    """Uniform values, exactly representable in `dtype`."""
    x = np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(F32)
    return x.astype(dtype)


def bits(a):
    """The raw bit pattern of an array (so NaN payloads and -0.0 compare exactly)."""
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def assert_bits_equal(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = np.flatnonzero(bits(got) != bits(want))
    assert diff.size == 0, f"{diff.size} elements differ, first at {diff[:5]}: {got.ravel()[diff[:5]]} vs {want.ravel()[diff[:5]]}"


def sb(*shape, dtype=nl.float32):
    """A new SBUF tile (uninitialised), for kernel bodies written as one expression."""
    return nl.ndarray(shape, dtype, buffer=nl.sbuf)


def ps(*shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype, buffer=nl.psum)


def hbm(*shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype, buffer=nl.shared_hbm)


def load(src, buffer=nl.sbuf, dtype=None):
    """DMA an HBM tensor into a new on-chip tile of the same shape."""
    t = nl.ndarray(src.shape, dtype or src.dtype, buffer=buffer)
    nisa.dma_copy(dst=t, src=src)
    return t


def store(t):
    """DMA an SBUF tile into a new kernel output in shared HBM."""
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def allocation_id(capture, name):
    """The id of the one allocation of an `nkicpu.capture` with this name."""
    (alloc,) = [i for i, info in capture.allocations.items() if info.name == name]
    return alloc


def run(kernel, *args):
    return nki.simulate(kernel)(*args)
