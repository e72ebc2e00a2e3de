"""Stage 4 of the GDN decode step: the gates and the gated delta rule, one token or T in a row.

Per (batch row b, value head h) pair the recurrent state S is a [dk, dv] fp32 matrix, streamed from
HBM and back; everything else per pair lies channel-major, [d, pairs], so one instruction serves
every pair of a chunk. How the state sits on chip and streams, one (batch, head) pair per
contraction so that a non-finite value stays in its own pair: kernels/delta_rule_pairs.py.

Building blocks (plain functions the fused kernel calls):
  PairInputs(q, k, v, a, b, gate_params)   one call's channel-major inputs
  gated_delta_rule_block(o, new_state, ins, recurrent_state)   one decode step, state HBM -> HBM
  gated_delta_rule_tokens(o, new_state, recurrent_state, tokens, h0)   T tokens in a row
  prepare_gates(...), prepare_qk(...)      the tokens' first chunks prepared ahead
Entry point:
  gated_delta_rule_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state) -> o, new_state
"""
import nki
import nki.language as nl
import nki.isa as nisa

from .checks import expect, expect_dtype, expect_rank, expect_shape
from .delta_rule_pairs import (BANK_GROUPS, GATE_STEPS, GROUP, PMAX, STATE_BUFFERS,
                               decay_odd_groups, gate_function, gate_inputs, head_params, identity,
                               move_pairs, outer_rows, padded_columns, pair_gates, pair_ones,
                               pair_products, pair_ring, pair_steps, pair_update,
                               spread_gate_inputs)
from .gqa_repeat import value_heads_view
from .layout import load_channel_major, store_rows, token_columns
from .slots import PoolRows

L2NORM_EPS = 1e-6     # l2norm(x) = x * rsqrt(sum(x^2) + eps): eps inside the sqrt, on the sum
# The verify form keeps every token's state: where a program has at most this many (batch, head)
# pairs, each token's state is copied (ScalarE) to one of two rings and stored from there, so that
# the next token's update waits for the copy, not for the store (with more pairs the copies cost
# more than the wait: the book's chapter on T tokens).
VERIFY_COPY_PAIRS = 8


class PairInputs(nl.NKIObject):
    """One call's inputs of gated_delta_rule_block, channel-major, and the constants that preparing
    its chunks of pairs reads.

    Fields:
        q, k: [dk, nq, B] @ SBUF, bf16 or fp32, raw queries and keys (nq: nv, or the nk key heads,
            value head h reading key head h // G).
        v: [dv, nv, B] @ SBUF, bf16 or fp32.
        a, b: [nv, B] @ SBUF, bf16 or fp32, the in_proj_a and in_proj_b outputs.
        A_log, dt_bias: [nv, 1] @ SBUF, fp32 (gate_params).
        ones: pair_ones(dk, dv, nv), or None: built when the call starts.
        hp, ident: head_params(A_log, dt_bias, P) and identity(), or None: built when the call
            starts (`ready`).
        o_dtype: the dtype of the call's o.
        chunk: the first chunk of pairs, prepared ahead (prepare_gates, prepare_qk), or None.
    """

    def __init__(self, q, k, v, a, b, gate_params, ones=None):
        self.q = q
        self.k = k
        self.v = v
        self.a = a
        self.b = b
        self.A_log, self.dt_bias = gate_params
        self.ones = ones
        self.hp = None
        self.ident = None
        self.o_dtype = None
        self.chunk = None

    def ready(self, o_dtype):
        """The constants not given yet, in the order the call issues them."""
        if self.ones is None:
            self.ones = pair_ones(self.q.shape[0], self.v.shape[0], self.v.shape[1])
        if self.ident is None:
            self.ident = identity()
        if self.hp is None:
            self.hp = head_params(self.A_log, self.dt_bias, self.ones.shape[0])
        if self.o_dtype is None:
            self.o_dtype = o_dtype


