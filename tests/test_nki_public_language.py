"""Public NKI kernels that call the experimental nl wrappers (tests/nki_public: nl_add, pool2d,
identity_transpose, rope_interleave, rotational_constants, mamba) run unmodified under nkicpu and
match NumPy references written here.

Data movement, permutations by matmul and max are compared bit-exactly; sums, means and the Mamba
scan with the stages' tolerances (tests/gdn_testing.py).
"""
import numpy as np
import pytest

import nkicpu
from gdn_testing import assert_output_close
from nkicpu_testing import BF16, F32, assert_bits_equal, nisa
from nki_public.identity_transpose import allocated_loop_transpose
from nki_public.mamba import mamba_v1
from nki_public.nl_add import add_kernel, print_kernel
from nki_public.pool2d import tensor_avgpool_kernel, tensor_maxpool_kernel
from nki_public.rope_interleave import rope_layout_convert
from nki_public.rotational_constants import rotate_stage
from test_nki_public_kernels import f32, randn, simulate


# -- nl_add: nl.load, nl.add, nl.store, nl.empty_like --------------------------------------------

@pytest.mark.parametrize("shape", [(128, 512), (5, 3)])
def test_add_kernel(shape):
    """One add rounded once to the dtype: bit-exact against NumPy's fp32 sum."""
    a, b = randn(shape, seed=1), randn(shape, seed=2)
    assert_bits_equal(simulate(add_kernel, a, b), (f32(a) + f32(b)).astype(BF16))


def test_add_kernel_is_two_loads_a_vector_add_and_a_store():
    a = randn((16, 8), F32, seed=1)
    c = nkicpu.capture(add_kernel)(a, a)
    assert [(i.engine, i.opcode) for i in c.instructions] == [
        ("dma", "dma_copy"), ("dma", "dma_copy"), ("vector", "tensor_tensor"), ("dma", "dma_copy")]


def test_print_kernel(capsys):
    a = randn((3, 4), F32, seed=3, scale=10)
    assert_bits_equal(simulate(print_kernel, a), a)
    assert capsys.readouterr().out.startswith("value of a:")


# -- pool2d: nl.sum / nl.max over a strided 5-D view ----------------------------------------------

def windows(x, pool):
    """[C, H, W] -> [C, H / pool, W / pool, pool * pool]: each window's elements."""
    C, H, W = x.shape
    return x.reshape(C, H // pool, pool, W // pool, pool).transpose(0, 1, 3, 2, 4).reshape(C, H // pool, W // pool, -1)


@pytest.mark.parametrize("C,H,W,pool", [(2, 6, 6, 2), (128, 12, 16, 4), (7, 9, 3, 3)])
def test_avgpool(C, H, W, pool):
    x = randn((C, H, W), seed=4)
    want = (f32(windows(x, pool)).sum(axis=-1).astype(BF16).astype(F32) * F32(1.0 / (pool * pool))).astype(BF16)
    assert_output_close(simulate(tensor_avgpool_kernel, x, pool), want)


@pytest.mark.parametrize("C,H,W,pool", [(2, 6, 6, 2), (128, 12, 16, 4)])
def test_maxpool(C, H, W, pool):
    x = randn((C, H, W), seed=5)
    assert_bits_equal(simulate(tensor_maxpool_kernel, x, pool), windows(x, pool).max(axis=-1))


# -- identity_transpose: nl.shared_identity_matrix, nl.copy out of PSUM --------------------------

def test_allocated_loop_transpose_bf16():
    """A matmul with the identity moves bf16 values exactly."""
    a = randn((256, 384), seed=6)
    got = simulate(allocated_loop_transpose, a, np.zeros((384, 256), BF16), written=(1,))
    assert_bits_equal(got, a.T.copy())


def test_allocated_loop_transpose_fp32():
    """fp32 through TensorE keeps about 16 significant bits (nkicpu's bf16x3 model, isa.py), as the
    source's np.allclose check allows."""
    a = (100 * np.random.default_rng(7).random((128, 256))).astype(F32)
    got = simulate(allocated_loop_transpose, a, np.zeros((256, 128), F32), written=(1,))
    np.testing.assert_allclose(got, a.T, rtol=2.0 ** -15)


# -- rope_interleave: a permutation cut out of nl.shared_identity_matrix --------------------------

@pytest.mark.parametrize("d,B,heads,S", [(64, 2, 2, 8), (128, 1, 4, 160)], ids=["d64", "d128-two-matmuls"])
def test_rope_layout_convert(d, B, heads, S):
    x = randn((d, B, heads, S), seed=8)
    contiguous, interleaved = simulate(rope_layout_convert, x)
    order = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])   # [e0, e1, ..., o0, o1, ...]
    assert_bits_equal(contiguous, x[order])
    assert_bits_equal(interleaved, x)


