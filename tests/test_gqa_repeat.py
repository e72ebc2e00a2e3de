"""Stage 3, GQA repeat: kernels/gqa_repeat.py against kernels.reference.gqa_repeat_ref.

The stage only moves bf16 values, so q, k, v must be bit-exact copies. Shapes: the tiny shapes and
the real per-device shards (G = 1, 2, 3, 4) at B = 1, 3, 8. Edge case: distinct per-head values
that tell repeat_interleave (value head h <- key head h // G) from tile (h <- h % nk). Also: the
value-head view and expand_key_heads on chip (any head range), the on-chip form of the building
block, the DMA count, inputs never written, and one test per validation.
"""
import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
import nki.isa as nisa
import nki.language as nl
import nkicpu
from kernels.configs import GDNShape
from kernels.gqa_repeat import expand_key_heads, gqa_repeat, gqa_repeat_kernel, value_heads_view
from kernels.reference import gqa_repeat_ref, to_numpy, to_torch
from tests.gdn_testing import SHARD_SHAPES, TINY_SHAPES, assert_bit_exact, run_unmodified, shapes_param

BF16 = ml_dtypes.bfloat16


def conv_out_of(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((shape.B, shape.conv_dim), dtype=np.float32).astype(BF16)


def dims(shape):
    return shape.nk, shape.dk, shape.dv


def reference(conv_out, shape):
    return tuple(to_numpy(t) for t in gqa_repeat_ref(to_torch(conv_out), *dims(shape)))


def run(conv_out, shape):
    return run_unmodified(lambda x: nki.simulate(gqa_repeat_kernel)(x, *dims(shape)), conv_out)


@shapes_param(TINY_SHAPES + SHARD_SHAPES)
def test_matches_reference(shape):
    x = conv_out_of(shape)
    for name, got, want in zip("qkv", run(x, shape), reference(x, shape)):
        assert_bit_exact(got, want, name)


def test_all_group_sizes_are_covered():
    assert {s.G for s in SHARD_SHAPES} == {1, 2, 3, 4} and {s.G for s in TINY_SHAPES} == {1, 2, 3, 4}


INTERLEAVE_SHAPES = [s for s in TINY_SHAPES + SHARD_SHAPES if s.nk > 1 and s.G > 1 and s.B == 3] + [
    GDNShape(B=2, H=128, nk=3, nv=12, dk=16, dv=8, name="tiny nk3 G4")]


@shapes_param(INTERLEAVE_SHAPES)
def test_repeat_interleave_not_tile(shape):
    """Key head j of q holds j + 1, of k -(j + 1); value head h of v holds (h + 1) / 2.

    Value head h must read key head h // G. The tiled expansion (h % nk) gives different q and k
    for these shapes (nk > 1 and G > 1), so the test tells the two apart.
    """
    B, nk, nv, dk, dv = shape.B, shape.nk, shape.nv, shape.dk, shape.dv
    heads_q = np.repeat(np.arange(1, nk + 1, dtype=np.float32), dk)
    heads_v = np.repeat(np.arange(1, nv + 1, dtype=np.float32) / 2, dv)
    x = np.tile(np.concatenate([heads_q, -heads_q, heads_v]), (B, 1)).astype(BF16)
    q, k, v = run(x, shape)
    interleave = np.arange(nv) // shape.G + 1          # repeat_interleave: h -> h // G
    tile = np.arange(nv) % nk + 1                      # tile / repeat:     h -> h % nk
    assert (interleave != tile).any()
    np.testing.assert_array_equal(q.astype(np.float32), np.broadcast_to(interleave[None, :, None], (B, nv, dk)))
    np.testing.assert_array_equal(k.astype(np.float32), -np.broadcast_to(interleave[None, :, None], (B, nv, dk)))
    np.testing.assert_array_equal(v.astype(np.float32), np.broadcast_to((np.arange(1, nv + 1) / 2)[None, :, None],
                                                                        (B, nv, dv)))
    assert not np.array_equal(q.astype(np.float32), np.broadcast_to(tile[None, :, None], (B, nv, dk)))
    # the kernel agrees with the reference's torch.repeat_interleave, bit for bit
    for name, got, want in zip("qkv", (q, k, v), reference(x, shape)):
        assert_bit_exact(got, want, name)


@nki.jit
def _view_kernel(key_heads, G):
    """key_heads [d, nk, B] (HBM) through value_heads_view, copied out as [d, nk * G, B]."""
    d, nk, B = key_heads.shape
    out = nl.ndarray((d, nk * G, B), key_heads.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray((d, nk, B), key_heads.dtype)
    nisa.dma_copy(src, key_heads)
    dst = nl.ndarray((d, nk, G, B), key_heads.dtype)
    nisa.tensor_copy(dst, value_heads_view(src, G))
    nisa.dma_copy(out, dst.reshape((d, nk * G, B)))
    return out


@pytest.mark.parametrize("nk, nv", [(1, 1), (4, 8), (2, 6), (1, 4), (16, 16), (3, 12)])
def test_value_heads_view_is_repeat_interleave(nk, nv):
    """The one GQA mechanism (the delta rule reads it, the copies are made from it): value head h
    of the view is key head h // G, as torch.repeat_interleave orders them."""
    import torch
    x = np.arange(4 * nk * 2, dtype=np.float32).reshape(4, nk, 2)
    got = nki.simulate(_view_kernel)(x, nv // nk)
    want = torch.from_numpy(x).repeat_interleave(nv // nk, dim=1).numpy()
    np.testing.assert_array_equal(got, want)


@nki.jit
def _expand_kernel(key_heads, h0, nh, G):
    """expand_key_heads of value heads h0 .. h0 + nh - 1 from key_heads [d, nkh, B] (HBM)."""
    d, nkh, B = key_heads.shape
    out = nl.ndarray((d, nh, B), key_heads.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray((d, nkh, B), key_heads.dtype)
    nisa.dma_copy(src, key_heads)
    dst = nl.ndarray((d, nh, B), key_heads.dtype)
    expand_key_heads(dst, src, h0, G)
    nisa.dma_copy(out, dst)
    return out


@pytest.mark.parametrize("h0, nh, G", [(0, 8, 2), (4, 4, 2), (0, 6, 3), (3, 3, 3), (1, 1, 3),
                                       (1, 2, 3), (2, 5, 3), (1, 9, 4), (5, 3, 1), (3, 7, 2)])
def test_expand_key_heads(h0, nh, G):
    """Any range of value heads, whole groups or cut at either end: dst[:, i] is key head
    (h0 + i) // G - h0 // G of the tile, which starts at key head h0 // G. At most three copies."""
    nkh = (h0 + nh - 1) // G - h0 // G + 1
    x = (np.arange(3 * nkh * 2, dtype=np.float32).reshape(3, nkh, 2) + 1).astype(BF16)
    c = nkicpu.capture(_expand_kernel)(x, h0, nh, G)
    want = x[:, [(h0 + i) // G - h0 // G for i in range(nh)], :]
    assert_bit_exact(c.outputs, want, "dst")
    copies = [i for i in c.instructions if i.opcode == "tensor_copy"]
    assert len(copies) <= 3
    if h0 % G == 0 and nh % G == 0:
        assert len(copies) == 1


def test_expand_key_heads_rejects_too_few_key_heads():
    message = r"key_tile: expected the key heads 0 .. 2 of value heads 1 .. 5, got 2 heads"
    with pytest.raises(AssertionError, match=message):
        nki.simulate(_expand_kernel)(np.zeros((3, 2, 2), BF16), 1, 5, 2)


@shapes_param([TINY_SHAPES[1], SHARD_SHAPES[1], SHARD_SHAPES[4], SHARD_SHAPES[7], SHARD_SHAPES[10]])
def test_dma_count(shape):
    """q and k: G DMAs each, one per position in a group; v: one DMA. No SBUF, no compute engine."""
    ins = nkicpu.capture(gqa_repeat_kernel)(conv_out_of(shape), *dims(shape)).instructions
    assert [i.opcode for i in ins] == ["dma_copy"] * (2 * shape.G + 1)
    assert all(a.buffer.endswith("hbm") for i in ins for a in i.reads + i.writes)


# --- the building block on chip: channel-major [d, heads, B] tiles --------------------------------

@nki.jit
def _on_chip_repeat(conv_out, num_k_heads, head_k_dim, num_v_heads):
    """q heads loaded channel-major [dk, nk, B], expanded on chip to [dk, nv, B], stored as [B, nv, dk]."""
    B = conv_out.shape[0]
    nk, dk, nv = num_k_heads, head_k_dim, num_v_heads
    q = nl.ndarray((B, nv, dk), nl.bfloat16, buffer=nl.shared_hbm)
    src = nl.ndarray((dk, nk, B), nl.bfloat16)
    nisa.dma_copy(src, conv_out[:, 0:nk * dk].reshape_dim(1, (nk, dk)).permute((2, 1, 0)))
    dst = nl.ndarray((dk, nv, B), nl.bfloat16)
    gqa_repeat(dst, src)
    nisa.dma_copy(q.permute((2, 1, 0)), dst)
    return q


@shapes_param([TINY_SHAPES[0], TINY_SHAPES[2], SHARD_SHAPES[0], SHARD_SHAPES[5], SHARD_SHAPES[7], SHARD_SHAPES[11]])
def test_on_chip_block(shape):
    """One VectorE tensor_copy from a stride-0 broadcast view materialises all value heads."""
    x = conv_out_of(shape)
    c = nkicpu.capture(_on_chip_repeat)(x, shape.nk, shape.dk, shape.nv)
    assert_bit_exact(c.outputs, reference(x, shape)[0], "q")
    assert [(i.engine, i.opcode) for i in c.instructions] == [
        ("dma", "dma_copy"), ("vector", "tensor_copy"), ("dma", "dma_copy")]


# --- validation: one test per check --------------------------------------------------------------

VALID = TINY_SHAPES[2]                   # B 3, nk 2, nv 6, dk 16, dv 32: conv_dim 256
BAD_INPUTS = {
    "conv_out rank": (np.zeros((3, 1, 256), BF16), (2, 16, 32), r"conv_out: expected a 2-d tensor"),
    "conv_out dtype": (np.zeros((3, 256), np.float32), (2, 16, 32), r"conv_out: expected dtype bfloat16, got float32"),
    "num_k_heads float": (np.zeros((3, 256), BF16), (2.0, 16, 32), r"num_k_heads: expected a positive Python int"),
    "num_k_heads zero": (np.zeros((3, 256), BF16), (0, 16, 32), r"num_k_heads: expected a positive Python int"),
    "head_k_dim negative": (np.zeros((3, 256), BF16), (2, -16, 32), r"head_k_dim: expected a positive Python int"),
    "head_v_dim bool": (np.zeros((3, 256), BF16), (2, 16, True), r"head_v_dim: expected a positive Python int"),
    "head_k_dim > 128": (np.zeros((3, 2 * 256 + 256), BF16), (1, 256, 32), r"head_k_dim: expected <= 128"),
    "head_v_dim > 128": (np.zeros((3, 64 + 512), BF16), (2, 16, 256), r"head_v_dim: expected <= 128"),
    "conv_dim not 2*nk*dk + nv*dv": (np.zeros((3, 250), BF16), (2, 16, 32), r"conv_out: expected conv_dim = 2\*nk\*dk \+ nv\*dv"),
    "no value heads": (np.zeros((3, 64), BF16), (2, 16, 32), r"conv_out: expected conv_dim = 2\*nk\*dk \+ nv\*dv"),
    "nv not a multiple of nk": (np.zeros((3, 64 + 5 * 32), BF16), (2, 16, 32),
                                r"conv_out: expected num_v_heads .* a multiple of num_k_heads = 2, got nv = 5"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=[c.replace(" ", "-") for c in BAD_INPUTS])
def test_rejects(case):
    x, args, message = BAD_INPUTS[case]
    with pytest.raises(AssertionError, match=message):
        nki.simulate(gqa_repeat_kernel)(x, *args)


@nki.jit
def _bad_block(conv_out):
    dst = nl.ndarray((3, 5, 16), nl.bfloat16, buffer=nl.shared_hbm)
    gqa_repeat(dst, conv_out[:, 0:32].reshape_dim(1, (2, 16)))
    return dst


def test_block_rejects_uneven_groups():
    with pytest.raises(AssertionError, match=r"dst: expected value heads dst.shape\[1\] a multiple of key heads"):
        nki.simulate(_bad_block)(np.zeros((3, 256), BF16))


def test_valid_case_is_valid():
    """The validation cases above differ from this valid call in one thing each."""
    run(conv_out_of(VALID), VALID)
