"""The fused GDN decode step, `gdn_block_tkg`: the five stages in one kernel, intermediates on chip.

hidden goes in once; every activation after it stays in SBUF, channel-major; HBM sees only the
weights, the two states and the output. The stages' building blocks, called as they are:

  load_hidden_T, project_columns      stage 1 (in_proj), straight into per-head channel tiles
  load_windows, slide_windows,        stage 2 (conv1d decode), per channel group, its loads
  store_windows                       ahead of stage 1's weights
  (no stage 3 copy)                   GQA by indexing: the delta rule reads key head h // G
  gated_delta_rule_block              stage 4
  rmsnorm_gated_tile                  stage 5

It is composition step 12: where z is projected after the recurrence, every weight but a | b
streams on SyncE's hardware-DGE queue in the order TensorE reads it, z last, and z's matmuls run as
its chunks land: two after the conv stage, the rest after the recurrence (with T tokens, some in
the TensorE waits between their updates); where z goes first, its sums wait in PSUM until the conv
is done. The small inputs (A_log, dt_bias, norm_weight, the conv windows and weights) load ahead of
the first weight chunk, the conv windows turn while the weights stream, a and b share one matmul
per row tile and their gates are prepared as they land (launched as gdn_block_tkg[2], value heads
split between the two NeuronCores of an LNC=2 launch grid, each projecting only its own key heads'
q | k columns, both in one matmul per row tile). Steps 3 to 11 are the same body with switches off
(kernels/steps.py); the composition chapters of the book explain each step.

It also takes T <= MAX_TOKENS tokens per sequence in one launch, speculative decoding's verify step
(`gdn_block_tkg_verify` keeps every token's window and state): the weights stream once for all of
them, and only the state update runs token by token.
"""
import nki
import nki.isa as nisa
import nki.language as nl

from .checks import expect
from .conv1d_decode import (conv1d_decode_channels, load_windows, slide_windows, store_windows,
                            window_chunks)
from .delta_rule_pairs import head_broadcast, head_row, pair_ring, pair_steps
from .delta_rule_state import fold_ones
from .gated_delta_rule import (PREPARED_PAIR_BYTES, first_chunk_pairs, gated_delta_rule_block,
                               load_head_params, prepare_gates, prepare_qk, ring_holds_state)
from .gqa_repeat import expand_key_heads
from .gdn_block_checks import MAX_TOKENS, block_dims, check_block_dtypes
from .in_proj import (BF16_BYTES, MIN_SLICE_RUN_BYTES, column_weight_loads, issue_loads,
                      evict_columns, load_hidden_T, open_columns, project_columns, project_pair,
                      project_slices, sum_columns)
from .layout import load_channel_major, store_rows
from .rmsnorm_gated import load_norm_weight, rmsnorm_gated_tile, rmsnorm_rstd

