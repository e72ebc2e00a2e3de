"""The fused GDN decode step, `gdn_block_tkg`: the five stages in one kernel, intermediates on chip.

hidden goes in once; every activation after it (the projections, the conv window, q, k, v, the gates,
the delta-rule output) stays in SBUF, channel-major; HBM sees only the weights, the two states and
the output. The stages are their building blocks, called as they are:

  load_hidden_T, project_columns      stage 1 (in_proj), straight into per-head channel tiles
  conv1d_decode_channels              stage 2 (conv1d decode), per channel group
  (no stage 3 copy)                   GQA by indexing: the delta rule reads key head h // G
  gated_delta_rule_block              stage 4
  rmsnorm_gated_tile                  stage 5

It is composition step 5 (z projected after the recurrence when its weights outweigh the state
stream, so they load while the conv and the delta rule compute) and, as gdn_block_tkg[2], step 6:
value heads split between the two NeuronCores of an LNC=2 launch grid. Steps 3 and 4 are the same
body with one switch each (kernels/steps.py).
"""
import nki
import nki.isa as nisa
import nki.language as nl

from .checks import expect
from .conv1d_decode import conv1d_decode_channels
from .gated_delta_rule import gated_delta_rule_block
from .gqa_repeat import gqa_repeat
from .gdn_block_checks import block_dims
from .in_proj import load_hidden_T, project_columns
from .layout import store_rows
from .rmsnorm_gated import rmsnorm_gated_tile

