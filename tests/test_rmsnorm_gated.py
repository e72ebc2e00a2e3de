"""Stage 5, RMSNormGated: the NKI kernel against kernels.reference.rmsnorm_gated_ref."""
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
import nki.isa as nisa
import nki.language as nl
import nkicpu
from kernels.configs import GDNShape
from kernels.reference import pipeline_inputs, rmsnorm_gated_ref, to_numpy, to_torch
from kernels.rmsnorm_gated import rmsnorm_gated_kernel, rmsnorm_gated_tile
from tests.gdn_testing import (SHARD_SHAPES, TINY_SHAPES, assert_output_close, run_unmodified,
                               shapes_param)

BF16 = ml_dtypes.bfloat16


def stage_inputs(shape, seed=0, o_std=1.0, z_std=1.0):
    """o [B, nv, dv] bf16, z [B, value_dim] bf16, norm_weight [dv] fp32 (1 + 0.1 N(0, 1), not all ones)."""
    rng = np.random.default_rng(seed)
    o = (o_std * rng.standard_normal((shape.B, shape.nv, shape.dv))).astype(BF16)
    z = (z_std * rng.standard_normal((shape.B, shape.value_dim))).astype(BF16)
    w = (1 + 0.1 * rng.standard_normal(shape.dv)).astype(np.float32)   # as make_inputs draws it
    return o, z, w


def reference(o, z, w):
    return to_numpy(rmsnorm_gated_ref(to_torch(o), to_torch(z), to_torch(w)))


def run(o, z, w):
    return nki.simulate(rmsnorm_gated_kernel)(o, z, w)


# --- against the reference --------------------------------------------------------------------

@shapes_param(TINY_SHAPES + SHARD_SHAPES)
def test_matches_reference(shape):
    o, z, w = stage_inputs(shape)
    out = run(o, z, w)
    assert out.shape == (shape.B, 1, shape.value_dim) and out.dtype == BF16
    assert_output_close(out, reference(o, z, w))


def test_matches_reference_on_pipeline_inputs():
    """o and z as the earlier stages' references produce them from realistic block inputs."""
    shape = SHARD_SHAPES[2]  # Qwen3-Next-80B TP4, B=8
    x = pipeline_inputs(shape, seed=3)
    o, z, w = x["o"], x["z"], x["norm_weight"]
    assert_output_close(run(o, z, w), reference(o, z, w))


@pytest.mark.parametrize("dv", [16, 48, 64, 96, 128])
def test_head_dims(dv):
    """dv != dk and dv not a power of two (1/dv inexact in fp32): the mean is over dv."""
    shape = GDNShape(B=3, H=128, nk=1, nv=2, dk=128 if dv != 128 else 64, dv=dv, name=f"dv{dv}")
    o, z, w = stage_inputs(shape, seed=dv)
    assert_output_close(run(o, z, w), reference(o, z, w))


def test_each_head_normalised_on_its_own():
    """Every (b, h) row gets its own scale over 1e-2 .. 1e2: a mean over the wrong axis, or a
    mixed-up head-major flatten, changes the output."""
    shape = GDNShape(B=3, H=128, nk=2, nv=4, dk=32, dv=32)
    o, z, w = stage_inputs(shape, seed=5)
    scale = np.logspace(-2, 2, shape.B * shape.nv).reshape(shape.B, shape.nv, 1)
    o = (o.astype(np.float32) * scale).astype(BF16)
    assert_output_close(run(o, z, w), reference(o, z, w))


def test_eps_is_1e_6():
    """rms(o) ~ 1e-3, so mean(o^2) ~ eps: the config's 1e-6 and the libraries' 1e-5 differ by ~3x."""
    shape = SHARD_SHAPES[0]
    o, z, w = stage_inputs(shape, seed=19, o_std=1e-3)
    assert_output_close(run(o, z, w), reference(o, z, w))