# SBUF per partition the fused kernel's activations may take: the rest of the usable SBUF (224 KiB
# less 16 KiB the runtime reserves) holds the delta rule's state ring (64 KiB) and the stages'
# temporaries (checked with nkicpu's capacity accounting up to Qwen3-Next-80B TP1 at B = 256).
ACTIVATION_SBUF_BYTES = 120 * 1024
# queue_roles: z's weight chunks whose matmuls go between the conv stage and the recurrence. Swept
# 0 .. 12 (modeled, trn2 cost model, B = 1, Qwen3-Next-80B TP4 and Qwen3.5-27B TP8, one and two
# cores): 2 gives the best likely time at three of the four and is within 0.7 us at the fourth.
# More hold back the recurrence's first TensorE work where z has few chunks (Next TP4 on two
# cores, 4 chunks: likely 50.3 us at 2, 53.0 at 3); fewer leave TensorE idle during the conv stage.
# Still the best of 0 .. 3 at steps 11 and 12 (Next TP4 B = 1, best, one core: 44.01, 43.15,
# 42.89, 42.98 us; two cores, likely: 41.96, 40.89, 40.63, 41.24).
Z_CHUNKS_BEFORE_RECURRENCE = 2
# PSUM banks gated_delta_rule_block may hold at once (its notes): queue_roles keeps one column
# group of z's sums open through the recurrence, so only where that group fits the other banks
# (not at Qwen3-Next-80B TP1: 4096 columns of z, a 4-bank group).
RECURRENCE_PSUM_BANKS = 6
# T tokens: SBUF per partition the tokens' prepared first chunks may hold at once (prepare_gates,
# prepare_qk); past it (B * T large: the state streams anyway) each token prepares its own. The
# rest of the kernel fits beside it up to B * T = 256 at Qwen3-Next-80B TP4 (nkicpu's capacity
# accounting).
TOKENS_AHEAD_SBUF_BYTES = 8 * 1024
# The verify form keeps the state in the ring between tokens and stores it after each: the next
# token's update would wait for that store to read the ring. Where a program has at most this
# many (batch, head) pairs, each token's state is copied (ScalarE) to one of two stage rings and
# stored from there (modeled, T = 4, best/likely us: Qwen3-Next-80B TP4 B = 1 60.0/87.4 ->
# 56.8/83.0, on two cores 45.3/70.5 -> 42.0/67.3; Qwen3.5-27B TP8 B = 1 74.0/106.6 ->
# 71.8/104.5). With more, the copies cost more than the wait (Next TP4 B = 2, 16 pairs: best
# 88.4 -> 90.1).
VERIFY_STAGE_PAIRS = 8


@nki.jit
def gdn_block_tkg(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
                  norm_weight, recurrent_state):
    """One decode step of a Qwen3.5 / Qwen3-Next gated delta-net layer, hidden to RMSNormGated out,
    for one token per sequence or up to MAX_TOKENS (8) of them (a speculative-decoding verify step;
    `gdn_block_tkg_verify` keeps the states after each token).

    Dimensions:
        B: batch; T: tokens per sequence (1 .. 8); H: hidden size (a multiple of 128); nk, nv: key
        and value heads (nv a multiple of nk, nv <= 128); dk, dv: head dims (<= 128); K: conv
        window (2..4);
        key_dim = nk * dk, value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim.

    Args:
        hidden: [B, T, H] @ HBM, bf16.
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
        out: [B, T, value_dim] @ shared HBM, bf16, the RMSNormGated output (before out_proj).
        conv_state: [B, conv_dim, K] @ shared HBM, bf16, the window after the last token (a new
            tensor).
        recurrent_state: [B, nv, dk, dv] @ shared HBM, fp32, the state after the last token (a
            new tensor).

    Notes:
        - All dims come from the shapes (gdn_block_checks.block_dims); a bad argument fails an
          assert naming it. Inputs are never written.
        - Every activation stays in SBUF, channel-major; value head h reads key head h // G, so
          the GQA expansion is free.
        - gdn_block_tkg[2] (LNC=2) splits the value heads between the two programs; needs nv even.
          Each program projects only its key heads' q | k columns when that slice is a weight-row
          run of at least MIN_SLICE_RUN_BYTES (kernels/in_proj.py), else q | k whole.
        - The batch's activations must fit on chip: 2 * B * T * (4 * nk + 5 * nv + H / 128)
          bytes per partition <= ACTIVATION_SBUF_BYTES.
        - T tokens: the weights stream once for all B * T; the conv slides each window T times;
          every token's gates and l2norm are prepared before the first state update; the state
          update runs token by token, the state between tokens kept in SBUF where the
          recurrence's ring holds all of it (gated_delta_rule.ring_holds_state: up to B = 16
          at Qwen3-Next-80B TP4 and Qwen3.5-27B TP8 on one core, B = 32 on two), else through HBM.

    Pseudocode:
        mixed_qkv, z, a, b = hidden @ W_in_qkv, hidden @ W_in_z, hidden @ W_in_a, hidden @ W_in_b
        conv_out, conv_state = conv1d_decode(mixed_qkv, conv_weight, conv_state)
        q, k, v = split(conv_out); q, k = repeat(q, G), repeat(k, G)
        o, recurrent_state = gated_delta_rule(q, k, v, a, b, A_log, dt_bias, recurrent_state)
        out = rmsnorm_gated(o, z, norm_weight)
    """
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                          A_log, dt_bias, norm_weight, recurrent_state, gqa_by_index=True,
                          place_z=True, qk_slices=True, z_early=True, loads_first=True,
                          queue_roles=True, off_path=True, ready_first=True,
                          max_tokens=MAX_TOKENS)


