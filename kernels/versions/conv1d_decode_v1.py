"""Stage 2, version 1: the conv1d decode step written the obvious way.

One 128-channel tile at a time, loaded and stored by DMAs through transposed HBM views, and the
conv as K multiply-adds with each partition's weight as the scalar operand. Correct and slow; the
chapter (stages/02_conv1d_decode) profiles it and takes it to kernels/conv1d_decode.py.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from ..checks import expect, expect_dtype, expect_rank, expect_shape
from ..conv1d_decode import K_MAX, K_MIN


def check_conv_args(mixed_qkv, conv_weight, conv_state):
    """The entry checks of every version (ranks, shapes, K, dtypes), each naming its argument."""
    expect_rank(mixed_qkv, "mixed_qkv", 2)
    expect_rank(conv_weight, "conv_weight", 2)
    B, conv_dim = mixed_qkv.shape
    K = conv_weight.shape[1]
    expect_shape(conv_weight, "conv_weight", (conv_dim, K))
    expect(K_MIN <= K <= K_MAX, "conv_weight", f"a conv window K in {K_MIN}..{K_MAX}", K)
    expect_shape(conv_state, "conv_state", (B, conv_dim, K))
    expect_dtype(mixed_qkv, "mixed_qkv", nl.bfloat16)
    expect_dtype(conv_weight, "conv_weight", nl.float32)
    expect_dtype(conv_state, "conv_state", nl.bfloat16)


def conv_tile_v1(out, window, x, w, state):
    """One channel tile: out[P, B] = silu(sum_j window[:, :, j] * w[:, j]); window[P, B, K] the
    new state. K + 3 instructions: two copies, K multiply-adds (VectorE), the SiLU (ScalarE)."""
    P, B = x.shape
    K = w.shape[1]
    nisa.tensor_copy(window[:, :, 0:K - 1], state[:, :, 1:K])
    nisa.tensor_copy(window[:, :, K - 1], x)
    acc = nl.ndarray((P, B), nl.float32, name="conv_acc")
    nisa.tensor_scalar(acc, window[:, :, 0], op0=nl.multiply, operand0=w[:, 0:1])
    for j in range(1, K):
        nisa.scalar_tensor_tensor(acc, data=window[:, :, j], op0=nl.multiply,
                                  operand0=w[:, j:j + 1], op1=nl.add, operand1=acc)
    nisa.activation(out, op=nl.silu, data=acc)


@nki.jit
def conv1d_decode_v1(mixed_qkv, conv_weight, conv_state):
    """Stage 2, version 1: one depthwise causal conv1d decode step + SiLU, tile by tile.

    Dimensions:
        B: batch; conv_dim: channels; K: conv window, 2..4

    Args:
        mixed_qkv (nl.ndarray): [B, conv_dim] @ HBM, bf16, the new token.
        conv_weight (nl.ndarray): [conv_dim, K] @ HBM, fp32.
        conv_state (nl.ndarray): [B, conv_dim, K] @ HBM, bf16, oldest token in column 0.

    Returns:
        conv_out (nl.ndarray): [B, conv_dim] @ shared HBM, bf16.
        new_conv_state (nl.ndarray): [B, conv_dim, K] @ shared HBM, bf16.

    Notes:
        - Rejects (an assertion naming the argument) wrong ranks, shapes, K or dtypes.
        - Channel c0 + p on partition p; every DMA goes through a transposed HBM view, so it
          moves runs of 2 bytes (mixed_qkv, conv_out) or 2*K bytes (conv_state).

    Pseudocode:
        for each 128-channel tile c0:
            window = concatenate([conv_state[:, c, 1:], mixed_qkv[:, c, None]], axis=2)
            acc = sum_j window[..., j] * conv_weight[c, j]                         # fp32
            conv_out[:, c] = silu(acc); new_conv_state[:, c] = window
    """
    check_conv_args(mixed_qkv, conv_weight, conv_state)
    B, conv_dim = mixed_qkv.shape
    K = conv_weight.shape[1]
    conv_out = nl.ndarray((B, conv_dim), nl.bfloat16, buffer=nl.shared_hbm, name="conv_out")
    new_state = nl.ndarray((B, conv_dim, K), nl.bfloat16, buffer=nl.shared_hbm,
                           name="new_conv_state")
    for c0 in range(0, conv_dim, nl.tile_size.pmax):
        c1 = min(conv_dim, c0 + nl.tile_size.pmax)
        P = c1 - c0
        x = nl.ndarray((P, B), nl.bfloat16, name="x")
        nisa.dma_copy(x, mixed_qkv[:, c0:c1].permute((1, 0)))
        w = nl.ndarray((P, K), nl.float32, name="w")
        nisa.dma_copy(w, conv_weight[c0:c1, :])
        state = nl.ndarray((P, B, K), nl.bfloat16, name="state")
        nisa.dma_copy(state, conv_state[:, c0:c1, :].permute((1, 0, 2)))
        out = nl.ndarray((P, B), nl.bfloat16, name="out")
        window = nl.ndarray((P, B, K), nl.bfloat16, name="window")
        conv_tile_v1(out, window, x, w, state)
        nisa.dma_copy(conv_out[:, c0:c1].permute((1, 0)), out)
        nisa.dma_copy(new_state[:, c0:c1, :].permute((1, 0, 2)), window)
    return conv_out, new_state