def gated_delta_rule_block(o, new_state, ins, recurrent_state, ring=None, store=True, copy=None,
                           beside=None):
    """One decode step of the gated delta rule on channel-major SBUF tiles, state HBM -> HBM.

    Dimensions:
        B: batch; nv: value heads; nq: heads of q and k, nv or the nk key heads; G = nv / nq;
        dk, dv: head dims; a chunk: max(1, 128 // nv) batch rows x nv heads (<= 128 pairs);
        a sub-chunk: the pairs the state streams in (delta_rule_pairs.pair_steps)

    Args:
        o (nl.ndarray): [dv, nv, B] @ SBUF, any float dtype, written: o[j, h, b] = o_hbm[b, h, j].
        new_state (nl.ndarray): [B, nv, dk, dv] @ HBM, fp32, written.
        ins (PairInputs): q, k, v, a, b and the head parameters.
        recurrent_state (nl.ndarray): [B, nv, dk, dv] @ HBM, fp32, read only.
        ring (nl.ndarray): optional, the state ring an earlier call returned, holding the state
            this call starts from (every sub-chunk in a slot of its own: `ring_holds_state`);
            recurrent_state is then not read (None is fine).
        store (bool): False leaves the new state in the returned ring only (new_state may be
            None): a later call continues from it without a round trip through HBM.
        copy (nl.ndarray): optional, a ring-shaped SBUF tile (delta_rule_pairs.pair_ring): each
            sub-chunk's new state is copied there (ScalarE) and stored from it, so that a next
            call's update of the ring waits for the copy, not for the store.
        beside (object): optional, work of the caller's that shares the engines with the
            recurrence (the fused kernel's z projection, kernels/overlap.py). The recurrence hands
            it the points where that work may go, in program order: beside.state_loads_issued()
            once the first state loads are issued (a DMA issued then runs ahead of the state
            stores), beside.tensor_idle() where TensorE would wait on VectorE and ScalarE (before
            the first chunk's preparation and each piece of the first sub-chunk's operands), and
            beside.store_queue(), the engine whose queue takes the state stores (None: the
            compiler's queues).

    Returns:
        The state ring, [dk, slots, pairs, dv] fp32 SBUF; `o` and `new_state` hold the results.

    Notes:
        - dk, dv, nv <= 128; nv a multiple of nq. With nq = nk, value head h reads key head
          h // G through gqa_repeat.value_heads_view (no copy).
        - Program order is the schedule, and each engine runs in order: the next chunk's inputs
          are prepared under the current chunk's sub-chunks, one stage between two update groups
          (each stage waits on the last, so issued together they would stall every engine in
          turn), and the operands of sub-chunk i + 1 (S^T [k, q], the k rows, delta, the delta
          rows) are issued in pieces between the update groups of sub-chunk i, so that TensorE,
          VectorE and ScalarE work on both at once instead of in turn.
        - Isolation: no matmul sums over two (batch, head) pairs, so a non-finite value in one
          sequence's inputs or state reaches no other sequence, and one in A_log or dt_bias no
          other head (delta_rule_pairs).
        - fp32 throughout; S^T [k, q] is read before the decay and scaled after; o is rounded
          once to o.dtype. exp(g) may underflow to 0 (the state becomes k delta^T).
        - SBUF: the state ring (64 KiB per partition at dk = dv = 128, whatever B) plus two
          chunks' per-pair inputs; PSUM: at most 6 banks.

    Pseudocode:
        q, k = repeat(q, G, axis=1).astype(float32), repeat(k, G, axis=1).astype(float32)
        q = q / sqrt((q * q).sum(axis=0) + 1e-6) * dk ** -0.5               # [dk, nv, B]
        k = k / sqrt((k * k).sum(axis=0) + 1e-6)
        decay = exp(-exp(A_log) * softplus(a + dt_bias)); beta = sigmoid(b)   # [nv, B]
        for b_, h in pairs:
            S = recurrent_state[b_, h] * decay[h, b_]                        # [dk, dv]
            delta = (v[:, h, b_] - S.T @ k[:, h, b_]) * beta[h, b_]
            S = S + outer(k[:, h, b_], delta)
            o[:, h, b_] = S.T @ q[:, h, b_]
            new_state[b_, h] = S
    """
    _check_block_args(o, new_state, ins, recurrent_state)
    dk, _, B = ins.q.shape
    dv, nv, _ = ins.v.shape
    ins.ready(o.dtype)
    steps = pair_steps(B, nv)
    expect((ring is None and store) or ring_holds_state(B, nv), "ring",
           "a state ring kept across calls only where it holds the whole state "
           f"({STATE_BUFFERS} sub-chunks)", f"{len(steps)} sub-chunks")
    source = None                                         # where the loads come from, if any
    if ring is None:
        ring = pair_ring(dk, dv, steps)
        source = recurrent_state
    for i in range(STATE_BUFFERS - 1):                   # the loads run ahead of compute
        _load_pairs(ring, source, steps, i)
    queue = None
    if beside is not None:
        beside.state_loads_issued()
        queue = beside.store_queue()
    pads = (padded_columns(dk, ring.shape[2], "k_pad"), padded_columns(dv, ring.shape[2],
                                                                      "delta_pad"))
    _tensor_idle(beside)
    chunk = ins.chunk
    if chunk is None:
        chunk = _prepare_pairs({"b0": 0, "bc": steps[0][1]}, ins)
    ops = _start_operands(chunk, ring, steps, 0, pads)
    for j in range(ops["pieces"]):
        _tensor_idle(beside)
        _operand_pieces(ops, j, j + 1)
    nxt = chunk
    staged = 0                                            # stages of nxt issued so far
    for i in range(len(steps)):
        b0, bc, s0, mc = steps[i]
        _load_pairs(ring, source, steps, i + STATE_BUFFERS - 1)
        if s0 == 0 and b0 + bc < B:                       # the next chunk's inputs: in stages
            nxt = {"b0": b0 + bc, "bc": min(bc, B - b0 - bc)}     # under this chunk's later
            staged = 0                                            # sub-chunks, or at once if
            if mc == bc * nv:                                     # its first comes next
                staged = _prepare_stages(nxt, ins, staged, PREP_STAGES)
        upcoming_ops = None
        if i + 1 < len(steps):
            upcoming = chunk
            if steps[i + 1][0] != b0:
                upcoming = nxt
                staged = _prepare_stages(nxt, ins, staged, PREP_STAGES)
            upcoming_ops = _start_operands(upcoming, ring, steps, i + 1, pads)
        groups = -(-mc // GROUP)
        if nxt is not chunk and s0 > 0:                   # a stage of the next chunk's (below)
            staged = _prepare_stages(nxt, ins, staged, staged + 1)
        decay_odd_groups(ring, i, steps, chunk["gbc"])
        done = 0
        for g in range(groups):                           # S = exp(g) S + k delta^T, a group
            pair_update(ring, i, steps, ops["k_rows"], ops["d_rows"], chunk["gbc"], ins.ident, g)
            if upcoming_ops is not None:                  # and a share of i + 1's operands
                done = _operand_pieces(upcoming_ops, done,
                                       (g + 1) * upcoming_ops["pieces"] // groups)
            if nxt is not chunk and s0 > 0:               # and one of the next chunk's
                staged = _prepare_stages(nxt, ins, staged, staged + 1)
        if store:
            _store_pairs(ring, copy, new_state, steps, i, queue)
        if s0 + mc == bc * nv:                            # the chunk's last sub-chunk
            nisa.tensor_copy(o[:, :, b0:b0 + bc].permute((0, 2, 1)),
                             chunk["o"].reshape_dim(1, (bc, nv)))
            chunk = nxt
        ops = upcoming_ops
    return ring


def gated_delta_rule_tokens(o, new_state, recurrent_state, tokens, h0, beside=None, slots=None):
    """T tokens per sequence of the recurrence (a speculative-decoding verify step; one with T = 1),
    token t starting from the state token t - 1 left, for value heads h0 .. h0 + nh - 1 of the
    state tensors (all of them, or one program's share on an LNC grid).

    Args:
        o (nl.ndarray): [dv, nh, B * T] @ SBUF, written: token t of sequence b in column b * T + t.
        new_state (nl.ndarray): @ HBM, fp32, written: [B, nv, dk, dv], the state after the last
            token; or [B, T, nv, dk, dv], the state after each token; or with slots, the pool
            [N, nv, dk, dv], token t's state of sequence b at slot write_indices[b, t].
        recurrent_state (nl.ndarray): [B, nv, dk, dv] @ HBM, fp32, read only; or with slots, the
            pool (new_state itself), sequence b's state at slot read_indices[b].
        tokens (list): T PairInputs, token t's columns (token_inputs, or prepare_gates and
            prepare_qk).
        h0 (int): the first value head; nh = o.shape[1].
        beside (object): optional, as gated_delta_rule_block's, given to every token's call and
            told first which token that is: beside.token_starts(t, T).
        slots (kernels.slots.Slots): optional, the pool form's slots.

    Notes:
        - The state stays in the recurrence's ring between two tokens where the ring holds all of
          it (`ring_holds_state`); else it goes through HBM (scratch, where only the last token's
          state is kept, or where a pool's checkpoint may not be kept: then copied to its slot).
        - Keeping every token's state with at most VERIFY_COPY_PAIRS pairs, each token's state is
          stored from a copy (gated_delta_rule_block's `copy`), two rings in turn.
    """
    T = len(tokens)
    dv, nh, N = o.shape
    B = N // T
    nv, dk = recurrent_state.shape[1], recurrent_state.shape[2]
    keep = ring_holds_state(B, nh)
    every = slots is not None or len(new_state.shape) == 5
    scratch = None
    if T > 1 and not keep and (slots is not None or not every):
        scratch = nl.ndarray((B, T - 1, nv, dk, dv), nl.float32, buffer=nl.hbm, name="token_states")
    copies = None
    if every and keep and T > 1 and B * nh <= VERIFY_COPY_PAIRS:
        steps = pair_steps(B, nh)
        copies = [pair_ring(dk, dv, steps, "state_copy"), pair_ring(dk, dv, steps, "state_copy")]
    src = recurrent_state[:, h0:h0 + nh]
    if slots is not None:
        src = PoolRows(recurrent_state, slots.read, h0, nh)
    ring = None
    for t in range(T):
        dst = _token_state(new_state, scratch, slots, t, h0, nh)
        copy = None
        if copies is not None and t < T - 1:
            copy = copies[t % 2]
        if not keep:
            ring = None
        if beside is not None:
            beside.token_starts(t, T)
        ring = gated_delta_rule_block(token_columns(o, t, T), dst, tokens[t], src, ring,
                                      every or t == T - 1 or not keep, copy, beside)
        if slots is not None and scratch is not None and t < T - 1:
            _keep_checkpoint(PoolRows(new_state, slots.write[:, :, t], h0, nh), dst)
        src = dst


def _token_state(new_state, scratch, slots, t, h0, nh):
    """Where token t's state goes (heads h0 .. h0 + nh - 1): scratch between two tokens where it
    is one, else its pool slots, else new_state (token t's, if it keeps every token's)."""
    if scratch is not None and t < scratch.shape[1]:
        return scratch[:, t, h0:h0 + nh]
    if slots is not None:
        return PoolRows(new_state, slots.write[:, :, t], h0, nh)
    if len(new_state.shape) == 5:
        return new_state[:, t, h0:h0 + nh]
    return new_state[:, h0:h0 + nh]


def _keep_checkpoint(rows, states):
    """A token's states [B, nh, dk, dv] @ HBM copied to their pool slots (HBM -> HBM, one DMA per
    sequence; an out-of-range slot skipped)."""
    for b in range(rows.shape[0]):
        nisa.dma_copy(rows.heads(b, 0, rows.shape[1]), states[b].permute((1, 0, 2)),
                      oob_mode=nisa.oob_mode.skip)


def token_inputs(q, k, v, a, b, gate_params, hp, ones, T):
    """T PairInputs, token t's columns (b * T + t) of each channel-major tile: each call of the
    block prepares its own chunks, its identity built where it starts (hp and ones, given, are
    shared)."""
    tokens = []
    for t in range(T):
        ins = PairInputs(token_columns(q, t, T), token_columns(k, t, T), token_columns(v, t, T),
                         token_columns(a, t, T), token_columns(b, t, T), gate_params, ones)
        ins.hp = hp
        tokens.append(ins)
    return tokens


def prepare_gates(a, b, gate_params, hp, ones, T):
    """The gates of the first chunk of pairs of T tokens' calls of gated_delta_rule_block (the same
    sequences, token after token), before any of them runs: they read only a, b and the head
    parameters, so that a caller can issue them as soon as a and b are projected. A function over
    every token at a time (one ScalarE table load per function, not one per token), the gates'
    PSUM inputs copied to SBUF (T tokens do not hold T banks). Finish with prepare_qk.

    Args:
        a, b (nl.ndarray): [nv, B * T] @ SBUF: token t of sequence b in column b * T + t.
        gate_params (tuple): (A_log, dt_bias), [nv, 1] @ SBUF, fp32.
        hp (nl.ndarray): head_params(A_log, dt_bias, ones.shape[0]), issued where the caller
            wants it.
        ones (nl.ndarray): pair_ones(dk, dv, nv).
        T (int): tokens per sequence.

    Returns:
        A list of T PairInputs, q, k and v not yet set (prepare_qk).
    """
    ident = identity()
    tokens = []
    for t in range(T):
        ins = PairInputs(None, None, None, token_columns(a, t, T), token_columns(b, t, T),
                         gate_params, ones)
        ins.hp = hp
        ins.ident = ident
        ins.chunk = {"b0": 0, "bc": pair_steps(a.shape[1] // T, a.shape[0])[0][1]}
        tokens.append(ins)
    for s in range(PREP_QK, PREP_STEPS - 1):
        for t in range(T):
            c = tokens[t].chunk
            _prepare_step(c, tokens[t], s)
            if s == PREP_QK + 1:
                c["ab"] = _to_sbuf(c["ab"], "ab_sb")
    for i in range(2):                                    # the last gate step, a function at a time
        for t in range(T):
            gate_function(tokens[t].chunk, i)
    return tokens


def prepare_qk(tokens, q, k, v, o):
    """The rest of prepare_gates' chunks: l2norm(q, k) and k . q of each token, a step over every
    token at a time (each step's PSUM sums read, or copied to SBUF, before the next token's), so
    that only the state update is left between two tokens. q, k [dk, nq, B * T], v [dv, nv, B * T]
    @ SBUF, token t in column b * T + t; o: the tile the tokens' outputs go to (its dtype).
    Returns `tokens`, ready for gated_delta_rule_tokens."""
    T = len(tokens)
    for t in range(T):
        tokens[t].q = token_columns(q, t, T)
        tokens[t].k = token_columns(k, t, T)
        tokens[t].v = token_columns(v, t, T)
        tokens[t].o_dtype = o.dtype
    for s in range(PREP_QK):
        if s == 2:
            continue                                      # with step 1 (its PSUM sums' reader)
        for t in range(T):
            c = tokens[t].chunk
            _prepare_step(c, tokens[t], s)
            if s == 1:
                _prepare_step(c, tokens[t], 2)
            elif s == 5:
                c["kq"] = _to_sbuf(c["kq"], "kq_sb")
    return tokens


def first_chunk_pairs(B, nv):
    """The (batch, head) pairs of a [B, nv] block's first chunk: what prepare_gates and prepare_qk
    prepare per token."""
    return pair_steps(B, nv)[0][1] * nv


def _to_sbuf(psum, name):
    """A PSUM tile copied to a new SBUF tile (VectorE)."""
    t = nl.ndarray(psum.shape, nl.float32, name=name)
    nisa.tensor_copy(t, psum)
    return t


def ring_holds_state(B, nv):
    """Whether the state ring of a [B, nv] block holds its whole state at once, each sub-chunk
    in a slot of its own, so that a next token can start from it (`gated_delta_rule_block`'s
    ring and store)."""
    return len(pair_steps(B, nv)) <= STATE_BUFFERS


def _load_pairs(ring, source, steps, i):
    """Sub-chunk i's state from HBM into its ring slot, unless the ring already holds it."""
    if source is not None:
        move_pairs(ring, source, steps, i, load=True)


def _store_pairs(ring, copy, new_state, steps, i, queue):
    """Sub-chunk i's new state to HBM from its ring slot, or from a copy of it (ScalarE)."""
    src = ring
    if copy is not None:
        nisa.tensor_copy(copy[:, i % copy.shape[1]], ring[:, i % ring.shape[1]],
                         engine=nisa.engine.scalar)
        src = copy
    move_pairs(src, new_state, steps, i, load=False, store_queue=queue)


def _tensor_idle(beside):
    """The caller's work for a TensorE wait, if any (gated_delta_rule_block's beside)."""
    if beside is not None:
        beside.tensor_idle()


# SBUF per partition a prepared pair holds until its update: q, k (8 B), the gates (8), k . q (4),
# v and o (2 each, bf16): what prepare_gates and prepare_qk keep per pair and token
PREPARED_PAIR_BYTES = 24
PREP_QK = 6           # _prepare_step: steps 0 .. 5 build qk and kq, the rest the gates
PREP_STEPS = PREP_QK + 2 + GATE_STEPS
PREP_STAGES = max(PREP_QK, PREP_STEPS - PREP_QK)   # stage s: step s of each chain


def _prepare_pairs(c, ins):
    """What every pair of chunk c (batch rows c["b0"] .. c["b0"] + c["bc"] - 1, n = bc * nv
    pairs) needs before its state streams, every step in turn (_prepare_step); returns c."""
    for s in range(PREP_STEPS):
        _prepare_step(c, ins, s)
    return c


def _prepare_stages(c, ins, s0, s1):
    """Stages s0 .. s1 - 1 of chunk c's preparation (those not past the last), each a step of the
    qk chain and one of the gates'; returns the next stage."""
    for s in range(s0, min(s1, PREP_STAGES)):
        if s < PREP_QK:
            _prepare_step(c, ins, s)
        if PREP_QK + s < PREP_STEPS:
            _prepare_step(c, ins, PREP_QK + s)
    return max(s0, min(s1, PREP_STAGES))


def _prepare_step(c, ins, s):
    """Step s of chunk c's preparation, one engine's work reading the step before (in its own
    chain); after the last, c holds v, o [dv, n]; qk [dk, n, 2] l2norm(k), l2norm(q) dk**-0.5; kq
    PSUM [dv, n] k . q; gbc [P, 2, n] exp(g), beta per pair on every partition. Issued a stage
    per update group under the previous chunk, the chains' waits fall between groups instead of
    holding up every engine at once."""
    q, k, v, a, b, ones = ins.q, ins.k, ins.v, ins.a, ins.b, ins.ones
    nv = a.shape[0]
    dv = ones.shape[0]
    if v is not None:         # (the gates' steps need only a, b: prepare_gates)
        dv = v.shape[0]
    b0, bc = c["b0"], c["bc"]
    consts = {"ones": ones}
    # q and k first: S^T [k, q] needs only them (and ScalarE's square and rsqrt share a table)
    if s == 0:
        c["v"] = nl.ndarray((dv, bc * nv), v.dtype, name="v_pairs")
        nisa.tensor_copy(c["v"].reshape_dim(1, (bc, nv)), v[:, :, b0:b0 + bc].permute((0, 2, 1)),
                         engine=nisa.engine.gpsimd)
        c["o"] = nl.ndarray((dv, bc * nv), ins.o_dtype, name="o_pairs")
        c["sq"] = square_qk(q, k, b0, bc, nv)
    elif s == 1:
        c["sq"] = sum_qk_squares(c["sq"], consts)
    elif s == 2:
        c["sq"] = rstd_qk(c["sq"])
    elif s == 3:
        c["qk"] = scale_qk(c.pop("sq"), q, k, b0, bc, nv)
    elif s == 4:
        c["kq"] = kq_products(c["qk"])
    elif s == 5:
        c["kq"] = sum_kq(c["kq"], dv, consts)
    elif s == PREP_QK:
        c["ab"] = spread_gate_inputs(a, b, b0, bc, ins.ident)
    elif s == PREP_QK + 1:
        c["ab"] = gate_inputs(c["ab"], ones)
    else:
        pair_gates(c, ins.hp, s - PREP_QK - 2)


def _start_operands(c, ring, steps, i, pads):
    """The operands of sub-chunk i's update (chunk c), to be built piece by piece
    (_operand_pieces) under the previous sub-chunk's update: its PSUM [S^T k, S^T q], its k
    columns in the padded k tile, and the tiles of its k rows and delta rows (outer_rows)."""
    mc = steps[i][3]
    groups = -(-mc // GROUP)
    dk, dv = pads[0].shape[0], pads[1].shape[0]
    nisa.tensor_copy(pads[0][:, 0:mc, 0], c["qk"][:, steps[i][2]:steps[i][2] + mc, 0],
                     engine=nisa.engine.gpsimd)
    return {"c": c, "ring": ring, "steps": steps, "i": i, "pads": pads, "groups": groups,
            "pieces": 3 * groups + 1,
            "kvsq": nl.ndarray((dv, mc, 2), nl.float32, buffer=nl.psum, name="kv_sq"),
            "k_rows": nl.ndarray((PMAX, groups, dk), nl.float32, name="k_rows"),
            "d_rows": nl.ndarray((PMAX, groups, dv), nl.float32, name="delta_rows")}


def _operand_pieces(o, j0, j1):
    """Pieces j0 .. j1 - 1 of the operands started by _start_operands, in dependency order (G
    groups): S^T [k, q] of group j (pieces 0 .. G - 1); the k rows (G .. 2G - 1; piece G + g
    transposes groups g .. g + BANK_GROUPS - 1 when BANK_GROUPS divides g); delta and o (2G); the
    delta rows (2G + 1 .. 3G, likewise). Returns j1."""
    G = o["groups"]
    _, _, s0, mc = o["steps"][o["i"]]
    c = o["c"]
    for j in range(j0, j1):
        if j < G:
            pair_products(o["ring"], c["qk"], o["steps"], o["i"], o["kvsq"], GROUP * j,
                          min(mc, GROUP * (j + 1)))
        elif j < 2 * G:
            if (j - G) % BANK_GROUPS == 0:
                outer_rows(o["pads"][0], mc, o["k_rows"], j - G)
        elif j == 2 * G:
            delta_and_output(c, o["kvsq"], s0, mc, o["pads"][1][:, 0:mc, 0])
        else:
            if (j - 2 * G - 1) % BANK_GROUPS == 0:
                outer_rows(o["pads"][1], mc, o["d_rows"], j - 2 * G - 1)
    return j1


def _check_block_args(o, new_state, ins, recurrent_state):
    dk, nq, B = ins.q.shape
    dv, nv, _ = ins.v.shape
    expect(dk <= PMAX, "q", f"head_k_dim (partitions) <= {PMAX}", dk)
    expect(dv <= PMAX, "v", f"head_v_dim (partitions) <= {PMAX}", dv)
    expect(nv <= PMAX, "v", f"value heads <= {PMAX} (a and b hold them on partitions)", nv)
    expect(nv % nq == 0, "q", f"heads q.shape[1] dividing the value heads nv = {nv}", nq)
    expect_shape(ins.k, "k", (dk, nq, B))
    expect_shape(ins.v, "v", (dv, nv, B))
    expect_shape(o, "o", (dv, nv, B))
    expect_shape(ins.a, "a", (nv, B))
    expect_shape(ins.b, "b", (nv, B))
    expect_shape(ins.A_log, "A_log", (nv, 1))
    expect_shape(ins.dt_bias, "dt_bias", (nv, 1))
    expect_dtype(ins.A_log, "A_log", nl.float32)
    expect_dtype(ins.dt_bias, "dt_bias", nl.float32)
    states = (("recurrent_state", recurrent_state), ("new_state", new_state))
    for name, t in states:
        if t is not None:
            expect_shape(t, name, (B, nv, dk, dv))
            expect_dtype(t, name, nl.float32)


def _pairs(x, b0, bc, nv):
    """Batch rows b0 .. b0+bc-1 of a channel-major [d, nq, B] tile as [d, bc, nq, G]: the
    value-head view of key heads, pair (bi, h = j * G + g) in column bi * nv + h."""
    view = value_heads_view(x, nv // x.shape[1])                 # [d, nq, G, B]
    return view[:, :, :, b0:b0 + bc].permute((0, 3, 1, 2))


def square_qk(q, k, b0, bc, nv):
    """k^2 and q^2 of batch rows b0 .. b0+bc-1 per value head: [dk, bc, nv, 2] fp32."""
    dk = q.shape[0]
    sq = nl.ndarray((dk, bc, nv, 2), nl.float32, name="qk_squares")
    nisa.activation(sq[:, :, :, 0], op=nl.square, data=_pairs(k, b0, bc, nv))
    nisa.activation(sq[:, :, :, 1], op=nl.square, data=_pairs(q, b0, bc, nv))
    return sq




def sum_qk_squares(sq, consts):
    """The sums over dk of sq [dk, bc, nv, 2], on every partition: PSUM (a ones-matmul)."""
    dk = sq.shape[0]
    ss = nl.ndarray(sq.shape, nl.float32, buffer=nl.psum, name="qk_sumsq")
    nisa.nc_matmul(ss, consts["ones"][0:dk, 0:dk], sq, is_stationary_onezero=True)
    return ss


def rstd_qk(ss):
    """rsqrt(sum + eps) of sum_qk_squares' sums (ScalarE)."""
    rstd = nl.ndarray(ss.shape, nl.float32, name="qk_rstd")
    nisa.activation(rstd, op=nl.rsqrt, data=ss, bias=L2NORM_EPS)
    return rstd


def scale_qk(rstd, q, k, b0, bc, nv):
    """k * rstd and q * dk**-0.5 * rstd (VectorE): [dk, n, 2] fp32, [.., 0] = k."""
    dk = q.shape[0]
    qk = nl.ndarray((dk, bc * nv, 2), nl.float32, name="qk")
    nisa.tensor_tensor(qk[:, :, 0], _pairs(k, b0, bc, nv), rstd[:, :, :, 0], op=nl.multiply)
    nisa.scalar_tensor_tensor(qk[:, :, 1], data=_pairs(q, b0, bc, nv), op0=nl.multiply,
                              operand0=dk ** -0.5, op1=nl.multiply, operand1=rstd[:, :, :, 1])
    return qk




def kq_products(qk):
    """k * q of every pair: [dk, n] fp32 (VectorE)."""
    dk, n, _ = qk.shape
    prod = nl.ndarray((dk, n), nl.float32, name="kq_prod")
    nisa.tensor_tensor(prod, qk[:, :, 0], qk[:, :, 1], op=nl.multiply)
    return prod


def sum_kq(prod, dv, consts):
    """The sums over dk of kq_products' prod on dv partitions: PSUM [dv, n] (a ones-matmul)."""
    dk, n = prod.shape
    kq = nl.ndarray((dv, n), nl.float32, buffer=nl.psum, name="kq")
    nisa.nc_matmul(kq, consts["ones"][0:dk, 0:dv], prod, is_stationary_onezero=True)
    return kq


def delta_and_output(c, kvsq, s0, mc, delta=None):
    """delta (returned; written into `delta` [dv, mc] if given) and o of chunk c's pairs
    s0 .. s0+mc-1 from [S^T k, S^T q] (kvsq, read before the decay): [kv, sq] = exp(g)
    [S^T k, S^T q], delta = (v - kv) beta, o = sq + (k . q) delta, i.e. S_new^T q. Channel-major
    [dv, pairs]."""
    dv = c["v"].shape[0]
    gbc = c["gbc"]
    kvsq_d = nl.ndarray((dv, mc, 2), nl.float32, name="kv_sq_decayed")
    nisa.tensor_tensor(kvsq_d, kvsq, gbc[0:dv, 0, s0:s0 + mc].expand_dim(2).broadcast(2, 2),
                       op=nl.multiply)
    if delta is None:
        delta = nl.ndarray((dv, mc), nl.float32, name="delta")
    nisa.tensor_tensor(delta, c["v"][:, s0:s0 + mc], kvsq_d[:, :, 0], op=nl.subtract)
    nisa.tensor_tensor(delta, delta, gbc[0:dv, 1, s0:s0 + mc], op=nl.multiply)
    kq_delta = nl.ndarray((dv, mc), nl.float32, name="kq_delta")
    nisa.tensor_tensor(kq_delta, c["kq"][:, s0:s0 + mc], delta, op=nl.multiply)
    nisa.tensor_tensor(c["o"][:, s0:s0 + mc], kvsq_d[:, :, 1], kq_delta, op=nl.add)
    return delta


def load_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias):
    """The stage's HBM inputs as the channel-major SBUF tiles `gated_delta_rule_block` takes.

    Returns (q, k, v, a, b, A_log, dt_bias): q, k as [dk, nq, B] views (nq = q.shape[1], nv or the
    nk key heads), v [dv, nv, B], a, b [nv, B], A_log, dt_bias [nv, 1].
    """
    B, nq, dk = q.shape
    nv, dv = v.shape[1], v.shape[2]
    # [B, heads, d] rows -> channel-major [d, B * heads] tiles, viewed as [d, heads, B]
    q_sb = nl.ndarray((dk, B * nq), q.dtype, name="q_T")
    load_channel_major(q_sb, q.reshape((B * nq, dk)))
    k_sb = nl.ndarray((dk, B * nq), k.dtype, name="k_T")
    load_channel_major(k_sb, k.reshape((B * nq, dk)))
    v_sb = nl.ndarray((dv, B * nv), v.dtype, name="v_T")
    load_channel_major(v_sb, v.reshape((B * nv, dv)))
    a_sb = nl.ndarray((nv, B), a.dtype, name="a")
    load_channel_major(a_sb, a)
    b_sb = nl.ndarray((nv, B), b.dtype, name="b")
    load_channel_major(b_sb, b)
    A_sb, dt_sb = load_head_params(A_log, dt_bias, 0, nv)
    return (_heads_first(q_sb, B), _heads_first(k_sb, B), _heads_first(v_sb, B), a_sb, b_sb,
            A_sb, dt_sb)


def load_head_params(A_log, dt_bias, h0, nh):
    """A_log and dt_bias of value heads h0 .. h0 + nh - 1 from HBM, as the [nh, 1] fp32 SBUF
    tiles `gated_delta_rule_block` takes (one head per partition)."""
    A_sb = nl.ndarray((nh, 1), nl.float32, name="A_log")
    nisa.dma_copy(A_sb, A_log[h0:h0 + nh].reshape((nh, 1)))
    dt_sb = nl.ndarray((nh, 1), nl.float32, name="dt_bias")
    nisa.dma_copy(dt_sb, dt_bias[h0:h0 + nh].reshape((nh, 1)))
    return A_sb, dt_sb


def _heads_first(t, B):
    """[d, B * heads] (HBM's row order: b-major) as the [d, heads, B] view the block takes."""
    return t.reshape_dim(1, (B, t.shape[1] // B)).permute((0, 2, 1))


def gated_delta_rule_hbm(new_state, q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """The stage from its HBM inputs (unchecked): writes new_state, returns o on chip.

    Args as gated_delta_rule_kernel, but q, k may hold the nk key heads ([B, nk, dk]);
    new_state [B, nv, dk, dv] @ HBM, fp32, written. Returns o [dv, B, nv] @ SBUF, bf16, for the
    caller to store (the stage kernel) or to normalise on chip (gdn_tkg).
    """
    B, nv, dv = v.shape
    qT, kT, vT, a_sb, b_sb, A_sb, dt_sb = load_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias)
    o = nl.ndarray((dv, B, nv), nl.bfloat16, name="o_sb")
    gated_delta_rule_block(o.permute((0, 2, 1)), new_state,
                           PairInputs(qT, kT, vT, a_sb, b_sb, (A_sb, dt_sb)), recurrent_state)
    return o


def check_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """The stage's input contract (shapes, dims <= 128, dtypes); AssertionError naming the argument."""
    expect_rank(q, "q", 3)
    B, nv, dk = q.shape
    expect(dk <= PMAX, "q", f"head_k_dim q.shape[2] <= {PMAX} (q and k hold dk on partitions)", dk)
    expect(nv <= PMAX, "q", f"num_v_heads q.shape[1] <= {PMAX}", nv)
    expect_shape(k, "k", (B, nv, dk))
    expect_rank(v, "v", 3)
    expect(v.shape[0] == B and v.shape[1] == nv, "v", f"shape [{B}, {nv}, dv] (B, nv as q)",
           list(v.shape))
    dv = v.shape[2]
    expect(dv <= PMAX, "v", f"head_v_dim v.shape[2] <= {PMAX} (v and o hold dv on partitions)", dv)
    expect_shape(a, "a", (B, nv))
    expect_shape(b, "b", (B, nv))
    expect_shape(A_log, "A_log", (nv,))
    expect_shape(dt_bias, "dt_bias", (nv,))
    expect_shape(recurrent_state, "recurrent_state", (B, nv, dk, dv))
    expect_dtype(q, "q", nl.bfloat16)
    expect_dtype(k, "k", nl.bfloat16)
    expect_dtype(v, "v", nl.bfloat16)
    expect_dtype(a, "a", nl.bfloat16)
    expect_dtype(b, "b", nl.bfloat16)
    expect_dtype(A_log, "A_log", nl.float32)
    expect_dtype(dt_bias, "dt_bias", nl.float32)
    expect_dtype(recurrent_state, "recurrent_state", nl.float32)


@nki.jit
def gated_delta_rule_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """Stage 4 standalone, HBM to HBM: gates, l2norm and one step of the gated delta rule.

    Dimensions:
        B: batch; nv: value heads (<= 128); dk: head_k_dim (<= 128); dv: head_v_dim (<= 128)

    Args:
        q (nl.ndarray): [B, nv, dk] @ HBM, bf16, queries already repeated to the value heads.
        k (nl.ndarray): [B, nv, dk] @ HBM, bf16, keys, likewise.
        v (nl.ndarray): [B, nv, dv] @ HBM, bf16.
        a (nl.ndarray): [B, nv] @ HBM, bf16, in_proj_a output.
        b (nl.ndarray): [B, nv] @ HBM, bf16, in_proj_b output.
        A_log (nl.ndarray): [nv] @ HBM, fp32.
        dt_bias (nl.ndarray): [nv] @ HBM, fp32.
        recurrent_state (nl.ndarray): [B, nv, dk, dv] @ HBM, fp32, read only.

    Returns:
        o (nl.ndarray): [B, nv, dv] @ shared HBM, bf16, o = S_new^T l2norm(q) dk**-0.5 per (b, h).
        new_state (nl.ndarray): [B, nv, dk, dv] @ shared HBM, fp32, a new tensor.

    Notes:
        - Rejects (AssertionError naming the argument): wrong ranks or shapes (k as q; v, a, b, A_log,
          dt_bias and recurrent_state consistent with q's B, nv, dk and v's dv), dk, dv or
          nv > 128, dtypes other than the above.
        - q, k, v, a, b load as rows and are transposed to channel-major on chip
          (layout.load_channel_major); o goes back the same way (layout.store_rows).

    Pseudocode:
        q = q.astype(float32); k = k.astype(float32)
        q = q / sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * dk ** -0.5
        k = k / sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        beta = sigmoid(b.astype(float32))
        g = -exp(A_log) * softplus(a.astype(float32) + dt_bias)         # threshold 20
        S = recurrent_state * exp(g)[:, :, None, None]
        delta = (v - einsum("bhij,bhi->bhj", S, k)) * beta[:, :, None]
        S = S + k[:, :, :, None] * delta[:, :, None, :]
        o = einsum("bhij,bhi->bhj", S, q).astype(bfloat16)
        return o, S
    """
    check_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    B, nv, dk = q.shape
    dv = v.shape[2]
    o = nl.ndarray((B, nv, dv), nl.bfloat16, buffer=nl.shared_hbm, name="o")
    new_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm, name="new_state")
    o_sb = gated_delta_rule_hbm(new_state, q, k, v, a, b, A_log, dt_bias, recurrent_state)
    store_rows(o.reshape((B * nv, dv)), o_sb.reshape((dv, B * nv)))
    return o, new_state
