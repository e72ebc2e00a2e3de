"""Composition step 5: the value heads split over the two NeuronCores of an LNC=2 launch.

Launched as gdn_block_tkg_two_cores[2], each program takes half the value heads and the key heads
they read (block_plan.split_heads): its own share of the state, of the conv windows, of z and v,
and, where those slices of a weight row stream well, of q and k. a and b (a column per head) are
projected whole on each core. Every phase already takes the plan's heads; only the plan changes.
"""
import nki

from ..block_plan import BlockPlan, split_heads, z_after_state
from .z_last import z_last_body


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
    return z_last_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                       A_log, dt_bias, norm_weight, recurrent_state)
