"""The fused GDN decode step, `gdn_block_tkg`: the five stages in one kernel, intermediates on chip.

hidden goes in once; every activation after it (the projections, the conv window, q, k, v, the gates,
the delta-rule output) stays in SBUF, channel-major; HBM sees only the weights, the two states and
the output. The stages are their building blocks, called as they are:

  load_hidden_T, project_columns      stage 1 (in_proj), straight into per-head channel tiles
  conv1d_decode_channels              stage 2 (conv1d decode), per channel group
  (no stage 3 copy)                   GQA by indexing: the delta rule reads key head h // G
  gated_delta_rule_block              stage 4
  rmsnorm_gated_tile                  stage 5

The composition chapters reach this kernel one change at a time; the two steps before it are the
same body with one switch each, kept as entry points so the book can profile them:

  gdn_block_tkg_onchip     step 3: intermediates on chip, q and k still copied to the value heads
  gdn_block_tkg_gqa_index  step 4: GQA by indexing (no copy)
  gdn_block_tkg            step 5: the z projection issued after the recurrence, so its weight
                           stream overlaps the conv and delta-rule compute instead of delaying it
"""
import nki
import nki.isa as nisa
import nki.language as nl

from .conv1d_decode import conv1d_decode_channels
from .gated_delta_rule import gated_delta_rule_block
from .gqa_repeat import gqa_repeat
from .gdn_block_checks import block_dims
from .in_proj import load_hidden_T, project_columns
from .layout import store_rows
from .rmsnorm_gated import rmsnorm_gated_tile


@nki.jit
def gdn_block_tkg(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                  norm_weight, recurrent_state):
    """One decode step of a Qwen3.5 / Qwen3-Next gated delta-net layer, hidden to RMSNormGated output.

    Dimensions:
        B: batch; H: hidden size (a multiple of 128); nk, nv: key and value heads (nv a multiple of
        nk, nv <= 128); dk, dv: head dims (<= 128); K: conv window (2..4);
        key_dim = nk * dk, value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim.

    Args:
        hidden: [B, 1, H] @ HBM, bf16.
        W_in_qkv: [H, conv_dim] @ HBM, bf16 (in_proj_qkv.weight.T; columns q | k | v).
        W_in_z: [H, value_dim] @ HBM, bf16.
        W_in_a: [H, nv] @ HBM, bf16.
        W_in_b: [H, nv] @ HBM, bf16.
        conv_weight: [conv_dim, K] @ HBM, fp32.
        conv_state: [B, conv_dim, K] @ HBM, bf16, read only.
        A_log: [nv] @ HBM, fp32.
        dt_bias: [nv] @ HBM, fp32.
        norm_weight: [dv] @ HBM, fp32.
        recurrent_state: [B, nv, dk, dv] @ HBM, fp32, read only.

    Returns:
        out: [B, 1, value_dim] @ shared HBM, bf16, the RMSNormGated output (before out_proj).
        conv_state: [B, conv_dim, K] @ shared HBM, bf16, the new window (a new tensor).
        recurrent_state: [B, nv, dk, dv] @ shared HBM, fp32, the new state (a new tensor).

    Notes:
        - All dims come from the shapes (gdn_block_checks.block_dims, which rejects bad input with
          a ValueError naming the argument). Inputs are never written.
        - in_proj writes q | k as 2 * nk tiles of dk channels, v and z as nv tiles of dv channels,
          a and b as [nv, B]: the layouts the conv and the per-head stages read, no reshuffle.
        - The delta rule takes q, k with the nk key heads; value head h reads key head h // G
          through a view, so the GQA expansion costs nothing.

    Pseudocode:
        mixed_qkv, z, a, b = hidden @ W_in_qkv, hidden @ W_in_z, hidden @ W_in_a, hidden @ W_in_b
        conv_out, conv_state = conv1d_decode(mixed_qkv, conv_weight, conv_state)
        q, k, v = split(conv_out); q, k = repeat(q, G), repeat(k, G)
        o, recurrent_state = gated_delta_rule(q, k, v, a, b, A_log, dt_bias, recurrent_state)
        out = rmsnorm_gated(o, z, norm_weight)
    """
    return _gdn_block(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                      norm_weight, recurrent_state, gqa_by_index=True, z_last=True)


@nki.jit
def gdn_block_tkg_onchip(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                         norm_weight, recurrent_state):
    """Composition step 3: `gdn_block_tkg` with q, k copied to the value heads on chip, z projected
    with the other projections. Arguments and results as gdn_block_tkg."""
    return _gdn_block(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                      norm_weight, recurrent_state, gqa_by_index=False, z_last=False)


