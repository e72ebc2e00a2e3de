"""Composition step 2: the block as the reference design describes it, one kernel with HBM scratch.

in_proj, conv1d decode, the head split with GQA, then gdn_tkg: each stage's HBM -> HBM body called
as it is, in one kernel, with private HBM scratch tensors carrying the activations from one stage to
the next. One launch instead of five; every activation still makes a round trip through HBM.
"""
import nki
import nki.language as nl

from .conv1d_decode import conv1d_decode_hbm
from .gdn_block_checks import block_dims
from .gdn_tkg import gdn_tkg_hbm
from .gqa_repeat import split_heads_hbm
from .in_proj import in_proj_hbm


@nki.jit
def gdn_block_tkg_scratch(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state):
    """One GDN decode step in one kernel, the stage bodies chained through HBM scratch.

    Arguments, results and rejected inputs as `kernels.gdn_block.gdn_block_tkg`.
    """
    d = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                   norm_weight, recurrent_state)
    B, nv, dk, dv = d.B, d.nv, d.dk, d.dv

    def scratch(shape, name):
        return nl.ndarray(shape, nl.bfloat16, buffer=nl.hbm, name=name)

    mixed_qkv, z = scratch((B, d.conv_dim), "mixed_qkv"), scratch((B, d.value_dim), "z")
    a, b = scratch((B, nv), "a"), scratch((B, nv), "b")
    in_proj_hbm((mixed_qkv, z, a, b), hidden, (W_in_qkv, W_in_z, W_in_a, W_in_b))

    conv_out = scratch((B, d.conv_dim), "conv_out")
    new_conv_state = nl.ndarray((B, d.conv_dim, d.K), nl.bfloat16, buffer=nl.shared_hbm, name="new_conv_state")
    conv1d_decode_hbm(conv_out, new_conv_state, mixed_qkv, conv_weight, conv_state)

    q, k, v = scratch((B, nv, dk), "q"), scratch((B, nv, dk), "k"), scratch((B, nv, dv), "v")
    split_heads_hbm(q, k, v, conv_out, d.nk)

    out = nl.ndarray((B, 1, d.value_dim), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    new_recurrent_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm, name="new_recurrent_state")
    gdn_tkg_hbm(out, new_recurrent_state, q, k, v, a, b, z, A_log, dt_bias, norm_weight, recurrent_state)
    return out, new_conv_state, new_recurrent_state
