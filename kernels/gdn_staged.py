"""Composition steps 0 and 1: separate kernel launches, activations through HBM.

Host code, not a kernel: each launch is a standalone `@nki.jit` entry point that reads its inputs from
HBM and writes its outputs to HBM (a NeuronCore on a trn instance, the CPU model elsewhere). Same
arguments and results as `gdn_block_tkg`.

  gdn_block_staged       step 0, the baseline: the five stage kernels back to back (five launches)
  gdn_block_staged_tkg   step 1: stages 4 and 5 replaced by the fused `gdn_tkg` (four launches)
"""
from .conv1d_decode import conv1d_decode_kernel
from .gated_delta_rule import gated_delta_rule_kernel
from .gdn_tkg import gdn_tkg
from .gqa_repeat import gqa_repeat_kernel
from .in_proj import in_proj_kernel
from .rmsnorm_gated import rmsnorm_gated_kernel


def head_dims(conv_weight, A_log, recurrent_state):
    """(nk, dk, dv) from the block's tensor shapes: nv = len(A_log), dk, dv from the state,
    nk = (conv_dim - nv * dv) / (2 * dk). The stage kernels check the rest."""
    nv, dk, dv = recurrent_state.shape[1:]
    return (conv_weight.shape[0] - nv * dv) // (2 * dk), dk, dv


def _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, recurrent_state):
    nk, dk, dv = head_dims(conv_weight, A_log, recurrent_state)
    mixed_qkv, z, a, b = in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b)
    conv_out, new_conv_state = conv1d_decode_kernel(mixed_qkv, conv_weight, conv_state)
    q, k, v = gqa_repeat_kernel(conv_out, nk, dk, dv)
    return q, k, v, z, a, b, new_conv_state


def gdn_block_staged(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                     dt_bias, norm_weight, recurrent_state):
    """One GDN decode step as five kernel launches; returns (out, conv_state, recurrent_state)."""
    q, k, v, z, a, b, new_conv_state = _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                                                      conv_state, A_log, recurrent_state)
    o, new_recurrent_state = gated_delta_rule_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    out = rmsnorm_gated_kernel(o, z, norm_weight)
    return out, new_conv_state, new_recurrent_state


def gdn_block_staged_tkg(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                         dt_bias, norm_weight, recurrent_state):
    """One GDN decode step as four launches, the last one `gdn_tkg`; returns as gdn_block_staged."""
    q, k, v, z, a, b, new_conv_state = _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                                                      conv_state, A_log, recurrent_state)
    out, new_recurrent_state = gdn_tkg(q, k, v, a, b, z, A_log, dt_bias, norm_weight, recurrent_state)
    return out, new_conv_state, new_recurrent_state
