"""Composition step 3: one kernel, every intermediate on chip.

hidden goes in once; each stage's building block writes the SBUF tiles the next one reads,
channel-major; value head h reads key head h // G from the conv's output (GQA by indexing). HBM
sees only the weights, the two states and the output.
"""
import nki
import nki.language as nl

from ..block_plan import BlockPlan, activation_tiles, block_outputs
from ..conv1d_decode import conv_groups
from ..delta_rule_pairs import pair_ones
from ..gated_delta_rule import gated_delta_rule_tokens, load_head_params, token_inputs
from ..gqa_repeat import heads_for_values
from ..in_proj import load_tokens, project_columns, project_heads, project_qk
from ..layout import store_rows
from ..rmsnorm_gated import load_norm_weight, rmsnorm_gated_tile


def onchip_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                dt_bias, norm_weight, recurrent_state):
    """Step 3's plan: the dims, one token per sequence, one program taking every head."""
    return BlockPlan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                     dt_bias, norm_weight, recurrent_state, 1)


@nki.jit
def gdn_block_tkg_onchip(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                         A_log, dt_bias, norm_weight, recurrent_state):
    """Step 3: the five stages on chip. Arguments and results as gdn_block_tkg, one token."""
    p = onchip_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                    dt_bias, norm_weight, recurrent_state)
    return onchip_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                       A_log, dt_bias, norm_weight, recurrent_state)


def onchip_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                dt_bias, norm_weight, recurrent_state):
    """Step 3's phases, on plan p's heads and tiles."""
    out, new_conv_state, new_state = block_outputs(p)
    hidden_T = load_tokens(hidden)
    qk, v, qk_c, v_c, groups = activation_tiles(p)
    # stage 1: each projection straight into the tiles the next stage reads
    a = project_heads(hidden_T, W_in_a, p.h0, p.nh, "a")
    b = project_heads(hidden_T, W_in_b, p.h0, p.nh, "b")
    project_qk(qk, hidden_T, W_in_qkv, p.q0, p.key_dim)
    project_columns(v, hidden_T, W_in_qkv, 2 * p.key_dim + p.h0 * p.dv)
    z = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="z")
    project_columns(z, hidden_T, W_in_z, p.h0 * p.dv)
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
    # stage 5, then the only activation store
    norm_w = load_norm_weight(norm_weight)
    y = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="y")
    rmsnorm_gated_tile(y, o, z, norm_w, ones=ones[0:p.dv, 0:p.dv])
    store_rows(out.reshape((p.N, p.nv * p.dv))[:, p.h0 * p.dv:(p.h0 + p.nh) * p.dv], y)
    return out, new_conv_state, new_state
