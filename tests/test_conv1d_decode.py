"""Stage 2, conv1d decode: kernels/conv1d_decode.py against kernels.reference.conv1d_decode_ref.

conv_out is compared with the output tolerances (atol = rtol = 1e-2, cosine >= 0.999); the new
conv_state must be bit-exact (its columns are copies). Shapes: the tiny shapes, the real per-device
shards at B = 1, 3, 8, a conv_dim with a partial last 128-channel tile, and a batch large enough to
split the channels into several chunks. Edge cases (book/gdn/math.md): K = 2, 3, 4, window
orientation, zero state, large magnitudes, bit patterns of the state, inputs never written.
"""
import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
import nki.isa as nisa
import nki.language as nl
import nkicpu
from kernels.conv1d_decode import WINDOW_FREE_MAX, channel_chunks, conv1d_decode_kernel, conv1d_decode_tile
from kernels.configs import GDNShape
from kernels.layout import MIN_PIECE_BYTES
from kernels.reference import conv1d_decode_ref, to_numpy, to_torch
from tests.gdn_testing import (SHARD_SHAPES, TINY_SHAPES, assert_bit_exact, assert_output_close,
                               hbm_runs, run_unmodified, shapes_param)

BF16 = ml_dtypes.bfloat16
PARTIAL = GDNShape(B=2, H=128, nk=1, nv=3, dk=32, dv=48, K=3, name="partial tile")   # conv_dim 208 = 128 + 80
CHUNKED = GDNShape(B=160, H=128, nk=4, nv=8, dk=128, dv=128, name="chunked")         # 16 tiles, 6 per chunk


def conv_inputs(shape, seed=0, K=None):
    """mixed_qkv ~ N(0, 1) bf16, conv_weight ~ N(0, 1/K) fp32, conv_state ~ N(0, 1) bf16 (as make_inputs)."""
    K = K or shape.K
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((shape.B, shape.conv_dim), dtype=np.float32).astype(BF16)
    w = (rng.standard_normal((shape.conv_dim, K), dtype=np.float32) * K ** -0.5).astype(np.float32)
    s = rng.standard_normal((shape.B, shape.conv_dim, K), dtype=np.float32).astype(BF16)
    return x, w, s


def reference(x, w, s):
    out, state = conv1d_decode_ref(to_torch(x), to_torch(w), to_torch(s))
    return to_numpy(out), to_numpy(state)


def check(x, w, s):
    out, state = run_unmodified(nki.simulate(conv1d_decode_kernel), x, w, s)
    want_out, want_state = reference(x, w, s)
    assert_output_close(out, want_out, "conv_out")
    assert_bit_exact(state, want_state, "conv_state")
    return out, state


@shapes_param(TINY_SHAPES + SHARD_SHAPES + [PARTIAL, CHUNKED])
def test_matches_reference(shape):
    check(*conv_inputs(shape))


def test_chunking_is_exercised():
    assert len(channel_chunks(PARTIAL.conv_dim, PARTIAL.B, PARTIAL.K)) == 2          # full tile + partial
    chunks = channel_chunks(CHUNKED.conv_dim, CHUNKED.B, CHUNKED.K)
    assert [t for _, _, t in chunks] == [6, 6, 4]
    assert all(t * CHUNKED.B * CHUNKED.K <= WINDOW_FREE_MAX for _, _, t in chunks)
    # every real shard at B <= 8 is one chunk: five instructions of compute in all
    assert all(len(channel_chunks(s.conv_dim, s.B, s.K)) == 1 for s in SHARD_SHAPES)


@pytest.mark.parametrize("K", [2, 3, 4])
@shapes_param([TINY_SHAPES[2], SHARD_SHAPES[1]])
def test_conv_widths(shape, K):
    check(*conv_inputs(shape, seed=K, K=K))


@pytest.mark.parametrize("K", [2, 3, 4])
def test_window_orientation(K):
    """One-hot weights per column j, state columns holding distinct constants: pins which column meets w[:, j].

    The window is [state[..., 1:], x]: w[:, K-1] must hit the new token, state column 0 must be
    dropped, and the new token must land in the last column of the new state.
    """
    shape = GDNShape(B=3, H=128, nk=1, nv=2, dk=64, dv=64, K=K)    # conv_dim 256: two tiles
    B, C = shape.B, shape.conv_dim
    state = np.tile(np.arange(1, K + 1, dtype=np.float32), (B, C, 1)).astype(BF16)      # column i holds i + 1
    x = np.repeat(8.0 + np.arange(B, dtype=np.float32)[:, None], C, axis=1).astype(BF16)  # row b holds 8 + b
    for j in range(K):
        w = np.zeros((C, K), np.float32)
        w[:, j] = 1.0
        out, new_state = check(x, w, state)
        hit = x.astype(np.float32) if j == K - 1 else np.full((B, C), j + 2, np.float32)  # state column j + 1
        np.testing.assert_allclose(out.astype(np.float32), hit / (1 + np.exp(-hit)), rtol=1e-2)
        np.testing.assert_array_equal(new_state[..., :K - 1].astype(np.float32),
                                      np.broadcast_to(np.arange(2, K + 1, dtype=np.float32), (B, C, K - 1)))
        assert_bit_exact(np.ascontiguousarray(new_state[..., K - 1]), x, "new token column")