def test_norm_weight_per_channel():
    """A weight with distinct, partly negative values per channel: w[j] must meet channel j
    (plain w, not 1 + w)."""
    shape = SHARD_SHAPES[0]
    o, z, _ = stage_inputs(shape, seed=7)
    w = np.linspace(-2.0, 2.0, shape.dv, dtype=np.float32)
    out = run(o, z, w)
    assert_output_close(out, reference(o, z, w))
    assert not np.allclose(out.astype(np.float32), reference(o, z, 1.0 + w).astype(np.float32), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("shape", [GDNShape(B=64, H=128, nk=4, nv=16, name="B64 two head chunks"),
                                   GDNShape(B=600, H=128, nk=1, nv=2, dk=16, dv=16, name="B600 batch chunks")],
                         ids=lambda s: s.name.replace(" ", "-"))
def test_more_than_one_psum_bank(shape):
    """nv * B > 512 columns: the free dim is cut into chunks of one PSUM bank (by heads, and by
    batch when B > 512)."""
    o, z, w = stage_inputs(shape, seed=11)
    assert_output_close(run(o, z, w), reference(o, z, w))


# --- edge cases (book/gdn/math.md) ------------------------------------------------------------

def test_zero_o_gives_exact_zero():
    shape = SHARD_SHAPES[-1]  # Qwen3.5-0.8B TP1, B=8
    _, z, w = stage_inputs(shape)
    o = np.zeros((shape.B, shape.nv, shape.dv), BF16)
    out = run(o, z, w)
    assert np.isfinite(out.astype(np.float32)).all()
    assert (out.astype(np.float32) == 0).all()          # 0 * rsqrt(0 + eps), never NaN


def test_zero_z_gives_exact_zero():
    shape = SHARD_SHAPES[-1]
    o, _, w = stage_inputs(shape)
    z = np.zeros((shape.B, shape.value_dim), BF16)
    out = run(o, z, w)
    assert (out.astype(np.float32) == 0).all()          # silu(0) = 0


def test_large_magnitudes():
    """|o| ~ 1e2 (sum of squares ~ 1e6 in fp32) and |z| ~ 1e1: finite and close."""
    shape = SHARD_SHAPES[-1]
    o, z, w = stage_inputs(shape, seed=13, o_std=100.0, z_std=10.0)
    assert np.abs(o.astype(np.float32)).max() > 300
    assert_output_close(run(o, z, w), reference(o, z, w))


def test_fp32_o_is_rounded_to_bf16_first():
    """An fp32 o gives exactly what its bf16 rounding gives (the delta-rule stage stores o in bf16)."""
    shape = SHARD_SHAPES[1]
    _, z, w = stage_inputs(shape)
    o32 = np.random.default_rng(17).standard_normal((shape.B, shape.nv, shape.dv)).astype(np.float32)
    o16 = o32.astype(BF16)
    assert not np.array_equal(o16.astype(np.float32), o32)
    out = run(o32, z, w)
    assert np.array_equal(out.view(np.uint16), run(o16, z, w).view(np.uint16))
    assert_output_close(out, reference(o16, z, w))


def test_inputs_unmodified():
    o, z, w = stage_inputs(SHARD_SHAPES[4])
    run_unmodified(run, o, z, w)


def test_instruction_plan():
    """At the largest real shard (128 (b, h) rows): 3 loads + 1 store, 3 TensorE transposes with
    their PSUM evictions (entry point); 2 constant memsets on GpSimd, 1 matmul, 2 ScalarE
    activations (silu, rsqrt), 3 VectorE ops (building block)."""
    o, z, w = stage_inputs(SHARD_SHAPES[-1])
    c = nkicpu.capture(rmsnorm_gated_kernel)(o, z, w)
    counts = Counter((i.engine, i.opcode) for i in c.instructions)
    assert counts == {("dma", "dma_copy"): 4, ("tensor", "nc_transpose"): 3, ("vector", "tensor_copy"): 3,
                      ("gpsimd", "memset"): 2, ("tensor", "nc_matmul"): 1, ("scalar", "activation"): 2,
                      ("vector", "tensor_tensor"): 2, ("vector", "scalar_tensor_tensor"): 1}
    # every DMA moves whole rows: dv * 2 contiguous bytes per partition
    for i in c.instructions:
        if i.opcode == "dma_copy" and i.nbytes > 512:
            hbm = [a for a in i.reads + i.writes if not a.on_chip][0]
            assert hbm.pattern[-1] == (1, 128), hbm.pattern


# --- the building block on its own -----------------------------------------------------------

def _strided_tiles(o, z, norm_weight):
    """Strided DMAs straight into [dv, nv, B] tiles of the inputs' own dtypes, and w as [dv, 1]."""
    B, nv, dv = o.shape
    o_sb = nl.ndarray((dv, nv, B), o.dtype)
    nisa.dma_copy(o_sb, o.permute((2, 1, 0)))
    z_sb = nl.ndarray((dv, nv, B), z.dtype)
    nisa.dma_copy(z_sb, z.reshape((B, nv, dv)).permute((2, 1, 0)))
    w_sb = nl.ndarray((dv, 1), nl.float32)
    nisa.dma_copy(w_sb, norm_weight.reshape((dv, 1)))
    return o_sb, z_sb, w_sb


def _store_strided(out_sb, B):
    dv, nv, _ = out_sb.shape
    out = nl.ndarray((B, 1, nv * dv), nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(out.reshape((B, nv, dv)).permute((2, 1, 0)), out_sb)
    return out


@nki.jit
def _direct_kernel(o, z, norm_weight):
    """One block call on whole [dv, nv, B] tiles."""
    o_sb, z_sb, w_sb = _strided_tiles(o, z, norm_weight)
    out_sb = nl.ndarray(o_sb.shape, nl.bfloat16)
    rmsnorm_gated_tile(out_sb, o_sb, z_sb, w_sb)
    return _store_strided(out_sb, o.shape[0])


@nki.jit
def _per_head_kernel(o, z, norm_weight):
    """One block call per value head, on slices of shared tiles, as a fused kernel may call it."""
    o_sb, z_sb, w_sb = _strided_tiles(o, z, norm_weight)
    out_sb = nl.ndarray(o_sb.shape, nl.bfloat16)
    for h in range(o.shape[1]):
        rmsnorm_gated_tile(out_sb[:, h:h + 1, :], o_sb[:, h:h + 1, :], z_sb[:, h:h + 1, :], w_sb)
    return _store_strided(out_sb, o.shape[0])


def test_building_block_rounds_fp32_o_tile():
    """The block itself takes an fp32 o tile and rounds it to bf16 first (one VectorE copy)."""
    shape = SHARD_SHAPES[1]
    _, z, w = stage_inputs(shape)
    o32 = np.random.default_rng(23).standard_normal((shape.B, shape.nv, shape.dv)).astype(np.float32)
    o16 = o32.astype(BF16)
    got = nki.simulate(_direct_kernel)(o32, z, w)
    assert np.array_equal(got.view(np.uint16), nki.simulate(_direct_kernel)(o16, z, w).view(np.uint16))
    assert_output_close(got, reference(o16, z, w))
    ops = Counter(i.opcode for i in nkicpu.capture(_direct_kernel)(o32, z, w).instructions)
    assert ops["tensor_copy"] == 1


def test_building_block_on_head_slices():
    o, z, w = stage_inputs(SHARD_SHAPES[5])
    got = nki.simulate(_per_head_kernel)(o, z, w)
    assert_output_close(got, reference(o, z, w))
    # same math as the one-chunk kernel; only the fp32 summation order of the matmul may differ
    np.testing.assert_allclose(got.astype(np.float32), run(o, z, w).astype(np.float32), rtol=2 ** -7, atol=0)


def _block_kernel(out_shape=(32, 2, 3), o_shape=(32, 2, 3), z_shape=(32, 2, 3), w_shape=(32, 1),
                  o_dtype=nl.bfloat16, w_dtype=nl.float32, ones_shape=None):
    @nki.jit
    def kernel(x):
        res = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        out = nl.ndarray(out_shape, nl.bfloat16)
        o = nl.ndarray(o_shape, o_dtype)
        z = nl.ndarray(z_shape, nl.bfloat16)
        w = nl.ndarray(w_shape, w_dtype)
        ones = None
        if ones_shape is not None:
            ones = nl.ndarray(ones_shape, nl.float32)
        rmsnorm_gated_tile(out, o, z, w, ones=ones)
        return res
    return kernel


@pytest.mark.parametrize("kwargs, match", [
    (dict(out_shape=(32, 2, 4)), r"out: expected shape \[32, 2, 3\], got \[32, 2, 4\]"),
    (dict(z_shape=(32, 3, 3)), r"z: expected shape \[32, 2, 3\], got \[32, 3, 3\]"),
    (dict(w_shape=(32, 2)), r"w: expected shape \[32, 1\], got \[32, 2\]"),
    (dict(o_dtype=nl.float16), r"o: expected dtype bfloat16 or float32, got float16"),
    (dict(w_dtype=nl.bfloat16), r"w: expected dtype float32, got bfloat16"),
    (dict(ones_shape=(32, 16)), r"ones: expected shape \[32, 32\], got \[32, 16\]"),
], ids=["out-shape", "z-shape", "w-shape", "o-dtype", "w-dtype", "ones-shape"])
def test_building_block_rejects(kwargs, match):
    with pytest.raises(AssertionError, match=match):
        nki.simulate(_block_kernel(**kwargs))(np.zeros((1, 1), np.float32))


# --- validation of the entry point: one test per check --------------------------------------

def _good():
    return stage_inputs(TINY_SHAPES[2])  # B 3, nv 6, dv 32


def test_rejects_o_rank():
    o, z, w = _good()
    with pytest.raises(AssertionError, match=r"o: expected a 3-d tensor, got shape \[3, 192\]"):
        run(o.reshape(3, 192), z, w)


def test_rejects_z_rank():
    o, z, w = _good()
    with pytest.raises(AssertionError, match=r"z: expected a 2-d tensor, got shape \[3, 1, 192\]"):
        run(o, z.reshape(3, 1, 192), w)


def test_rejects_norm_weight_rank():
    o, z, w = _good()
    with pytest.raises(AssertionError, match=r"norm_weight: expected a 1-d tensor, got shape \[1, 32\]"):
        run(o, z, w.reshape(1, 32))


def test_rejects_head_dim_over_128():
    o = np.zeros((1, 1, 256), BF16)
    z = np.zeros((1, 256), BF16)
    w = np.ones(256, np.float32)
    with pytest.raises(AssertionError, match=r"o: expected head_v_dim o.shape\[2\] <= 128, got 256"):
        run(o, z, w)


def test_rejects_value_dim_mismatch():
    o, z, w = _good()
    with pytest.raises(AssertionError, match=r"z: expected value_dim z.shape\[1\] == nv \* dv = 6 \* 32 = 192, got 160"):
        run(o, z[:, :160], w)


def test_rejects_norm_weight_shape():
    o, z, w = _good()
    with pytest.raises(AssertionError, match=r"norm_weight: expected shape \[32\], got \[16\]"):
        run(o, z, w[:16])


def test_rejects_o_dtype():
    o, z, w = _good()
    with pytest.raises(AssertionError, match=r"o: expected dtype bfloat16 or float32, got float16"):
        run(o.astype(np.float16), z, w)


def test_rejects_z_dtype():
    o, z, w = _good()
    with pytest.raises(AssertionError, match=r"z: expected dtype bfloat16, got float32"):
        run(o, z.astype(np.float32), w)


def test_rejects_norm_weight_dtype():
    o, z, w = _good()
    with pytest.raises(AssertionError, match=r"norm_weight: expected dtype float32, got bfloat16"):
        run(o, z, w.astype(BF16))
