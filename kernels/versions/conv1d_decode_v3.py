"""Stage 2, version 3: version 2 with one load and one store per tensor for many tiles.

Version 2 pays three loads and two stores per 128-channel tile, and every transfer its fixed
latency. Here a chunk of tiles (all of them, for every real shard at decode batches) moves
together, with the chunks of the final kernel; the compute is still version 1's, tile by tile.
"""
import nki
import nki.language as nl

from ..conv1d_decode import channel_chunks
from ..layout import load_channel_major, store_rows
from .conv1d_decode_v1 import check_conv_args, conv_tile_v1


@nki.jit
def conv1d_decode_v3(mixed_qkv, conv_weight, conv_state):
    """Stage 2, version 3: version 2 with the transfers of a chunk of tiles merged.

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
        - Per chunk of T tiles: three loads and two stores through kernels.layout; the conv
          still takes K + 3 instructions per tile.

    Pseudocode:
        as version 2, with the loads and stores of a chunk's tiles merged
    """
    check_conv_args(mixed_qkv, conv_weight, conv_state)
    B, conv_dim = mixed_qkv.shape
    K = conv_weight.shape[1]
    conv_out = nl.ndarray((B, conv_dim), nl.bfloat16, buffer=nl.shared_hbm, name="conv_out")
    new_state = nl.ndarray((B, conv_dim, K), nl.bfloat16, buffer=nl.shared_hbm,
                           name="new_conv_state")
    for c0, P, T in channel_chunks(conv_dim, B, K):
        c1 = c0 + T * P
        x = nl.ndarray((P, T, B), nl.bfloat16, name="x")
        load_channel_major(x, mixed_qkv[:, c0:c1])
        w = nl.ndarray((P, T, K), nl.float32, name="w")     # T rows of P*K weights
        load_channel_major(w.expand_dim(1), conv_weight[c0:c1, :].reshape((T, P, K)))
        state = nl.ndarray((P, T, B, K), nl.bfloat16, name="state")
        load_channel_major(state, conv_state[:, c0:c1, :])
        out = nl.ndarray((P, T, B), nl.bfloat16, name="out")
        window = nl.ndarray((P, T, B, K), nl.bfloat16, name="window")
        for t in range(T):
            conv_tile_v1(out[:, t], window[:, t], x[:, t], w[:, t], state[:, t])
        store_rows(conv_out[:, c0:c1], out)
        store_rows(new_state[:, c0:c1, :], window)
    return conv_out, new_state