def test_zero_state():
    shape = SHARD_SHAPES[2]
    x, w, _ = conv_inputs(shape)
    s = np.zeros((shape.B, shape.conv_dim, shape.K), BF16)
    out, state = check(x, w, s)
    acc = w[None, :, -1] * x.astype(np.float32)                   # only the new token contributes
    np.testing.assert_allclose(out.astype(np.float64), acc / (1 + np.exp(-acc)), atol=1e-2, rtol=1e-2)
    assert not state[..., :-1].astype(np.float32).any()


def test_zero_everything_stays_zero():
    shape = SHARD_SHAPES[0]
    x, w, s = conv_inputs(shape)
    out, state = check(np.zeros_like(x), w, np.zeros_like(s))
    assert not out.astype(np.float32).any() and not state.astype(np.float32).any()


def test_large_magnitudes():
    shape = SHARD_SHAPES[4]
    x, w, s = conv_inputs(shape, seed=3)
    check((x.astype(np.float32) * 100).astype(BF16), w, (s.astype(np.float32) * 100).astype(BF16))


def test_state_bit_patterns_survive():
    """-0.0, subnormals and the largest finite bf16 pass through the window copies bit for bit."""
    shape = TINY_SHAPES[1]
    x, w, s = conv_inputs(shape)
    specials = np.array([-0.0, 1e-40, -1e-40, 3.3895e38, -3.3895e38, 0.0], np.float32).astype(BF16)
    s, x = s.copy(), x.copy()
    flat = s.reshape(-1)
    every7 = np.arange(0, flat.size, 7)
    flat[every7] = np.resize(specials, every7.size)
    x.reshape(-1)[:specials.size] = specials
    _, state = run_unmodified(nki.simulate(conv1d_decode_kernel), x, np.zeros_like(w), s)
    assert_bit_exact(state, reference(x, np.zeros_like(w), s)[1], "conv_state")


@shapes_param([TINY_SHAPES[0], SHARD_SHAPES[5]])
def test_inputs_unmodified(shape):
    run_unmodified(nki.simulate(conv1d_decode_kernel), *conv_inputs(shape))


# --- the building block, as the fused kernel calls it: one head tile, [P, B] ----------------------

@nki.jit
def _one_head_tile(mixed_qkv, conv_weight, conv_state, head, head_dim):
    """Channels head*head_dim .. +head_dim through the 2-d form of the building block."""
    B, K = mixed_qkv.shape[0], conv_weight.shape[1]
    c0, c1 = head * head_dim, (head + 1) * head_dim
    out = nl.ndarray((B, head_dim), nl.bfloat16, buffer=nl.shared_hbm)
    new_state = nl.ndarray((B, head_dim, K), nl.bfloat16, buffer=nl.shared_hbm)
    x = nl.ndarray((head_dim, B), nl.bfloat16)
    nisa.dma_copy(x, mixed_qkv[:, c0:c1].permute((1, 0)))
    w = nl.ndarray((head_dim, K), nl.float32)
    nisa.dma_copy(w, conv_weight[c0:c1, :])
    s = nl.ndarray((head_dim, B, K), nl.bfloat16)
    nisa.dma_copy(s, conv_state[:, c0:c1, :].permute((1, 0, 2)))
    o = nl.ndarray((head_dim, B), nl.bfloat16)
    ns = nl.ndarray((head_dim, B, K), nl.bfloat16)
    conv1d_decode_tile(o, ns, x, w, s)
    nisa.dma_copy(out.permute((1, 0)), o)
    nisa.dma_copy(new_state.permute((1, 0, 2)), ns)
    return out, new_state


def test_building_block_on_one_head_tile():
    shape = SHARD_SHAPES[4]                       # Qwen3.5-27B TP8, B = 3: head 5 is a v head
    x, w, s = conv_inputs(shape)
    out, state = nki.simulate(_one_head_tile)(x, w, s, 5, 128)
    want_out, want_state = reference(x, w, s)
    assert_output_close(out, want_out[:, 640:768], "conv_out head 5")
    assert_bit_exact(state, np.ascontiguousarray(want_state[:, 640:768]), "conv_state head 5")


def _is_layout(ins):
    """An instruction of kernels.layout: a DMA, a TensorE transpose or a PSUM eviction."""
    evicts_psum = ins.opcode == "tensor_copy" and ins.reads[0].buffer == "psum"
    return ins.opcode in ("dma_copy", "nc_transpose") or evicts_psum


