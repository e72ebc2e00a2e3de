"""The fused GDN decode step, `gdn_block_tkg`: the five stages in one kernel, ready work first.

hidden goes in once; every activation after it stays in SBUF, channel-major; HBM sees only the
weights, the two states and the output. The body is a sequence of phases, each a function of its
stage's module, placed in the order the engines should run them (each engine and DMA queue runs
in program order); what the shapes decide is computed once into the plan (kernels/block_plan.py).

This is composition step 7 (the book's composition part builds it step by step, each step a
kernel of its own in kernels/steps/): step 6 with ready work first. The small inputs and the conv
windows load ahead of the weights; a | b come first, in one matmul per row tile, and the gates of
every token are prepared as soon as they land; where z goes first its sums wait in PSUM until the
conv is done, where it goes last the norm's rsqrt waits for it on ScalarE before silu(z).

It takes T <= MAX_TOKENS tokens per sequence in one launch, speculative decoding's verify step
(`gdn_block_tkg_verify` keeps every token's window and state): the weights stream once for all of
them, and only the state update runs token by token. `gdn_block_tkg_pool` is the serving form: the
same plan and body on persistent state pools, read and written in place by slot (kernels/slots.py).
"""
import nki
import nki.isa as nisa
import nki.language as nl

from .block_plan import (BlockPlan, activation_tiles, block_outputs, gates_fit_ahead,
                         one_weight_queue, split_heads, windows_fit_ahead, z_after_state)
from .conv1d_decode import conv_groups, load_group_windows
from .delta_rule_pairs import head_broadcast, head_row, pair_ones
from .gated_delta_rule import gated_delta_rule_tokens, prepare_gates, prepare_qk, token_inputs
from .gdn_block_checks import MAX_TOKENS, check_slot_args
from .gqa_repeat import heads_for_values
from .in_proj import (ColumnStream, issue_loads, load_tokens, project_columns, project_pair,
                      project_qk)
from .layout import load_column, store_rows
from .overlap import continue_z, finish_z, start_z, z_beside
from .rmsnorm_gated import rmsnorm_gated_tile
from .slots import Slots, zero_padding


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
          run of at least MIN_SLICE_RUN_BYTES (kernels/in_proj.py), else q | k whole
          (block_plan.split_heads).
        - B * T <= block_plan.max_columns(H, nk, nv): in_proj's MAX_BATCH (512) columns, and
          activations of 2 * B * T * (4 * nk + 5 * nv + H / 128) bytes per partition within
          block_plan.ACTIVATION_SBUF_BYTES; a larger batch fails naming hidden and the largest B.
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
    p = ready_first_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                         dt_bias, norm_weight, recurrent_state)
    return gdn_block_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                          A_log, dt_bias, norm_weight, recurrent_state, verify=False)


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
    p = ready_first_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                         dt_bias, norm_weight, recurrent_state)
    return gdn_block_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                          A_log, dt_bias, norm_weight, recurrent_state, verify=True)


@nki.jit
def gdn_block_tkg_pool(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state_pool,
                       A_log, dt_bias, norm_weight, recurrent_state_pool, read_indices,
                       write_indices):
    """`gdn_block_tkg` on persistent state pools, read and written in place by slot: the serving
    form, for 1 <= T <= MAX_TOKENS tokens per sequence.

    Args: as gdn_block_tkg, except
        conv_state_pool: [N, conv_dim, K] @ HBM, bf16, any N >= 1: written in place.
        recurrent_state_pool: [N, nv, dk, dv] @ HBM, fp32: written in place.
        read_indices: [B] @ HBM, int32: the slot sequence b starts from; -1: a padding row.
        write_indices: [B, T] @ HBM, int32: the slot that takes sequence b's window and state
            after token t (every draft's checkpoint); negative: not kept; -1 for every token
            of a padding row.

    Returns:
        out: [B, T, value_dim] @ shared HBM, bf16; a padding row's rows exactly 0.
        conv_state_pool, recurrent_state_pool: the pools (the same tensors), their written
            slots updated; every other slot keeps its bits.

    Notes:
        - B <= block_plan.POOL_MAX_BATCH (128) besides gdn_block_tkg's limit: the slot offsets
          hold one sequence per partition.
        - Check the indices on the host first, kernels.check_pool_indices(read_indices,
          write_indices, N): the kernel skips an out-of-range slot instead of failing
          (kernels/slots.py), so a bad index would go unnoticed.
        - T = 1 with write_indices[:, 0] = read_indices is the plain in-place decode step; a
          verify step writes each draft's checkpoint to its own slot, and the next step reads the
          slot of the last accepted token.
        - Every pool DMA reads its slot from SBUF when it runs: a state row in gdn_block_tkg's
          pieces, one slot each (scalar offsets); the windows one sequence per partition (vector
          offsets), a single sequence's in pieces (a scalar offset). Sequence b's slot is read
          before it is written: its loads feed the stores (a data dependency), and on an LNC grid
          whose programs share a key head a core barrier orders both programs' window loads
          before the owner's store.
    """
    p = ready_first_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state_pool,
                         A_log, dt_bias, norm_weight, recurrent_state_pool, pooled=True)
    check_slot_args(read_indices, write_indices, p.B, p.T)
    p.slots = Slots(read_indices, write_indices, recurrent_state_pool.shape[0], p)
    return gdn_block_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                          conv_state_pool, A_log, dt_bias, norm_weight, recurrent_state_pool,
                          verify=True)