@nki.jit
def gdn_block_tkg_verify(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                         dt_bias, norm_weight, recurrent_state):
    """`gdn_block_tkg` keeping the windows and states after every token: the verify step of
    speculative decoding, whose caller keeps the state after the last accepted draft token.

    Args: as gdn_block_tkg; hidden [B, T, H] with 1 <= T <= MAX_TOKENS.

    Returns:
        out: [B, T, value_dim] @ shared HBM, bf16.
        conv_states: [B, T, conv_dim, K] @ shared HBM, bf16, the window after each token.
        recurrent_states: [B, T, nv, dk, dv] @ shared HBM, fp32, the state after each token.

    Notes:
        - Token t's results are those of t + 1 single-token steps chained (a projection over B * T
          rows may round to the neighbouring bf16); the last token's windows and states are
          gdn_block_tkg's, bit for bit.
        - The state goes to HBM after every token (T state stores), where gdn_block_tkg stores
          only the last.
    """
    return gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                          A_log, dt_bias, norm_weight, recurrent_state, gqa_by_index=True,
                          place_z=True, qk_slices=True, z_early=True, loads_first=True,
                          queue_roles=True, off_path=True, ready_first=True,
                          max_tokens=MAX_TOKENS, verify=True)


def gdn_block_body(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                   dt_bias, norm_weight, recurrent_state, gqa_by_index, place_z, qk_slices,
                   z_early=False, loads_first=False, queue_roles=False, off_path=False,
                   ready_first=False, max_tokens=1, verify=False):
    """The fused body; the eight switches are composition steps 4, 5, 7, 8, 9, 10, 11 and 12
    (kernels/steps.py; z_early, loads_first, queue_roles, off_path and ready_first are off unless
    given, as in every step before 8, 9, 10, 11 and 12).

    hidden [B, T, H] with T <= max_tokens: the projections and the conv take the B * T tokens at
    once (column b * T + t of every activation tile), the recurrence runs token by token.
    verify: return every token's windows and states.

    On an LNC grid each program takes its value heads and the key heads they read
    (`program_heads`); every HBM write is its own heads' slice, except the conv state of a key
    head both programs read (nk odd), written twice with the same values.
    """
    B, H, nk, nv, dk, dv, K = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                                         conv_state, A_log, dt_bias, norm_weight, recurrent_state,
                                         max_tokens)
    check_block_dtypes(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                       dt_bias, norm_weight, recurrent_state)
    pmax = nl.tile_size.pmax
    G = nv // nk
    key_dim = nk * dk
    T = hidden.shape[1]
    N = B * T                                        # tokens: column b * T + t of every tile
    per_token = 2 * (4 * nk + 5 * nv + H // pmax)    # bf16 activation bytes per partition
    expect(N * per_token <= ACTIVATION_SBUF_BYTES, "hidden",
           f"a batch whose on-chip activations, 2 * B * T * (4 * nk + 5 * nv + H / 128) bytes "
           f"per partition, fit {ACTIVATION_SBUF_BYTES // 1024} KiB beside the state stream "
           f"(B * T <= {ACTIVATION_SBUF_BYTES // per_token} here)", f"B * T = {B} * {T}")
    h0, h1, k0, k1 = program_heads(nv, G)
    nh = h1 - h0
    nkh = k1 - k0
    # T tokens: the state stays in the recurrence's ring between tokens where the ring holds all
    # of it; else it goes through HBM (scratch, unless the caller keeps every token's)
    keep = ring_holds_state(B, nh)
    # The state's HBM passes: read once and written once, plus a round trip between two tokens
    # where the ring cannot keep it. The verify form's writes after every token are left out: z
    # last is faster with them too (modeled, Qwen3-Next-80B TP4, B = 1, T = 4: 60.0 us best
    # against 67.7 with z first; the same at B = 8, where z goes first either way).
    passes = 2
    if not keep:
        passes = 2 * T
    # place_z: project z after the recurrence when the state stream is under half its weights,
    # so that they fill the DMA queues while the delta rule computes.
    z_last = place_z and 2 * (passes * B * nh * dk * dv * 4) < H * nh * dv * 2
    out = nl.ndarray((B, T, nv * dv), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    windows_shape = (B, 2 * key_dim + nv * dv, K)
    states_shape = (B, nv, dk, dv)
    if verify:
        windows_shape = (B, T) + windows_shape[1:]
        states_shape = (B, T) + states_shape[1:]
    new_conv_state = nl.ndarray(windows_shape, nl.bfloat16, buffer=nl.shared_hbm,
                                name="new_conv_state")
    new_recurrent_state = nl.ndarray(states_shape, nl.float32, buffer=nl.shared_hbm,
                                     name="new_recurrent_state")

    # stage 1: hidden once, then each projection straight into the tiles the next stage reads
    # (a and b first: the gates need them). a and b are projected whole on every program, q | k
    # too unless qk_slices and the program's key heads make weight-row runs long enough to stream.
    hidden_T = load_hidden_T(nl.ndarray((pmax, N, H // pmax), nl.bfloat16, name="hidden_T"),
                             hidden.reshape((N, 1, H)))
    # queue_roles, z last: every weight on SyncE's hardware-DGE queue (wq), in the order TensorE
    # reads them, z's last, so that z's chunks land one by one in order while the state loads on
    # the compiler's queues, and z's matmuls go where TensorE waits anyway; the state stores behind
    # z's chunks on the same queue, so that no store takes bandwidth from them (modeled, trn2 cost
    # model, Qwen3.5-27B TP8, B = 1: likely 96.70 -> 95.03 us; Qwen3-Next-80B TP4, B = 1, where the
    # recurrence ends after z's last byte anyway: best 44.09 -> 44.20). Only the last token's: a
    # store of the verify form's earlier tokens would hold up the next update. z first: nothing
    # moves; the state stores keep the compiler's queues, which end together there, where a queue
    # of their own gets one share of the bandwidth and ends last (Qwen3-Next-80B TP4, B = 32: best
    # 137.5 -> 138.1 us).
    wq = None
    z_banks = -(-N // pmax) * -(-nh * dv // nl.tile_size.psum_bank_fmax)   # z's sums, if one group
    if queue_roles and z_last and z_banks <= nl.tile_size.psum_num_banks - RECURRENCE_PSUM_BANKS:
        wq = nisa.engine.sync
    sliced = qk_slices and nkh < nk and nkh * dk * BF16_BYTES >= MIN_SLICE_RUN_BYTES
    q0 = k0 if sliced else 0                        # the first key head this program projects
    qk = nl.ndarray((dk, 2, nkh if sliced else nk, N), nl.bfloat16, name="qk_proj")   # q, then k
    v = nl.ndarray((dv, nh, N), nl.bfloat16, name="v_proj")
    qk_c = nl.ndarray((dk, 2, nkh, N), nl.bfloat16, name="qk_conv")
    v_c = nl.ndarray((dv, nh, N), nl.bfloat16, name="v_conv")
    groups = _conv_groups(qk_c, qk, v_c, v, k0 - q0, k0 * dk, key_dim, 2 * key_dim + h0 * dv)
    # loads_first: the small inputs' DMAs ahead of the first weight chunk on the queues (each a
    # contiguous row: one descriptor, not one per element), and the conv windows' transposes ahead
    # of the projections' matmuls on TensorE, which waits for the weights anyway. Only where each
    # conv group's window is one chunk (`_one_chunk`): the windows then hold at most
    # WINDOW_FREE_MAX elements per partition each while the projections run. Larger batches (B =
    # 256 at Qwen3-Next-80B TP1, Qwen3.5-0.8B TP1, 9B TP2) keep step 8's order: tiles that live
    # from the start leave the activations no room in SBUF there.
    first = loads_first and _one_chunk(groups, K)
    # Each token's first chunk of pairs prepared before the first state update (its gates as
    # soon as a and b are projected, where the head parameters are loaded by then): T tokens, so
    # that only the state update is left between two tokens; off_path, one token too, so that
    # ScalarE's gate functions and their table loads run while the weights stream
    ahead = ((T > 1 or off_path)
             and T * first_chunk_pairs(B, nh) * PREPARED_PAIR_BYTES <= TOKENS_AHEAD_SBUF_BYTES)
    # ready_first: the head parameters' row (two transposes, ScalarE's exp) before the windows'
    # transposes, its broadcast matmul before a | b's: TensorE no longer waits for exp's table load
    # and the chain behind it (modeled, Qwen3-Next-80B TP4, B = 1, two cores, likely: TensorE's
    # wait for the broadcast 2.06 -> 0.76 us; without this move step 12 takes 41.43 us, not 40.63)
    head = ready_first and ahead and first
    if first:
        A_sb = _column(A_log, h0, nh, "A_log")
        dt_sb = _column(dt_bias, h0, nh, "dt_bias")
        norm_w = _column(norm_weight, 0, dv, "norm_weight")
        if head:
            hrow = head_row(A_sb, dt_sb)
        loaded = []
        for i in range(len(groups)):
            dst, _, c0 = groups[i]
            loaded.append(load_windows(conv_weight, conv_state, c0, dst.shape[0], dst.shape[1], T))
    ones = None
    hp = None
    if head:
        ones = fold_ones(dk, dv, nh)
        hp = head_broadcast(hrow, ones.shape[0])
    if off_path:    # a | b: one matmul per row tile for both, this program's heads transposed out
        # (their two DMAs on the compiler's queues, beside the weights' stream on SyncE's)
        ab = nl.ndarray((nh, 2, N), nl.bfloat16, name="ab")
        project_pair(ab, hidden_T, W_in_a, W_in_b, h0)
        a = ab[:, 0]
        b = ab[:, 1]
    else:
        a = _heads_of(_projected((nv, N), hidden_T, W_in_a, "a", wq), h0, nh, "a_heads")
        b = _heads_of(_projected((nv, N), hidden_T, W_in_b, "b", wq), h0, nh, "b_heads")
    firsts = None
    if ahead and first:
        if ones is None:
            ones = fold_ones(dk, dv, nh)
        firsts = _gates_ahead(a, b, A_sb, dt_sb, ones, T, hp)
    # ready_first: a one-bank projection's sums evicted a block at a time (project_columns'
    # by_block), and the q and k slices in one matmul per row tile, as a | b, where both fit a bank
    # (modeled, Qwen3-Next-80B TP4, B = 1, two cores, likely: without the slices' matmuls step 12
    # takes 43.65 us, without the blocks 41.38, with both 40.63)
    if sliced and ready_first and 2 * nkh * dk <= nl.tile_size.psum_bank_fmax:
        project_slices(qk, hidden_T, W_in_qkv, (k0 * dk, key_dim + k0 * dk), queue=wq)
    elif sliced:
        for i in range(2):
            project_columns(qk[:, i], hidden_T, W_in_qkv, col0=i * key_dim + k0 * dk, queue=wq,
                            by_block=ready_first)
    else:
        project_columns(qk.reshape((dk, 2 * nk, N)), hidden_T, W_in_qkv, queue=wq,
                        by_block=ready_first)
    project_columns(v, hidden_T, W_in_qkv, col0=2 * key_dim + h0 * dv, queue=wq,
                    by_block=ready_first)
    z = nl.ndarray((dv, nh, N), nl.bfloat16, name="z")
    z_open = None
    z_held = None
    if not z_last and ready_first:
        # z's matmuls as its chunks land, its evictions after the conv (below): VectorE runs in
        # program order, and the conv, ready once v is evicted, would wait behind z's evictions,
        # which wait for z's last weight byte (modeled, B = 32, two cores, best: without this
        # move step 12 takes 82.48 us at Qwen3.5-27B TP8, not 79.84; 71.86 at Qwen3-Next-80B TP4,
        # not 68.26)
        z_held = open_columns(z, hidden_T, W_in_z, col0=h0 * dv, by_block=True)
        sum_columns(z_held, z_held["n_chunks"], hold=True)
    elif not z_last:
        project_columns(z, hidden_T, W_in_z, col0=h0 * dv)
    elif wq is not None:          # z's DMAs now, on the queue behind v's; its matmuls as they land
        z_first = column_weight_loads(z, hidden_T, W_in_z, col0=h0 * dv)
        issue_loads(z_first, wq)
        z_open = open_columns(z, hidden_T, W_in_z, col0=h0 * dv, loads=z_first,
                              by_block=ready_first)

    # stage 2: the conv window of this program's q and k heads (dk-channel tiles) and v heads (dv)
    # (first: every group's conv before any new window's transposes and store)
    windows = []
    for i in range(len(groups)):
        dst, x, c0 = groups[i]
        if first:
            windows.append(slide_windows(dst, x, loaded[i]))
        elif T == 1:
            conv1d_decode_channels(dst, new_conv_state, x, conv_weight, conv_state, c0=c0)
        else:
            windows.append(slide_windows(dst, x, load_windows(conv_weight, conv_state, c0,
                                                              dst.shape[0], dst.shape[1], T)))
    # off_path, z first: the windows' stores on SyncE's queue, which carries no weights then, so
    # that on the compiler's queues no state load waits behind a store waiting for the conv
    window_queue = None
    if off_path and wq is None:
        window_queue = nisa.engine.sync
    for i in range(len(windows)):
        store_windows(new_conv_state, windows[i], window_queue)
    if z_held is not None:
        evict_columns(z_held)
    if z_open is not None:
        sum_columns(z_open, Z_CHUNKS_BEFORE_RECURRENCE)

    # stage 3: key heads as they are (value head h reads key head h // G) or copied to value heads
    q = qk_c[:, 0]
    k = qk_c[:, 1]
    if not (gqa_by_index and _whole_groups(h0, nh, G)):
        q = _value_heads(q, h0, nh, G, "q_rep")
        k = _value_heads(k, h0, nh, G, "k_rep")

    # stage 4: the recurrence of this program's heads; its ones tile serves stage 5 too
    if not first:
        A_sb, dt_sb = load_head_params(A_log, dt_bias, h0, nh)
    o = nl.ndarray((dv, nh, N), nl.bfloat16, name="o")
    if ones is None:
        ones = fold_ones(dk, dv, nh)
    # z_early: the recurrence issues z's weight DMAs after its first state loads, ahead of the
    # state stores that wait for its compute; z's matmuls stay after it.
    z_loads = None
    if z_last and z_early and z_open is None:
        z_loads = column_weight_loads(z, hidden_T, W_in_z, col0=h0 * dv)
    scratch = None
    if T > 1 and not verify and not keep:
        scratch = nl.ndarray((B, T - 1, nv, dk, dv), nl.float32, buffer=nl.hbm,
                             name="token_states")
    if ahead and firsts is None:
        firsts = _gates_ahead(a, b, A_sb, dt_sb, ones, T)
    if firsts is not None:    # l2norm(q, k) and k . q of every token, ahead of the first update
        qkv = []
        for t in range(T):
            qkv.append((_token(q, t, T), _token(k, t, T), _token(v_c, t, T)))
        prepare_qk(firsts, qkv)
    src = recurrent_state
    ring = None
    stages = None             # verify: each token's state stored from a copy (_stage)
    if verify and keep and T > 1 and B * nh <= VERIFY_STAGE_PAIRS:
        steps = pair_steps(B, nh)
        stages = [pair_ring(dk, dv, steps, "state_stage"), pair_ring(dk, dv, steps, "state_stage")]
    # off_path, one token: no z chunk fills the recurrence's TensorE waits: with the gates ahead
    # they are short, and a chunk placed there waits for its own DMA, the recurrence's next step
    # behind it (T tokens keep the fills: between two tokens' updates TensorE waits long)
    fill = z_open
    if off_path and T == 1:
        fill = None
    for t in range(T):        # token by token; token t starts from the state token t - 1 left
        dst = new_recurrent_state
        if verify:
            dst = new_recurrent_state[:, t]
        elif t < T - 1 and not keep:
            dst = scratch[:, t]
        loads = None
        if t == 0:
            loads = z_loads
        ring = gated_delta_rule_block(_token(o, t, T), dst[:, h0:h1], _token(q, t, T),
                                      _token(k, t, T), _token(v_c, t, T), _token(a, t, T),
                                      _token(b, t, T), A_sb, dt_sb, src[:, h0:h1], ones=ones,
                                      weight_loads=loads, fill=fill, ring=_kept(ring, keep),
                                      store=verify or t == T - 1 or not keep,
                                      first=_first(firsts, t),
                                      store_queue=wq is not None and t == T - 1,
                                      stage=_stage(stages, t, T))
        src = dst
    rstd = None
    if z_open is not None and off_path:
        # z's last matmuls, then the norm's rsqrt from o before z's transposes: ScalarE runs it
        # before silu(z), so that silu's table loads while TensorE and VectorE finish z
        sum_columns(z_open, z_open["n_chunks"], hold=True)
        rstd = rmsnorm_rstd(o, ones[0:dv, 0:dv])
        evict_columns(z_open)
    elif z_open is not None:      # queue_roles: z's chunks the recurrence left
        sum_columns(z_open, z_open["n_chunks"])
    elif z_last:
        project_columns(z, hidden_T, W_in_z, col0=h0 * dv, loads=z_loads, by_block=ready_first)

    # stage 5, then the only activation store: each token's row of this program's heads
    if not first:
        norm_w = load_norm_weight(norm_weight)
    y = nl.ndarray((dv, nh, N), nl.bfloat16, name="y")
    rmsnorm_gated_tile(y, o, z, norm_w, ones=ones[0:dv, 0:dv], rstd=rstd)
    store_rows(out.reshape((N, nv * dv))[:, h0 * dv:h1 * dv], y)
    return out, new_conv_state, new_recurrent_state


def _kept(ring, keep):
    """The ring a token's recurrence starts from: the last token's, where it holds the state."""
    if keep:
        return ring
    return None


def _gates_ahead(a, b, A_sb, dt_sb, ones, T, hp=None):
    """prepare_gates on each token's a and b columns."""
    ab = []
    for t in range(T):
        ab.append((_token(a, t, T), _token(b, t, T)))
    return prepare_gates(ab, A_sb, dt_sb, ones, nl.bfloat16, hp)


def _stage(stages, t, T):
    """Where token t's state is copied to be stored from: the two stages in turn, so that a copy
    waits for the store of two tokens before; the last token's goes from the ring."""
    if stages is None or t == T - 1:
        return None
    return stages[t % 2]


def _first(firsts, t):
    """Token t's prepared first chunk, if the tokens were prepared ahead."""
    if firsts is None:
        return None
    return firsts[t]


def _token(t, i, T):
    """Token i's columns (b * T + i) of a channel-major [..., B * T] tile: a [..., B] view."""
    return t.reshape_dim(len(t.shape) - 1, (t.shape[-1] // T, T))[..., i]


def program_heads(nv, G):
    """(h0, h1, k0, k1): the value heads h0 .. h1 - 1 of this program of the launch grid (all of
    them without a grid) and the key heads k0 .. k1 - 1 they read (value head h reads h // G)."""
    n = nl.num_programs(axes=0)
    expect(nv % n == 0, "recurrent_state",
           f"num_v_heads a multiple of the {n} programs of the launch grid", nv)
    nh = nv // n
    h0 = nl.program_id(axis=0) * nh
    h1 = h0 + nh
    return h0, h1, h0 // G, (h1 - 1) // G + 1


def _column(vector, i0, n, name):
    """vector[i0:i0 + n] @ HBM (fp32) as a new [n, 1] SBUF tile: one contiguous row DMA and a
    TensorE transpose (kernels.layout), where a DMA straight into n partitions costs a descriptor
    per element."""
    t = nl.ndarray((n, 1), vector.dtype, name=name)
    load_channel_major(t, vector[i0:i0 + n].reshape((1, n)))
    return t


def _one_chunk(groups, K):
    """Whether the conv window of each (dst, x, first channel) group is one chunk of
    `window_chunks`."""
    for i in range(len(groups)):
        dst = groups[i][0]
        if len(window_chunks(dst.shape[1], dst.shape[2], K)) > 1:
            return False
    return True


def _conv_groups(qk_c, qk, v_c, v, k_off, qk_c0, key_dim, v_c0):
    """(conv output tile, projected tile, first channel) of each channel group stage 2 runs: q | k
    as one group when the program has every key head (one contiguous channel range), else q and k
    apart (key heads k_off .. of the projected tile, channels from qk_c0 in q and in k); then v."""
    dk, _, nkh, B = qk_c.shape
    groups = []
    if nkh * dk == key_dim:     # every key head: q | k are one contiguous channel range
        groups.append((qk_c.reshape((dk, 2 * nkh, B)), qk.reshape((dk, 2 * nkh, B)), 0))
    else:
        for i in range(2):
            groups.append((qk_c[:, i], qk[:, i, k_off:k_off + nkh], i * key_dim + qk_c0))
    groups.append((v_c, v, v_c0))
    return groups


def _whole_groups(h0, nh, G):
    """Whether value heads h0 .. h0 + nh - 1 are whole GQA groups (G heads per key head)."""
    return h0 % G == 0 and nh % G == 0


def _projected(shape, hidden_T, W, name, queue=None):
    """A new SBUF tile of `shape` ([P, ..., B]) holding hidden @ W's first columns, channel-major:
    tiles of P channels along the middle dims; the weight DMAs on `queue` (project_columns)."""
    t = nl.ndarray(shape, nl.bfloat16, name=name)
    project_columns(t.reshape((shape[0], t.size // (shape[0] * shape[-1]), shape[-1])), hidden_T, W,
                    queue=queue)
    return t


def _heads_of(t, h0, nh, name):
    """Rows h0 .. h0 + nh - 1 of a [heads, B] tile as a tile of their own (an SBUF -> SBUF DMA:
    a compute engine may not start at an arbitrary partition); the tile itself when it is all of
    them."""
    if nh == t.shape[0]:
        return t
    rows = nl.ndarray((nh, t.shape[1]), t.dtype, name=name)
    nisa.dma_copy(rows, t[h0:h0 + nh])
    return rows


def _value_heads(key_tile, h0, nh, G, name):
    """A new [d, nh, B] tile: the key heads value heads h0 .. h0 + nh - 1 read, one per value
    head."""
    dst = nl.ndarray((key_tile.shape[0], nh, key_tile.shape[2]), key_tile.dtype, name=name)
    expand_key_heads(dst, key_tile, h0, G)
    return dst
