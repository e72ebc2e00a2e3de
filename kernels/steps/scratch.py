"""Composition step 2: one kernel, the stages' HBM -> HBM bodies chained through HBM scratch."""
import nki
import nki.language as nl

from ..conv1d_decode import conv1d_decode_hbm
from ..gdn_block_checks import block_dims, check_block_dtypes
from ..gdn_tkg import gdn_tkg_hbm
from ..gqa_repeat import split_heads_hbm
from ..in_proj import in_proj_hbm


def _scratch(shape, name):
    """A private HBM tensor carrying an activation from one stage body to the next."""
    return nl.ndarray(shape, nl.bfloat16, buffer=nl.hbm, name=name)


@nki.jit
def gdn_block_tkg_scratch(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state):
    """Step 2: one kernel, the stages' HBM -> HBM bodies chained through HBM scratch.

    Arguments, results and rejected inputs as `gdn_block_tkg` (one token per sequence).
    """
    B, _, nk, nv, dk, dv, K = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                                         conv_state, A_log, dt_bias, norm_weight, recurrent_state)
    check_block_dtypes(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                       dt_bias, norm_weight, recurrent_state)
    conv_dim = 2 * nk * dk + nv * dv
    mixed_qkv = _scratch((B, conv_dim), "mixed_qkv")
    z = _scratch((B, nv * dv), "z")
    a = _scratch((B, nv), "a")
    b = _scratch((B, nv), "b")
    in_proj_hbm((mixed_qkv, z, a, b), hidden, (W_in_qkv, W_in_z, W_in_a, W_in_b))

    conv_out = _scratch((B, conv_dim), "conv_out")
    new_conv_state = nl.ndarray((B, conv_dim, K), nl.bfloat16, buffer=nl.shared_hbm,
                                name="new_conv_state")
    conv1d_decode_hbm(conv_out, new_conv_state, mixed_qkv, conv_weight, conv_state)

    q = _scratch((B, nv, dk), "q")
    k = _scratch((B, nv, dk), "k")
    v = _scratch((B, nv, dv), "v")
    split_heads_hbm(q, k, v, conv_out, nk)

    out = nl.ndarray((B, 1, nv * dv), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    new_recurrent_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm,
                                     name="new_recurrent_state")
    gdn_tkg_hbm(out, new_recurrent_state, q, k, v, a, b, z, A_log, dt_bias, norm_weight,
                recurrent_state)
    return out, new_conv_state, new_recurrent_state
