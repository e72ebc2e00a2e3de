"""Stage 2, version 2: version 1 with its DMAs moving whole rows.

The transposed HBM views of version 1 cut every transfer into runs of 2 to 8 bytes. Here each
tile moves as contiguous rows and TensorE turns it around on chip (kernels/layout.py); the
compute is version 1's, one 128-channel tile at a time.
"""
import nki
import nki.language as nl

from ..layout import load_channel_major, store_rows
from .conv1d_decode_v1 import check_conv_args, conv_tile_v1


@nki.jit
def conv1d_decode_v2(mixed_qkv, conv_weight, conv_state):
    """Stage 2, version 2: version 1 with row DMAs and TensorE transposes.

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
        - Per 128-channel tile: three row loads and two row stores through kernels.layout.

    Pseudocode:
        as version 1; each load is rows -> TensorE transposes, each store the reverse
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
        load_channel_major(x, mixed_qkv[:, c0:c1])
        w = nl.ndarray((P, K), nl.float32, name="w")        # one row of P*K weights
        load_channel_major(w.expand_dim(1).expand_dim(1), conv_weight[c0:c1, :].expand_dim(0))
        state = nl.ndarray((P, B, K), nl.bfloat16, name="state")
        load_channel_major(state, conv_state[:, c0:c1, :])
        out = nl.ndarray((P, B), nl.bfloat16, name="out")
        window = nl.ndarray((P, B, K), nl.bfloat16, name="window")
        conv_tile_v1(out, window, x, w, state)
        store_rows(conv_out[:, c0:c1], out)
        store_rows(new_state[:, c0:c1, :], window)
    return conv_out, new_state