def test_instruction_sequence():
    """Per chunk: 3 loads (x, w, state), the block's 5 instructions (GpSimd shift, VectorE new column,
    multiply, reduce, SiLU), 2 stores. Each load and store is one DMA, TensorE transposes and one
    PSUM eviction per bank (kernels.layout). At Qwen3.5-0.8B TP1, B = 8 (48 channel tiles): x rows
    in 16 pieces of 3 tiles (3 transposes: 8 rows x 16 pieces fill the 128 partitions, each piece
    over MIN_PIECE_BYTES), w as 48 rows of [128, K] (K transposes), state rows in 16 pieces of 3
    tiles (3 * K transposes); the stores likewise."""
    shape = SHARD_SHAPES[-1]
    ins = nkicpu.capture(conv1d_decode_kernel)(*conv_inputs(shape)).instructions
    block = [(i.engine, i.opcode) for i in ins if not _is_layout(i)]
    assert block == [("gpsimd", "tensor_copy"), ("vector", "tensor_copy"),
                     ("vector", "tensor_tensor"), ("vector", "tensor_reduce"), ("scalar", "activation")]
    first, last = (next(n for n, i in enumerate(ins) if not _is_layout(i)),
                   max(n for n, i in enumerate(ins) if not _is_layout(i)))
    dmas = [n for n, i in enumerate(ins) if i.opcode == "dma_copy"]
    assert len(dmas) == 5 and all(n < first for n in dmas[:3]) and all(n > last for n in dmas[3:])
    K = shape.K
    assert sum(i.opcode == "nc_transpose" for i in ins) == (3 + K + 3 * K) + (3 + 3 * K)
    evictions = sum(_is_layout(i) and i.opcode == "tensor_copy" for i in ins)
    assert evictions == (1 + 1 + 3) + (1 + 2)        # PSUM banks: x, w, state (one per tile); out, window


@shapes_param(SHARD_SHAPES)
def test_dmas_move_long_contiguous_runs(shape):
    """Every DMA at a real shard moves one contiguous HBM run per partition of at least
    MIN_PIECE_BYTES, or a whole row of its tensor (a transposing view would move 2- or 8-byte
    runs)."""
    c = nkicpu.capture(conv1d_decode_kernel)(*conv_inputs(shape))
    row_bytes = {shape.conv_dim * 2, shape.conv_dim * shape.K * 2, 128 * shape.K * 4}   # x / out, state, w
    for ins in c.instructions:
        if ins.opcode != "dma_copy":
            continue
        _, run, contiguous = hbm_runs(ins)
        assert contiguous, ins
        assert run >= MIN_PIECE_BYTES or run in row_bytes, (run, ins)


# --- validation: one test per check --------------------------------------------------------------

def _valid():
    return conv_inputs(TINY_SHAPES[2])             # B 3, conv_dim 256, K 4


def _bad(**change):
    x, w, s = _valid()
    args = dict(mixed_qkv=x, conv_weight=w, conv_state=s)
    args.update(change)
    return args["mixed_qkv"], args["conv_weight"], args["conv_state"]


BAD_INPUTS = {
    "mixed_qkv rank": (dict(mixed_qkv=np.zeros((3, 1, 256), BF16)), r"mixed_qkv: expected a 2-d tensor"),
    "conv_weight rank": (dict(conv_weight=np.zeros((256, 4, 1), np.float32)), r"conv_weight: expected a 2-d tensor"),
    "conv_state rank": (dict(conv_state=np.zeros((3, 256), BF16)), r"conv_state: expected a 3-d tensor"),
    "conv_weight conv_dim": (dict(conv_weight=np.zeros((128, 4), np.float32)), r"conv_weight: expected conv_dim = 256 rows"),
    "conv_state K": (dict(conv_state=np.zeros((3, 256, 3), BF16)), r"conv_state: expected shape \[3, 256, 4\], got \[3, 256, 3\]"),
    "conv_state conv_dim": (dict(conv_state=np.zeros((3, 128, 4), BF16)), r"conv_state: expected shape \[3, 256, 4\]"),
    "mixed_qkv dtype": (dict(mixed_qkv=np.zeros((3, 256), np.float32)), r"mixed_qkv: expected dtype bfloat16, got float32"),
    "conv_weight dtype": (dict(conv_weight=np.zeros((256, 4), BF16)), r"conv_weight: expected dtype float32, got bfloat16"),
    "conv_state dtype": (dict(conv_state=np.zeros((3, 256, 4), np.float32)), r"conv_state: expected dtype bfloat16, got float32"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=[c.replace(" ", "-") for c in BAD_INPUTS])
def test_rejects(case):
    change, message = BAD_INPUTS[case]
    with pytest.raises(AssertionError, match=message):
        nki.simulate(conv1d_decode_kernel)(*_bad(**change))