# SBUF per partition the fused kernel's activations may take: the rest of the 224 KiB holds the
# delta rule's state ring (64 KiB) and the stages' temporaries (checked with nkicpu's capacity
# accounting up to Qwen3-Next-80B TP1 at B = 256).
ACTIVATION_SBUF_BYTES = 120 * 1024


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
          an assertion naming the argument). Inputs are never written.
        - in_proj writes q | k as 2 * nk tiles of dk channels, v and z as nv tiles of dv channels,
          a and b as [nv, B]: the layouts the conv and the per-head stages read, no reshuffle.
        - The delta rule takes q, k with the nk key heads; value head h reads key head h // G
          through a view, so the GQA expansion costs nothing.
        - Launch it as gdn_block_tkg[2] for an LNC=2 logical core: program c handles value heads
          c * nv / 2 .. (c + 1) * nv / 2 - 1 and the key heads they read, and streams only their v
          and z weight columns; q | k, a and b are projected whole on both (their per-program
          column slices would be sub-512 B weight runs). Needs nv even.
        - Constraints: nv <= 128, dk, dv <= 128, K in 2..4, and a batch whose activations fit on chip:
          2 * B * (4 * nk + 5 * nv + H / 128) <= 120 KiB per partition (B <= 256 at Qwen3-Next-80B
          TP1, the largest shard; every activation of the batch stays in SBUF).

    Pseudocode:
        mixed_qkv, z, a, b = hidden @ W_in_qkv, hidden @ W_in_z, hidden @ W_in_a, hidden @ W_in_b
        conv_out, conv_state = conv1d_decode(mixed_qkv, conv_weight, conv_state)
        q, k, v = split(conv_out); q, k = repeat(q, G), repeat(k, G)
        o, recurrent_state = gated_delta_rule(q, k, v, a, b, A_log, dt_bias, recurrent_state)
        out = rmsnorm_gated(o, z, norm_weight)
    """
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                      norm_weight, recurrent_state, gqa_by_index=True, place_z=True)


def gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias, norm_weight,
               recurrent_state, gqa_by_index, place_z):
    """The fused body; the two switches are composition steps 4 and 5 (kernels/steps.py).

    Launched on an LNC grid (kernel[2]), program c takes value heads h0 .. h1 - 1 (nv / 2 each) and
    the key heads they read; both load hidden. Every HBM write of a program is its own heads'
    slice, except the conv state of a key head both programs read (nk odd), written twice with the
    same values.
    """
    d = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                   norm_weight, recurrent_state)
    B, nk, nv, dk, dv = d.B, d.nk, d.nv, d.dk, d.dv
    G = nv // nk
    act_bytes = 2 * B * (4 * nk + 5 * nv + d.H // 128)   # bf16 activations per partition, all kept on chip
    expect(act_bytes <= ACTIVATION_SBUF_BYTES, "hidden",
           f"a batch whose on-chip activations, 2 * B * (4 * nk + 5 * nv + H / 128) bytes per partition, fit "
           f"{ACTIVATION_SBUF_BYTES // 1024} KiB beside the state stream (B <= "
           f"{ACTIVATION_SBUF_BYTES // (2 * (4 * nk + 5 * nv + d.H // 128))} here)", f"B = {B}")
    n, c = (nl.num_programs(axes=0), nl.program_id(axis=0)) if nl.program_ndim() else (1, 0)
    expect(nv % n == 0, "recurrent_state", f"num_v_heads a multiple of the {n} programs of the launch grid", nv)
    nh = nv // n
    h0, h1 = c * nh, (c + 1) * nh                    # this program's value heads
    k0, k1 = h0 // G, (h1 - 1) // G + 1              # and the key heads they read
    nkh = k1 - k0
    # place_z: project z after the recurrence when the state stream (read + write) is under half its
    # weights, so they fill the DMA queues while the delta rule computes; with more state the
    # recurrence keeps the queues busy itself and z goes first (the modeled profiles of the sweep
    # put the break-even between B = 1 and B = 8 at Qwen3.5-27B TP8).
    z_last = place_z and 2 * (2 * B * nh * dk * dv * 4) < d.H * nh * dv * 2
    out = nl.ndarray((B, 1, d.value_dim), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    new_conv_state = nl.ndarray((B, d.conv_dim, d.K), nl.bfloat16, buffer=nl.shared_hbm, name="new_conv_state")
    new_recurrent_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm, name="new_recurrent_state")

    # stage 1: hidden once, then each projection straight into the tiles the next stage reads
    # (a and b first: the gates need them; z at the end if z_last). q | k, a and b are
    # projected whole on every program: a program's slice of their columns would be weight-row runs
    # shorter than 512 B, which the DMAs move at a fraction of their bandwidth.
    hidden_T = load_hidden_T(nl.ndarray((128, B, d.H // 128), nl.bfloat16, name="hidden_T"), hidden)
    a = _heads_of(_projected((nv, B), hidden_T, W_in_a, "a"), h0, nh, "a_heads")
    b = _heads_of(_projected((nv, B), hidden_T, W_in_b, "b"), h0, nh, "b_heads")
    qk = _projected((dk, 2, nk, B), hidden_T, W_in_qkv, "qk_proj")            # q heads, then k heads
    v = nl.ndarray((dv, nh, B), nl.bfloat16, name="v_proj")
    project_columns(v, hidden_T, W_in_qkv, col0=2 * d.key_dim + h0 * dv)
    z = nl.ndarray((dv, nh, B), nl.bfloat16, name="z")
    if not z_last:
        project_columns(z, hidden_T, W_in_z, col0=h0 * dv)

    # stage 2: the conv window of this program's q and k heads (dk-channel tiles) and v heads (dv)
    qk_c = nl.ndarray((dk, 2, nkh, B), nl.bfloat16, name="qk_conv")
    if nkh == nk:   # every key head: q | k are one contiguous channel range
        conv1d_decode_channels(qk_c.reshape((dk, 2 * nk, B)), new_conv_state, qk.reshape((dk, 2 * nk, B)),
                               conv_weight, conv_state, c0=0)
    else:
        for i in range(2):
            conv1d_decode_channels(qk_c[:, i], new_conv_state, qk[:, i, k0:k1], conv_weight, conv_state,
                                   c0=i * d.key_dim + k0 * dk)
    v_c = nl.ndarray((dv, nh, B), nl.bfloat16, name="v_conv")
    conv1d_decode_channels(v_c, new_conv_state, v, conv_weight, conv_state, c0=2 * d.key_dim + h0 * dv)

    # stage 3: key heads as they are (value head h reads key head h // G) or copied to the value heads
    q, k = qk_c[:, 0], qk_c[:, 1]
    if not (gqa_by_index and h0 % G == 0 and nh % G == 0):
        q, k = _value_heads(q, h0, nh, G, "q_rep"), _value_heads(k, h0, nh, G, "k_rep")

    # stage 4: the recurrence of this program's heads
    A_sb = nl.ndarray((nh, 1), nl.float32, name="A_log")
    nisa.dma_copy(A_sb, A_log[h0:h1].reshape((nh, 1)))
    dt_sb = nl.ndarray((nh, 1), nl.float32, name="dt_bias")
    nisa.dma_copy(dt_sb, dt_bias[h0:h1].reshape((nh, 1)))
    o = nl.ndarray((dv, nh, B), nl.bfloat16, name="o")
    gated_delta_rule_block(o, new_recurrent_state[:, h0:h1], q, k, v_c, a, b, A_sb, dt_sb,
                           recurrent_state[:, h0:h1])
    if z_last:
        project_columns(z, hidden_T, W_in_z, col0=h0 * dv)

    # stage 5, then the only activation store: each token's row of this program's heads
    w_sb = nl.ndarray((dv, 1), nl.float32, name="norm_weight")
    nisa.dma_copy(w_sb, norm_weight.reshape((dv, 1)))
    y = nl.ndarray((dv, nh, B), nl.bfloat16, name="y")
    rmsnorm_gated_tile(y, o, z, w_sb)
    store_rows(out[:, 0, h0 * dv:h1 * dv], y)
    return out, new_conv_state, new_recurrent_state


def _projected(shape, hidden_T, W, name):
    """A new SBUF tile of `shape` ([P, ..., B]) holding hidden @ W's first columns, channel-major:
    tiles of P channels along the middle dims."""
    t = nl.ndarray(shape, nl.bfloat16, name=name)
    project_columns(t.reshape((shape[0], t.size // (shape[0] * shape[-1]), shape[-1])), hidden_T, W)
    return t


def _heads_of(t, h0, nh, name):
    """Rows h0 .. h0 + nh - 1 of a [heads, B] tile as a tile of their own (an SBUF -> SBUF DMA: a
    compute engine may not start at an arbitrary partition); the tile itself when it is all of them."""
    if nh == t.shape[0]:
        return t
    rows = nl.ndarray((nh, t.shape[1]), t.dtype, name=name)
    nisa.dma_copy(rows, t[h0:h0 + nh])
    return rows


def _value_heads(key_tile, h0, nh, G, name):
    """[d, nh, B] copy of the key heads that value heads h0 .. h0 + nh - 1 read (h // G): stage 3's
    on-chip gqa_repeat when the range holds whole groups, else one stride-0 copy per key head."""
    d, nkh, B = key_tile.shape
    dst = nl.ndarray((d, nh, B), key_tile.dtype, name=name)
    if h0 % G == 0 and nh % G == 0:
        gqa_repeat(dst, key_tile)
        return dst
    for j in range(nkh):
        i0, i1 = max(0, (h0 // G + j) * G - h0), min(nh, (h0 // G + j + 1) * G - h0)
        nisa.tensor_copy(dst[:, i0:i1, :], key_tile[:, j:j + 1, :].broadcast(1, i1 - i0))
    return dst
