"""Composition step 6: the DMA queues run in issue order, so the kernel issues in the order it
wants the bytes.

Where z goes last, its weight DMAs go ahead of the state stores, which wait for the recurrence's
compute: on the compiler's queues, issued by the recurrence right after its first state loads
(kernels/overlap.py); where z's sums fit beside the recurrence's PSUM, every weight instead goes
on SyncE's hardware-DGE queue in the order TensorE reads it, z's chunks last, so that they land
one by one in order while the state streams on the compiler's queues, and z's matmuls run as its
chunks land: two after the conv, one in each of the recurrence's TensorE waits, the rest after
it. The last state stores follow z's chunks on SyncE's queue, taking no bandwidth from them.
Launched on one core or two ([2]).
"""
import nki
import nki.language as nl

from ..block_plan import (BlockPlan, activation_tiles, block_outputs, one_weight_queue,
                          split_heads, z_after_state)
from ..conv1d_decode import conv_groups
from ..delta_rule_pairs import pair_ones
from ..gated_delta_rule import gated_delta_rule_tokens, load_head_params, token_inputs
from ..gqa_repeat import heads_for_values
from ..in_proj import ColumnStream, load_tokens, project_columns, project_heads, project_qk
from ..layout import store_rows
from ..overlap import continue_z, finish_z, start_z, z_beside
from ..rmsnorm_gated import load_norm_weight, rmsnorm_gated_tile


def queues_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                dt_bias, norm_weight, recurrent_state):
    """Step 6's plan: step 5's, and every weight on SyncE's queue where z goes last and its sums
    fit beside the recurrence's."""
    p = BlockPlan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                  dt_bias, norm_weight, recurrent_state, 1)
    split_heads(p)
    p.z_last = z_after_state(p)
    p.weight_queue = one_weight_queue(p)
    return p


@nki.jit
def gdn_block_tkg_queues(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                         A_log, dt_bias, norm_weight, recurrent_state):
    """Step 6: the bytes issued in the order they are wanted. Arguments and results as
    gdn_block_tkg, one token."""
    p = queues_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                    dt_bias, norm_weight, recurrent_state)
    return queues_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                       A_log, dt_bias, norm_weight, recurrent_state)


def queues_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                dt_bias, norm_weight, recurrent_state):
    """Step 6's phases, on plan p's heads, queues and tiles."""
    out, new_conv_state, new_state = block_outputs(p)
    hidden_T = load_tokens(hidden)
    qk, v, qk_c, v_c, groups = activation_tiles(p)
    # stage 1: each projection straight into the tiles the next stage reads
    a = project_heads(hidden_T, W_in_a, p.h0, p.nh, "a", p.weight_queue)
    b = project_heads(hidden_T, W_in_b, p.h0, p.nh, "b", p.weight_queue)
    project_qk(qk, hidden_T, W_in_qkv, p.q0, p.key_dim, p.weight_queue)
    project_columns(v, hidden_T, W_in_qkv, 2 * p.key_dim + p.h0 * p.dv, p.weight_queue)
    z = ColumnStream(nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="z"), hidden_T, W_in_z,
                     p.h0 * p.dv)
    start_z(z, p.z_last, p.weight_queue, hold=False)   # z here, or its chunks on the queue
    # stage 2: per channel group, its windows loaded, slid and stored
    conv_groups(new_conv_state, groups, conv_weight, conv_state)
    continue_z(z, p.z_last, p.weight_queue)
    # stage 3: value head h reads key head h // G
    q, k = heads_for_values(qk_c, p.h0, p.nh, p.G)
    # stage 4, z's weights beside it where z goes last
    gate_params = load_head_params(A_log, dt_bias, p.h0, p.nh)
    o = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="o")
    ones = pair_ones(p.dk, p.dv, p.nh)
    beside = z_beside(z, p.z_last, p.weight_queue, fill=True)
    tokens = token_inputs(q, k, v_c, a, b, gate_params, None, ones, p.T)
    gated_delta_rule_tokens(o, new_state, recurrent_state, tokens, p.h0, beside)
    finish_z(z, p.z_last)
    # stage 5, then the only activation store
    norm_w = load_norm_weight(norm_weight)
    y = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="y")
    rmsnorm_gated_tile(y, o, z.dst, norm_w, ones=ones[0:p.dv, 0:p.dv])
    store_rows(out.reshape((p.N, p.nv * p.dv))[:, p.h0 * p.dv:(p.h0 + p.nh) * p.dv], y)
    return out, new_conv_state, new_state
