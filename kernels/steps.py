"""The composition ladder: the entry points of composition steps 0 to 11, each with its number.

Every step runs the whole decode step with the arguments and results of `gdn_block_tkg`, which is
step 12 (`kernels/gdn_block.py`).

  0  gdn_block_staged          the five stage kernels, five launches, activations through HBM
  1  gdn_block_staged_tkg      stages 4 and 5 fused into `gdn_tkg`: four launches
  2  gdn_block_tkg_scratch     one kernel, the stages' HBM bodies chained through HBM scratch
  3  gdn_block_tkg_onchip      intermediates on chip; q and k copied to the value heads
  4  gdn_block_tkg_gqa_index   GQA by indexing: value head h reads key head h // G, no copy
  5  gdn_block_tkg_z_queued    z projected after the recurrence when that overlaps its weights
                               with the state stream; its weight DMAs queued with the matmuls
  6  gdn_block_tkg_whole_qk    launched as gdn_block_tkg_whole_qk[2]: heads split over two cores,
                               each projecting q | k whole
  7  gdn_block_tkg_z_queued    launched as gdn_block_tkg_z_queued[2]: each core projects only its
                               own key heads' q | k columns
  8  gdn_block_tkg_z_early     z's weight DMAs issued inside the recurrence, ahead of its state
                               stores; the small inputs still loaded where their stages use them
  9  gdn_block_tkg_loads_first the small inputs loaded ahead of the weights; the weights on the
                               compiler's queues and z's matmuls after the recurrence
 10  gdn_block_tkg_queue_roles where z is last, every weight on SyncE's queue in TensorE's order,
                               z's matmuls as its chunks land
 11  gdn_block_tkg_off_path    a | b in one matmul per row tile, the first token's gates prepared
                               as a and b land, small stores and functions moved off the path

Steps 0 and 1 are host code: each launch is a standalone `@nki.jit` kernel reading and writing HBM.
"""
import nki
import nki.language as nl

from .conv1d_decode import conv1d_decode_hbm, conv1d_decode_kernel
from .gated_delta_rule import gated_delta_rule_kernel
from .gdn_block import gdn_block_body
from .gdn_block_checks import block_dims, check_block_dtypes
from .gdn_tkg import gdn_tkg, gdn_tkg_hbm
from .gqa_repeat import gqa_repeat_kernel, split_heads_hbm
from .in_proj import in_proj_hbm, in_proj_kernel
from .rmsnorm_gated import rmsnorm_gated_kernel


def _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                   dt_bias, norm_weight, recurrent_state):
    """Launch in_proj, conv1d decode and gqa_repeat; return q, k, v, z, a, b and the new conv
    state."""
    _, _, nk, _, dk, dv, _ = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                                        conv_state, A_log, dt_bias, norm_weight, recurrent_state)
    check_block_dtypes(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                       dt_bias, norm_weight, recurrent_state)
    mixed_qkv, z, a, b = in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b)
    conv_out, new_conv_state = conv1d_decode_kernel(mixed_qkv, conv_weight, conv_state)
    q, k, v = gqa_repeat_kernel(conv_out, nk, dk, dv)
    return q, k, v, z, a, b, new_conv_state


def gdn_block_staged(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                     dt_bias, norm_weight, recurrent_state):
    """Step 0: one GDN decode step as five kernel launches; returns (out, conv_state,
    recurrent_state)."""
    q, k, v, z, a, b, new_conv_state = _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b,
                                                      conv_weight, conv_state, A_log, dt_bias,
                                                      norm_weight, recurrent_state)
    o, new_recurrent_state = gated_delta_rule_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    out = rmsnorm_gated_kernel(o, z, norm_weight)
    return out, new_conv_state, new_recurrent_state


def gdn_block_staged_tkg(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                         dt_bias, norm_weight, recurrent_state):
    """Step 1: four launches, the last one `gdn_tkg`; returns as gdn_block_staged."""
    q, k, v, z, a, b, new_conv_state = _stages_1_to_3(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b,
                                                      conv_weight, conv_state, A_log, dt_bias,
                                                      norm_weight, recurrent_state)
    out, new_recurrent_state = gdn_tkg(q, k, v, a, b, z, A_log, dt_bias, norm_weight,
                                       recurrent_state)
    return out, new_conv_state, new_recurrent_state