@nki.jit
def gdn_block_tkg_gqa_index(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                            norm_weight, recurrent_state):
    """Composition step 4: `gdn_block_tkg` with z projected with the other projections.
    Arguments and results as gdn_block_tkg."""
    return _gdn_block(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                      norm_weight, recurrent_state, gqa_by_index=True, z_last=False)


def _gdn_block(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias, norm_weight,
               recurrent_state, gqa_by_index, z_last):
    """The fused body; the two switches are the composition steps 4 and 5 (see the module docstring)."""
    d = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                   norm_weight, recurrent_state)
    B, nk, nv, dk, dv = d.B, d.nk, d.nv, d.dk, d.dv
    out = nl.ndarray((B, 1, d.value_dim), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    new_conv_state = nl.ndarray((B, d.conv_dim, d.K), nl.bfloat16, buffer=nl.shared_hbm, name="new_conv_state")
    new_recurrent_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm, name="new_recurrent_state")

    # stage 1: hidden once, then each projection straight into the tiles the next stage reads
    # (a and b first: the gates need them; z only at the end if z_last)
    hidden_T = load_hidden_T(nl.ndarray((128, B, d.H // 128), nl.bfloat16, name="hidden_T"), hidden)
    a = nl.ndarray((nv, B), nl.bfloat16, name="a")
    project_columns(a, hidden_T, W_in_a)
    b = nl.ndarray((nv, B), nl.bfloat16, name="b")
    project_columns(b, hidden_T, W_in_b)
    qk = nl.ndarray((dk, 2 * nk, B), nl.bfloat16, name="qk_proj")
    project_columns(qk, hidden_T, W_in_qkv, col0=0)
    v = nl.ndarray((dv, nv, B), nl.bfloat16, name="v_proj")
    project_columns(v, hidden_T, W_in_qkv, col0=2 * d.key_dim)
    z = nl.ndarray((dv, B, nv), nl.bfloat16, name="z")
    if not z_last:
        project_columns(z.permute((0, 2, 1)), hidden_T, W_in_z)

    # stage 2: the conv window of q | k (dk-channel tiles) and of v (dv-channel tiles)
    qk_c = nl.ndarray((dk, 2 * nk, B), nl.bfloat16, name="qk_conv")
    conv1d_decode_channels(qk_c, new_conv_state, qk, conv_weight, conv_state, c0=0)
    v_c = nl.ndarray((dv, nv, B), nl.bfloat16, name="v_conv")
    conv1d_decode_channels(v_c, new_conv_state, v, conv_weight, conv_state, c0=2 * d.key_dim)

    # stage 3: key heads as they are (value head h reads key head h // G) or copied to the value heads
    q, k = qk_c[:, 0:nk, :], qk_c[:, nk:2 * nk, :]
    if not gqa_by_index:
        q_rep = nl.ndarray((dk, nv, B), nl.bfloat16, name="q_rep")
        gqa_repeat(q_rep, q)
        k_rep = nl.ndarray((dk, nv, B), nl.bfloat16, name="k_rep")
        gqa_repeat(k_rep, k)
        q, k = q_rep, k_rep

    # stage 4: the recurrence
    A_sb = nl.ndarray((nv, 1), nl.float32, name="A_log")
    nisa.dma_copy(A_sb, A_log.reshape((nv, 1)))
    dt_sb = nl.ndarray((nv, 1), nl.float32, name="dt_bias")
    nisa.dma_copy(dt_sb, dt_bias.reshape((nv, 1)))
    o = nl.ndarray((dv, nv, B), nl.bfloat16, name="o")
    gated_delta_rule_block(o, new_recurrent_state, q, k, v_c, a, b, A_sb, dt_sb, recurrent_state)
    if z_last:
        project_columns(z.permute((0, 2, 1)), hidden_T, W_in_z)

    # stage 5, then the only activation store: rows (b, h) of dv channels
    w_sb = nl.ndarray((dv, 1), nl.float32, name="norm_weight")
    nisa.dma_copy(w_sb, norm_weight.reshape((dv, 1)))
    y = nl.ndarray((dv, B, nv), nl.bfloat16, name="y")
    rmsnorm_gated_tile(y.permute((0, 2, 1)), o, z.permute((0, 2, 1)), w_sb)
    store_rows(out.reshape((B * nv, dv)), y.reshape((dv, B * nv)))
    return out, new_conv_state, new_recurrent_state
