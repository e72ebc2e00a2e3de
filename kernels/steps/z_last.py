"""Composition step 4: z after the recurrence, where its weights outweigh the state.

z is the last projection the block needs (only the norm reads it). Projected after the delta
rule, its weights are what the DMA queues stream while the recurrence computes, instead of the
recurrence starting after every weight has landed.
"""
import nki
import nki.language as nl

from ..block_plan import BlockPlan, activation_tiles, block_outputs, z_after_state
from ..conv1d_decode import conv_groups
from ..delta_rule_pairs import pair_ones
from ..gated_delta_rule import gated_delta_rule_tokens, load_head_params, token_inputs
from ..gqa_repeat import heads_for_values
from ..in_proj import ColumnStream, load_tokens, project_columns, project_heads, project_qk
from ..layout import store_rows
from ..overlap import finish_z, start_z
from ..rmsnorm_gated import load_norm_weight, rmsnorm_gated_tile


def z_last_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                dt_bias, norm_weight, recurrent_state):
    """Step 4's plan: step 3's, and z after the recurrence where the state's bytes are under half
    of z's weight bytes."""
    p = BlockPlan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                  dt_bias, norm_weight, recurrent_state, 1)
    p.z_last = z_after_state(p)
    return p


@nki.jit
def gdn_block_tkg_z_last(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                         A_log, dt_bias, norm_weight, recurrent_state):
    """Step 4: z after the recurrence where that pays. Arguments and results as gdn_block_tkg, one
    token."""
    p = z_last_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                    dt_bias, norm_weight, recurrent_state)
    return z_last_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                       A_log, dt_bias, norm_weight, recurrent_state)


def z_last_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                dt_bias, norm_weight, recurrent_state):
    """The phases of steps 4 and 5 (the same, each on its plan's heads): step 3's, z's
    projection placed by p.z_last."""
    out, new_conv_state, new_state = block_outputs(p)
    hidden_T = load_tokens(hidden)
    qk, v, qk_c, v_c, groups = activation_tiles(p)
    # stage 1: each projection straight into the tiles the next stage reads
    a = project_heads(hidden_T, W_in_a, p.h0, p.nh, "a")
    b = project_heads(hidden_T, W_in_b, p.h0, p.nh, "b")
    project_qk(qk, hidden_T, W_in_qkv, p.q0, p.key_dim)
    project_columns(v, hidden_T, W_in_qkv, 2 * p.key_dim + p.h0 * p.dv)
    z = ColumnStream(nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="z"), hidden_T, W_in_z,
                     p.h0 * p.dv)
    start_z(z, p.z_last, None, hold=False)             # z here unless it goes last
    # stage 2: per channel group, its windows loaded, slid and stored
    conv_groups(new_conv_state, groups, conv_weight, conv_state)
    # stage 3: value head h reads key head h // G
    q, k = heads_for_values(qk_c, p.h0, p.nh, p.G)
    # stage 4
    gate_params = load_head_params(A_log, dt_bias, p.h0, p.nh)
    o = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="o")
    ones = pair_ones(p.dk, p.dv, p.nh)
    tokens = token_inputs(q, k, v_c, a, b, gate_params, None, ones, p.T)
    gated_delta_rule_tokens(o, new_state, recurrent_state, tokens, p.h0)
    finish_z(z, p.z_last)                              # or here, its DMAs behind the state's
    # stage 5, then the only activation store
    norm_w = load_norm_weight(norm_weight)
    y = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="y")
    rmsnorm_gated_tile(y, o, z.dst, norm_w, ones=ones[0:p.dv, 0:p.dv])
    store_rows(out.reshape((p.N, p.nv * p.dv))[:, p.h0 * p.dv:(p.h0 + p.nh) * p.dv], y)
    return out, new_conv_state, new_state