def _scratch(shape, name):
    """A private HBM tensor carrying an activation from one stage body to the next."""
    return nl.ndarray(shape, nl.bfloat16, buffer=nl.hbm, name=name)


@nki.jit
def gdn_block_tkg_scratch(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state):
    """Step 2: one kernel, the stages' HBM -> HBM bodies chained through HBM scratch.

    Arguments, results and rejected inputs as `gdn_block_tkg`.
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


@nki.jit
def gdn_block_tkg_onchip(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                         dt_bias, norm_weight, recurrent_state):
    """Step 3: `gdn_block_tkg`'s body with q, k copied to the value heads on chip and z projected
    with the other projections. Arguments and results as gdn_block_tkg."""
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state, gqa_by_index=False, place_z=False,
                          qk_slices=False, z_early=False)


@nki.jit
def gdn_block_tkg_gqa_index(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                            A_log, dt_bias, norm_weight, recurrent_state):
    """Step 4: `gdn_block_tkg`'s body with z projected with the other projections.
    Arguments and results as gdn_block_tkg."""
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state, gqa_by_index=True, place_z=False,
                          qk_slices=False, z_early=False)


@nki.jit
def gdn_block_tkg_whole_qk(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                           A_log, dt_bias, norm_weight, recurrent_state):
    """Step 6, launched on an LNC=2 grid: `gdn_block_tkg`'s body with q | k projected whole on
    every program. Arguments and results as gdn_block_tkg."""
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state, gqa_by_index=True, place_z=True,
                          qk_slices=False, z_early=False)


@nki.jit
def gdn_block_tkg_z_queued(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                           A_log, dt_bias, norm_weight, recurrent_state):
    """Steps 5 and 7 (launched on an LNC=2 grid): `gdn_block_tkg`'s body with z's weight DMAs
    issued with its matmuls, after the recurrence's state stores. Arguments and results as
    gdn_block_tkg."""
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state, gqa_by_index=True, place_z=True,
                          qk_slices=True, z_early=False)


@nki.jit
def gdn_block_tkg_z_early(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                          A_log, dt_bias, norm_weight, recurrent_state):
    """Step 8: `gdn_block_tkg`'s body with the small inputs loaded where their stages use them
    (behind the weight chunks and the state stores on the DMA queues) and each conv group loaded,
    computed and stored in turn. Arguments and results as gdn_block_tkg."""
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state, gqa_by_index=True, place_z=True,
                          qk_slices=True, z_early=True, loads_first=False)


@nki.jit
def gdn_block_tkg_loads_first(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                              A_log, dt_bias, norm_weight, recurrent_state):
    """Step 9: `gdn_block_tkg`'s body with the weights and state stores on the DMA queues the
    compiler picks in turn, and z's matmuls after the recurrence. Arguments and results as
    gdn_block_tkg."""
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state, gqa_by_index=True, place_z=True,
                          qk_slices=True, z_early=True, loads_first=True, queue_roles=False)


@nki.jit
def gdn_block_tkg_queue_roles(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                              A_log, dt_bias, norm_weight, recurrent_state):
    """Step 10: `gdn_block_tkg`'s body with a and b projected apart (their heads copied to a tile
    of their own on an LNC grid), the gates prepared inside the recurrence, the conv windows
    stored on the compiler's queues and the norm's rsqrt after silu(z). Arguments and results as
    gdn_block_tkg."""
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state, gqa_by_index=True, place_z=True,
                          qk_slices=True, z_early=True, loads_first=True, queue_roles=True)


@nki.jit
def gdn_block_tkg_off_path(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                           A_log, dt_bias, norm_weight, recurrent_state):
    """Step 11: `gdn_block_tkg`'s body with z's evictions before the conv where z is first, q's and
    k's slices in matmuls of their own, the head parameters broadcast inside the gates'
    preparation and every projection's bank evicted whole. Arguments and results as
    gdn_block_tkg."""
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                          dt_bias, norm_weight, recurrent_state, gqa_by_index=True, place_z=True,
                          qk_slices=True, z_early=True, loads_first=True, queue_roles=True,
                          off_path=True)
