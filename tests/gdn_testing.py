"""What every stage and composition test shares: shapes and the run-and-compare helpers.

The assert helpers name the project's accuracy rules, which live in kernels/accuracy.py (one
home: tests, notebooks, the sweep and the trn runner all judge with it).
"""
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
from kernels.accuracy import EXACT, OUTPUT, STATE, assert_close, cosine, f64  # noqa: F401 (re-exported)
from kernels.configs import TEST_SHARDS, GDNShape
from kernels.reference import token_inputs
from kernels.registry import STEPS

TINY_SHAPES = [
    GDNShape(B=1, H=128, nk=1, nv=1, dk=16, dv=16, name="tiny G1"),
    GDNShape(B=2, H=128, nk=1, nv=2, dk=32, dv=16, name="tiny G2 dk!=dv"),
    GDNShape(B=3, H=128, nk=2, nv=6, dk=16, dv=32, name="tiny G3 dk!=dv"),
    GDNShape(B=1, H=256, nk=2, nv=8, dk=32, dv=32, K=3, name="tiny G4 K3"),
]
SHARD_SHAPES = [s.with_batch(B) for s in TEST_SHARDS for B in (1, 3, 8)]


def composition_steps():
    """Every composition step of the registry, by name in book order, as a callable taking and
    returning NumPy arrays: a host pipeline as it is, a kernel through nki.simulate."""
    steps = {}
    for e in STEPS:
        kernel = e.load_kernel()
        steps[e.name] = kernel if e.launches else nki.simulate(kernel)
    return steps


def shape_id(shape):
    return f"{shape.name} B{shape.B}".replace(" ", "-")


def shapes_param(shapes):
    return pytest.mark.parametrize("shape", shapes, ids=[shape_id(s) for s in shapes])


def assert_output_close(got, want, name="output"):
    assert_close(got, want, OUTPUT, name)


def assert_state_close(got, want, name="recurrent_state"):
    assert_close(got, want, STATE, name)


def assert_bit_exact(got, want, name="conv_state"):
    assert_close(got, want, EXACT, name)


def rel_rmse(got, want):
    """Relative RMS error, sqrt(mean((got - want)^2) / mean(want^2)), in float64."""
    return float(np.sqrt(np.mean((f64(got) - f64(want)) ** 2) / np.mean(f64(want) ** 2)))


def run_unmodified(kernel_call, *arrays):
    """Run `kernel_call(*arrays)` and assert it left every input array bit-identical."""
    before = [a.copy() for a in arrays]
    result = kernel_call(*arrays)
    for i, (a, b) in enumerate(zip(arrays, before)):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"kernel modified input {i}"
    return result


def hbm_runs(ins):
    """(partitions, HBM bytes per partition, one contiguous run per partition?) of an SBUF <-> HBM
    dma_copy (both sides list their elements in the same order, the SBUF side partition-major)."""
    hbm = next(a for a in ins.reads + ins.writes if not a.on_chip)
    sbuf = next(a for a in ins.reads + ins.writes if a.on_chip)
    idx = hbm.indices().reshape(sbuf.partitions, -1)
    contiguous = bool((np.diff(idx, axis=1) == 1).all())
    return sbuf.partitions, idx.shape[1] * hbm.itemsize, contiguous


def pool_case(shape, T, N, read, write, seed=0):
    """Inputs of a pool launch: token_inputs' for B = len(read) sequences, the live rows' windows
    and states placed at their read slots of random pools of N slots; a padding row's hidden
    NaN (its output must still be exactly 0)."""
    read, write = np.asarray(read, np.int32), np.asarray(write, np.int32).reshape(len(read), T)
    x = token_inputs(shape.with_batch(len(read)), T, seed)
    rng = np.random.default_rng([seed, N])
    conv = x["conv_state"]
    conv_pool = rng.standard_normal((N,) + conv.shape[1:], dtype=np.float32).astype(conv.dtype)
    state = x["recurrent_state"]
    state_pool = 0.1 * rng.standard_normal((N,) + state.shape[1:], dtype=np.float32)
    for b in np.flatnonzero(read >= 0):
        conv_pool[read[b]] = conv[b]
        state_pool[read[b]] = state[b]
    for b in np.flatnonzero(read < 0):
        x["hidden"][b] = np.nan
    args = dict(x)
    args["conv_state"], args["recurrent_state"] = conv_pool, state_pool
    return x, args, read, write