# -- rotational_constants: nl.shared_constant from .npy files -------------------------------------

def rotational_constants(tmp_path, n_stages, BxS, stage_free_size):
    """The two .npy constants the library writes: the block-circulant permutation (each block
    shifts a token's n_stages rows by one) and every element's global index."""
    shift = np.roll(np.eye(n_stages), 1, axis=0)
    rotation = np.kron(np.eye(BxS), shift).astype(F32)
    indices = np.tile(np.arange(n_stages * stage_free_size, dtype=F32).reshape(n_stages, stage_free_size), (BxS, 1))
    np.save(tmp_path / "rotation.npy", rotation)
    np.save(tmp_path / "indices.npy", indices)
    return rotation, indices, str(tmp_path / "rotation.npy"), str(tmp_path / "indices.npy")


@pytest.mark.parametrize("n_stages,BxS,stage_free_size,k", [(4, 2, 64, 8), (8, 16, 700, 600)],
                         ids=["small", "k-over-one-psum-bank"])
def test_rotate_stage(tmp_path, n_stages, BxS, stage_free_size, k):
    inp = randn((n_stages * BxS, stage_free_size), seed=9)
    rotation, indices, rotation_file, indices_file = rotational_constants(tmp_path, n_stages, BxS, stage_free_size)
    values, got_indices = simulate(rotate_stage, inp, rotation_file, indices_file, k)
    assert_bits_equal(values, np.concatenate([inp, (rotation.T @ f32(inp[:, :k])).astype(BF16)], axis=1))
    assert_bits_equal(got_indices, np.concatenate([indices, rotation.T @ indices[:, :k]], axis=1))


# -- mamba: nl.broadcast_to across partitions ----------------------------------------------------

def mamba_ref(delta, u, A, B, C):
    """y[b, c, t] = sum_s C[b, s, t] * h[b, c, s, t], h_t = exp(delta_t A) h_(t-1) + delta_t u_t B_t, in float64."""
    delta, u, A, B, C = (np.asarray(v, np.float64) for v in (delta, u, A, B, C))
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])             # [b, c, s, t]
    dBu = (delta * u)[:, :, None, :] * B[:, None, :, :]
    h = np.zeros(dA.shape[:3])
    y = np.zeros(delta.shape)
    for t in range(delta.shape[2]):
        h = dA[..., t] * h + dBu[..., t]
        y[..., t] = (h * C[:, None, :, t]).sum(axis=2)
    return y


@pytest.mark.skipif("tensor_tensor_scan" not in vars(nisa), reason="nkicpu has no nisa.tensor_tensor_scan yet")
def test_mamba_v1():
    batch, channels, seq, state = 2, 256, 64, 4
    rng = np.random.default_rng(10)
    delta = rng.uniform(0.01, 0.2, (batch, channels, seq)).astype(F32)
    u = rng.standard_normal((batch, channels, seq)).astype(F32)
    A = -rng.uniform(0.5, 2.0, (channels, state)).astype(F32)
    B, C = (rng.standard_normal((batch, state, seq)).astype(F32) for _ in range(2))
    assert_output_close(simulate(mamba_v1, delta, u, A, B, C), mamba_ref(delta, u, A, B, C).astype(F32))