def ready_first_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                     dt_bias, norm_weight, recurrent_state, pooled=False):
    """Step 7's plan: step 6's (heads split on an LNC grid, z after the recurrence where the state
    is under half its weights, every weight on SyncE's queue where z is last and its sums fit
    beside the recurrence), up to MAX_TOKENS tokens, and the ready work: the windows' stores on
    SyncE's queue where it carries no weights, the windows and the gates ahead where they fit.
    pooled: the states are pools (gdn_block_tkg_pool)."""
    p = BlockPlan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                  dt_bias, norm_weight, recurrent_state, MAX_TOKENS, pooled)
    split_heads(p)
    p.z_last = z_after_state(p)
    p.weight_queue = one_weight_queue(p)
    if p.weight_queue is None:
        p.window_queue = nisa.engine.sync
    p.windows_ahead = windows_fit_ahead(p)
    p.gates_ahead = gates_fit_ahead(p)
    return p


def gdn_block_body(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                   dt_bias, norm_weight, recurrent_state, verify):
    """gdn_block_tkg's body on plan p (verify: of gdn_block_tkg_verify, every token's window and
    state returned; with p.slots, of gdn_block_tkg_pool, the states read from and written to the
    pools by slot): the tokens in, block_phases, and the only activation store."""
    out, new_conv_state, new_state = block_outputs(p, verify, conv_state, recurrent_state)
    y = block_phases(p, load_tokens(hidden), W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                     conv_state, A_log, dt_bias, norm_weight, recurrent_state, new_conv_state,
                     new_state)
    store_rows(out.reshape((p.N, p.nv * p.dv))[:, p.h0 * p.dv:(p.h0 + p.nh) * p.dv], y)
    return out, new_conv_state, new_state


def block_phases(p, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                 dt_bias, norm_weight, recurrent_state, new_conv_state, new_state):
    """The phases of gdn_block_tkg on plan p's heads, queues and tiles, from the tokens on chip
    (hidden: in_proj.load_tokens' [128, KT, N] view) to the gated norm's output y [dv, nh, N]
    bf16 (a padding row's columns 0 in the pool form); the windows and states go to
    new_conv_state and new_state (the pools with p.slots). On an LNC grid each program takes its
    value heads and the key heads they read (block_plan.split_heads); every HBM write is its own
    heads' slice, except the conv window of a key head both programs read (nk odd), written
    twice with the same values (to a pool, once: slots.Slots.own_k0). p.later_loads, a later
    stage's weights, are issued behind every in_proj weight."""
    qk, v, qk_c, v_c, groups = activation_tiles(p)
    # the small inputs ahead of the weights (a row DMA each), the conv windows where they fit
    gate_params = (load_column(A_log, p.h0, p.nh, "A_log"),
                   load_column(dt_bias, p.h0, p.nh, "dt_bias"))
    norm_w = load_column(norm_weight, 0, p.dv, "norm_weight")
    row = head_row(gate_params[0], gate_params[1])
    loaded = None
    if p.windows_ahead:
        loaded = load_group_windows(conv_weight, conv_state, groups, p.T, p.slots)
    ones = pair_ones(p.dk, p.dv, p.nh)
    hp = head_broadcast(row, ones.shape[0])
    # stage 1: a | b first, every token's gates as they land; then q | k, v and z
    ab = nl.ndarray((p.nh, 2, p.N), nl.bfloat16, name="ab")
    project_pair(ab, hidden, W_in_a, W_in_b, p.h0)
    gates = None
    if p.gates_ahead:
        gates = prepare_gates(ab[:, 0], ab[:, 1], gate_params, hp, ones, p.T)
    project_qk(qk, hidden, W_in_qkv, p.q0, p.key_dim, p.weight_queue, by_block=True)
    project_columns(v, hidden, W_in_qkv, 2 * p.key_dim + p.h0 * p.dv, p.weight_queue,
                    by_block=True)
    z = ColumnStream(nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="z"), hidden, W_in_z,
                     p.h0 * p.dv, by_block=True)
    start_z(z, p.z_last, p.weight_queue, hold=True)
    issue_loads(p.later_loads, p.weight_queue)
    # stage 2: per channel group, its windows (loaded above where they fit) slid and stored
    conv_groups(new_conv_state, groups, conv_weight, conv_state, loaded, p.window_queue, p.slots)
    continue_z(z, p.z_last, p.weight_queue)
    # stage 3: value head h reads key head h // G
    q, k = heads_for_values(qk_c, p.h0, p.nh, p.G)
    # stage 4, token by token, z's weights beside it where z goes last
    o = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="o")
    beside = z_beside(z, p.z_last, p.weight_queue, fill=p.T > 1)
    if gates is None:
        tokens = token_inputs(q, k, v_c, ab[:, 0], ab[:, 1], gate_params, hp, ones, p.T)
    else:
        tokens = prepare_qk(gates, q, k, v_c, o)
    gated_delta_rule_tokens(o, new_state, recurrent_state, tokens, p.h0, beside, p.slots)
    # stage 5; where z goes last, its rsqrt ahead of z
    rstd = finish_z(z, p.z_last, o, ones)
    y = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="y")
    rmsnorm_gated_tile(y, o, z.dst, norm_w, ones=ones[0:p.dv, 0:p.dv], rstd=rstd)
    if p.slots is not None:
        zero_padding(y, p.slots)
    return y
