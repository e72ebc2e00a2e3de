"""What every stage and composition test shares: shapes, tolerances, and the run-and-compare helpers.

Tolerances are the project's (DESIGN.md, Tests): outputs atol = rtol = 1e-2 with cosine
similarity >= 0.999, recurrent state atol = rtol = 5e-3, conv state bit-exact.
"""
import numpy as np
import pytest

from kernels.configs import TEST_SHARDS, GDNShape

TINY_SHAPES = [
    GDNShape(B=1, H=128, nk=1, nv=1, dk=16, dv=16, name="tiny G1"),
    GDNShape(B=2, H=128, nk=1, nv=2, dk=32, dv=16, name="tiny G2 dk!=dv"),
    GDNShape(B=3, H=128, nk=2, nv=6, dk=16, dv=32, name="tiny G3 dk!=dv"),
    GDNShape(B=1, H=256, nk=2, nv=8, dk=32, dv=32, K=3, name="tiny G4 K3"),
]
SHARD_SHAPES = [s.with_batch(B) for s in TEST_SHARDS for B in (1, 3, 8)]


def shape_id(shape):
    return f"{shape.name} B{shape.B}".replace(" ", "-")


def shapes_param(shapes):
    return pytest.mark.parametrize("shape", shapes, ids=[shape_id(s) for s in shapes])


def f64(x):
    return np.asarray(x, dtype=np.float64)


def cosine(a, b):
    a, b = f64(a).ravel(), f64(b).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    return float(a @ b / (na * nb))


def assert_output_close(got, want, name="output"):
    """Outputs: atol = rtol = 1e-2 and cosine similarity >= 0.999; shapes and dtypes must match."""
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert np.isfinite(f64(got)).all(), f"{name}: non-finite values"
    np.testing.assert_allclose(f64(got), f64(want), atol=1e-2, rtol=1e-2, err_msg=name)
    assert cosine(got, want) >= 0.999, f"{name}: cosine {cosine(got, want):.6f} < 0.999"


def assert_state_close(got, want, name="recurrent_state"):
    assert got.shape == want.shape and got.dtype == want.dtype, f"{name}: {got.shape} {got.dtype} != {want.shape} {want.dtype}"
    np.testing.assert_allclose(f64(got), f64(want), atol=5e-3, rtol=5e-3, err_msg=name)


def assert_bit_exact(got, want, name="conv_state"):
    assert got.shape == want.shape and got.dtype == want.dtype, f"{name}: {got.shape} {got.dtype} != {want.shape} {want.dtype}"
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{name}: not bit-exact"


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
