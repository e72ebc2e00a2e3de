"""Composition step 5: the value heads split over the two NeuronCores of an LNC=2 launch.

Launched as gdn_block_tkg_two_cores[2], each program takes half the value heads and the key heads
they read (block_plan.split_heads): its own share of the state, of the conv windows, of z and v,
and, where those slices of a weight row stream well, of q and k. a and b (a column per head) are
projected whole on each core. Every phase already takes the plan's heads; only the plan changes.
"""
import nki
import nki.language as nl

from ..block_plan import BlockPlan, block_outputs, split_heads, z_after_state
from ..conv1d_decode import channel_groups, conv_groups
from ..delta_rule_pairs import pair_ones
from ..gated_delta_rule import gated_delta_rule_tokens, load_head_params, token_inputs
from ..gqa_repeat import heads_for_values
from ..in_proj import ColumnStream, load_tokens, project_columns, project_heads, project_qk
from ..layout import store_rows
from ..overlap import finish_z, start_z
from ..rmsnorm_gated import load_norm_weight, rmsnorm_gated_tile


def two_cores_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                   dt_bias, norm_weight, recurrent_state):
    """Step 5's plan: step 4's, with this program's share of the heads."""
    p = BlockPlan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                  dt_bias, norm_weight, recurrent_state, 1)
    split_heads(p)
    p.z_last = z_after_state(p)
    return p


@nki.jit
def gdn_block_tkg_two_cores(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                            A_log, dt_bias, norm_weight, recurrent_state):
    """Step 5, launched as gdn_block_tkg_two_cores[2]: half the heads per core. Arguments and
    results as gdn_block_tkg, one token."""
    p = two_cores_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                    dt_bias, norm_weight, recurrent_state)
    out, new_conv_state, new_state = block_outputs(p)
    hidden_T = load_tokens(hidden)
    qk = nl.ndarray((p.dk, 2, p.nq, p.N), nl.bfloat16, name="qk_proj")     # q heads, then k heads
    v = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="v_proj")
    qk_c = nl.ndarray((p.dk, 2, p.nkh, p.N), nl.bfloat16, name="qk_conv")
    v_c = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="v_conv")
    groups = channel_groups(qk_c, qk, v_c, v, p.k0, p.key_dim, 2 * p.key_dim + p.h0 * p.dv)
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
