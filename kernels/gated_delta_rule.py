"""Stage 4 of the GDN decode step: the gates and the single-token gated delta rule.

Per (batch b, value head h) pair the recurrent state S is a [dk, dv] fp32 matrix, and the stage is
bound by streaming it from HBM and back: 64 KiB each way per pair at dk = dv = 128. Everything per
pair (q, k, v, S^T k, delta, o, the gates) lies channel-major, [d, pairs], the pairs side by side
in the free dim, so one instruction serves every pair of a chunk:

* Reductions over dk are cross-partition sums, done on TensorE: ||q||^2, ||k||^2 and k . q with an
  all-ones stationary (the sum lands on every partition), and S^T [k, q] with the state as the
  stationary and [k, q] as a 2-column moving tile.
* Per-pair scalars (decay exp(g), beta) are computed once in the [nv, B] layout they arrive in,
  then spread to every partition by one matmul against an all-ones stationary.
* The state is *folded* on chip: F = 4 consecutive rows of a pair share a partition, so each state
  DMA moves F * dv * 4 = 2 KiB contiguous per partition and pair (one row per partition would move
  512 B, a fifth of the DMA bandwidth), and R = 4 pairs fill the 128 partitions of a state tile.
  TensorE moves data between the channel-major and the folded layouts: selector matmuls lay [k, q]
  out block-diagonally for S^T [k, q] (F accumulating matmuls per tile, one per pair). The update
  of a tile is two matmuls into one PSUM bank: the diagonal matrix of its R pairs' decays times S,
  then the rank-1 updates k delta^T, one matmul over 16 (pair, fold row) rows of block-diagonal k
  rows and masked delta rows; ScalarE evicts the new state. (A VectorE decay-and-add per tile, two
  512-element fp32 inputs per partition, ~1.2 us, left VectorE ~1.8 us of work per tile with the
  per-pair math: more than the tile's 512 KiB of state DMAs take at 368 GB/s, ~1.4 us.)
* The state streams through a ring of STATE_BUFFERS sub-chunk buffers, software-pipelined in
  program order, the order every engine and DMA queue keeps: the loads run three sub-chunks ahead
  of compute, TensorE works on the next sub-chunk while the other engines prepare the current
  update, and the next chunk's per-pair inputs are prepared in phases under the current one.

About 3 instructions per (b, h) pair at 128 pairs: F / R = 1 matmul for S^T [k, q], and per tile
of R pairs two matmuls and two ScalarE copies (the decay diagonal, the eviction), plus a state DMA
each way per DMA_TILES tiles, ~11 per sub-chunk of 32 pairs and ~50 for the call and the chunk.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from .checks import expect, expect_dtype, expect_rank, expect_shape
from .layout import load_channel_major, store_rows

L2NORM_EPS = 1e-6          # l2norm(x) = x * rsqrt(sum(x^2) + eps): eps inside the sqrt, on the sum
PMAX = 128                 # partitions
QUADRANT = 32              # SBUF partition quadrant = TensorE row tile on trn2
PSUM_FMAX = 512            # fp32 elements of one 2 KiB PSUM bank: a matmul's moving free size on trn2
# State tiles (R pairs each) per DMA: 512 KiB at dk = dv = 128, a sub-chunk in 4 DMAs each way. DMA
# queues are in order and take the DMAs in turn (estimate: nkicpu.costs.DMA_QUEUES, 4 round-robin
# queues), so a sub-chunk's pieces lead their queues and it lands before the next one starts; as
# one 2 MiB DMA it would share the bandwidth with the next sub-chunks' loads and land with them.
DMA_TILES = 2
# Sub-chunk state buffers on chip: loads run STATE_BUFFERS - 1 sub-chunks ahead of compute, and a
# load waits only for the store its buffer held, ordered one sub-chunk earlier. estimate: the
# modeled profile (trn2 cost model) of Qwen3-Next-80B TP4 at B = 32, 64 with 3 buffers has loads
# waiting on stores that wait on compute (7-12 % slower); 5 buffers gain nothing.
STATE_BUFFERS = 4


def state_fold(dk, dv):
    """(F, R): state rows folded onto one partition, and (b, h) pairs stacked per partition tile.

    A pair's [dk, dv] state sits on dk / F partitions, F rows of dv each per partition, so a DMA
    moves F * dv * 4 contiguous bytes per partition and pair (2 KiB at dk = dv = 128, F = 4), and R
    pairs fill the partitions (R * dk / F <= 128). The outer-product matmul contracts over the
    (pair, fold row) index of a tile, R * F rows, which must sit in one 32-partition quadrant; and
    F * dv fp32 must fit one PSUM bank. The first of F = 4, 2 that satisfies this wins; F = 1 (a
    row per partition, R = 128 // dk pairs, reduced to a divisor of 32) always does.
    """
    for F in (4, 2):
        Pd = dk // F
        R = PMAX // Pd if dk % F == 0 else 0
        if R and QUADRANT % (R * F) == 0 and F * dv <= PSUM_FMAX:
            return F, R
    R = PMAX // dk
    while QUADRANT % R:
        R -= 1
    return 1, R


def gated_delta_rule_block(o, new_state, q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """One decode step of the gated delta rule on channel-major SBUF tiles, state streamed HBM -> HBM.

    The building block of stage 4, called by the standalone kernel and by the fused decode kernel.
    It writes `o` and `new_state` and allocates only its own temporaries (constants, fp32 tiles,
    PSUM, a ring of on-chip state buffers).

    Dimensions:
        B: batch; nv: value heads (<= 128); nq: heads of q and k, nv (expanded) or nk (key heads);
        G = nv / nq; dk: head_k_dim (<= 128); dv: head_v_dim (<= 128);
        a chunk: bc = max(1, 128 // nv) batch rows x all nv heads, n = bc * nv <= 128 (b, h) pairs;
        a sub-chunk: up to 128 // F pairs of a chunk (32), the unit the state streams in;
        the state fold (state_fold): F rows per partition, R pairs per partition tile
        (F = R = 4 at dk = dv = 128), Pd = dk / F partitions per pair

    Args:
        o (nl.ndarray): [dv, nv, B] @ SBUF, bf16 (any float dtype), written: o[j, h, b] = o_hbm[b, h, j].
        new_state (nl.ndarray): [B, nv, dk, dv] @ HBM, fp32, written: the state after this step.
        q (nl.ndarray): [dk, nq, B] @ SBUF, bf16 or fp32, raw (not yet l2-normed) queries.
        k (nl.ndarray): [dk, nq, B] @ SBUF, bf16 or fp32, raw keys.
        v (nl.ndarray): [dv, nv, B] @ SBUF, bf16 or fp32.
        a (nl.ndarray): [nv, B] @ SBUF, bf16 or fp32, the decay input (in_proj_a output).
        b (nl.ndarray): [nv, B] @ SBUF, bf16 or fp32, the beta input (in_proj_b output).
        A_log (nl.ndarray): [nv, 1] @ SBUF, fp32.
        dt_bias (nl.ndarray): [nv, 1] @ SBUF, fp32.
        recurrent_state (nl.ndarray): [B, nv, dk, dv] @ HBM, fp32, read only.

    Returns:
        None; `o` and `new_state` hold the results.

    Notes:
        - On chip the state is *folded*: pair p = tile * R + r, state row i = i0 * F + i1 sits on
          partition r * Pd + i0, at free position (tile, i1, column j). Each partition then holds F
          consecutive HBM rows of a pair, so the state DMAs move F * dv * 4 = 2 KiB contiguous per
          partition and pair (dk on partitions, one row each, would move 512 B: a fifth of the DMA
          bandwidth). Everything per pair (q, k, v, S^T k, delta, o, the gates) stays
          channel-major, [d, pairs], the pairs side by side in the free dim.
        - GQA: q and k may hold the nk key heads ([dk, nk, B]); value head h then reads key head
          h // G (gqa_repeat.key_head_of), through stride-0 views, no copy. Already expanded q, k
          ([dk, nv, B]) are the case G = 1. The l2norm runs on the expanded pairs (G x the work of
          a key-head norm, a few hundred elements per partition).
        - Per chunk: the gates, norms, k . q and the block-diagonal [k, q] of all pairs at once
          (~21 instructions); then the state streams through in sub-chunks, each with a state DMA
          in and one out per DMA_TILES tiles (512 KiB), ~11 instructions for its delta, o and
          outer-product operands, and per tile of R pairs F matmuls for S^T [k, q] (one per pair
          at F = R), a ScalarE copy that builds the decay diagonal, the decay and outer-product
          matmuls and a ScalarE eviction. At 128 pairs the standalone kernel issues 386
          instructions (with its loads and stores), about 3.0 per pair.
        - Streaming (_stream): the sub-chunks of all chunks pass through a ring of STATE_BUFFERS
          (4) state buffers, and the program order is the schedule, since every engine and DMA
          queue runs in it. Sub-chunk i first orders the load of sub-chunk i + 3, into the buffer
          sub-chunk i - 1 has just ordered to store; TensorE computes S^T [k, q] of i + 1 before
          the update of i, while VectorE, ScalarE and GpSimd build that update's operands; the
          next chunk's per-pair inputs are prepared in three phases during the current chunk's
          first sub-chunks (_chunk), so no engine waits for their chain. So the loads run ahead
          of compute and the stores behind it, and the state stream keeps the DMA queues busy.
        - Engines: TensorE does every sum over partitions (norms, k . q, S^T [k, q]), the gate
          broadcast, the layout changes (selector matmuls, transposes), the decay (a matmul by a
          diagonal) and the outer products; VectorE the per-pair elementwise math and the 0/1 mask
          multiplies (reading the selector matmuls' PSUM directly), nothing per state tile;
          ScalarE the transcendental functions (softplus, exp, sigmoid, square, rsqrt), the decay
          diagonals and the PSUM evictions, the new state among them; GpSimd the constants and
          SBUF copies only: it runs no float arithmetic on trn2 (neuronx-cc: "TensorTensor cannot
          run on engine Pool").
        - Rounding: q, k, gates, state and all sums in fp32. S^T k is read from the state before
          the decay and scaled after (exp(g) S^T k), and o = exp(g) S^T q + (k . q) delta: both equal
          the reference's order of operations up to fp32 rounding. The new state is
          fp32(fp32(exp(g) S) + k delta^T), as in the reference: PSUM accumulates the two
          matmuls in fp32, and each of their sums has one non-zero term. This takes TensorE's fp32
          products to round as an fp32 multiply does, as nkicpu models them (the documentation
          gives no precision for fp32 matmuls). o is rounded once to o.dtype.
        - exp(g) may underflow to 0 (large A_log or a + dt_bias): the state then becomes k delta^T,
          finite. Zero q, k (and state) give o = 0 and a zero state exactly (0 * rsqrt(eps) = 0).
        - Constraints: dk, dv, nv <= 128; nv a multiple of nq. Per partition SBUF holds the state
          ring (64 KiB at dk = dv = 128, whatever B) plus up to ~31 KiB for two chunks' per-pair
          inputs and the temporaries; PSUM at most 5 banks.

    Pseudocode:
        G = nv // nq
        q = repeat(q, G, axis=1).astype(float32); k = repeat(k, G, axis=1).astype(float32)
        q = q / sqrt((q * q).sum(axis=0) + 1e-6) * dk ** -0.5        # [dk, nv, B]
        k = k / sqrt((k * k).sum(axis=0) + 1e-6)
        decay = exp(-exp(A_log) * softplus(a + dt_bias))               # [nv, B]; softplus(x) = x above 20
        beta = sigmoid(b)
        for b_, h in pairs:
            S = recurrent_state[b_, h] * decay[h, b_]                    # [dk, dv]
            delta = (v[:, h, b_] - S.T @ k[:, h, b_]) * beta[h, b_]      # [dv]
            S = S + outer(k[:, h, b_], delta)
            o[:, h, b_] = S.T @ q[:, h, b_]
            new_state[b_, h] = S
    """
    dk, nq, B = q.shape
    dv, nv, _ = v.shape
    expect(dk <= PMAX, "q", f"head_k_dim (partitions) <= {PMAX}", dk)
    expect(dv <= PMAX, "v", f"head_v_dim (partitions) <= {PMAX}", dv)
    expect(nv <= PMAX, "v", f"value heads <= {PMAX} (a and b hold them on partitions)", nv)
    expect(nv % nq == 0, "q", f"heads q.shape[1] dividing the value heads nv = {nv}", nq)
    expect_shape(k, "k", (dk, nq, B))
    expect_shape(v, "v", (dv, nv, B))
    expect_shape(o, "o", (dv, nv, B))
    expect_shape(a, "a", (nv, B))
    expect_shape(b, "b", (nv, B))
    expect_shape(A_log, "A_log", (nv, 1))
    expect_shape(dt_bias, "dt_bias", (nv, 1))
    expect_shape(recurrent_state, "recurrent_state", (B, nv, dk, dv))
    expect_shape(new_state, "new_state", (B, nv, dk, dv))
    expect_dtype(A_log, "A_log", nl.float32)
    expect_dtype(dt_bias, "dt_bias", nl.float32)
    expect_dtype(recurrent_state, "recurrent_state", nl.float32)
    expect_dtype(new_state, "new_state", nl.float32)

    fold = state_fold(dk, dv)
    consts = _constants(dk, dv, nv, fold)
    gates = _gates(a, b, A_log, dt_bias)                  # [nv, 2, B] fp32: decay, beta
    _stream(o, new_state, q, k, v, gates, recurrent_state, consts, fold)


def _constants(dk, dv, nv, fold):
    """0/1 fp32 tiles every chunk uses, built once on GpSimd and VectorE.

    ones [P, P]; ident [128, 128]; div_f[p, c] = (p // F == c) [128, 128 / F];
    mod_f[p, c] = (p % F == c) [128, F]; quad_f[p, c] = (p // F % W == c) [128, W], W = 32 / F
    pairs per quadrant of (pair, fold row) rows; mask_r[p, r] = (p // Pd == r) [R * Pd, R];
    mask_p[p, c] = (p // Pd == c % R) [R * Pd, >= 128]; sel[i, i1, r, i0] = (i == i0 * F + i1)
    [dk, F, R, Pd] (TensorE moves row i0 * F + i1 of every pair to partition r * Pd + i0 with it).
    """
    F, R = fold
    Pd = dk // F
    RP = R * Pd
    P = max(dk, dv, nv, RP)
    c = {}
    c["ones"] = nl.ndarray((P, P), nl.float32, name="ones")
    nisa.memset(c["ones"], 1.0, engine=nisa.engine.gpsimd)
    ramp = nl.ndarray((PMAX, PMAX), nl.float32, name="ramp")
    nisa.iota(ramp, [[1, PMAX]], offset=0, channel_multiplier=-1)        # ramp[p, j] = j - p
    ident = c["ident"] = nl.ndarray((PMAX, PMAX), nl.float32, name="ident")
    nisa.tensor_scalar(ident, ramp, op0=nl.equal, operand0=0.0)
    by_f = ident.reshape_dim(1, (PMAX // F, F))                          # [p, c, f]: (p == c * F + f)
    c["div_f"] = nl.ndarray((PMAX, PMAX // F), nl.float32, name="div_f")
    nisa.tensor_reduce(c["div_f"], nl.add, by_f, axis=2)
    c["mod_f"] = nl.ndarray((PMAX, F), nl.float32, name="mod_f")
    nisa.tensor_reduce(c["mod_f"], nl.add, by_f.permute((0, 2, 1)), axis=2)
    W = QUADRANT // F
    c["quad_f"] = nl.ndarray((PMAX, W), nl.float32, name="quad_f")
    by_w = c["div_f"].reshape_dim(1, (PMAX // QUADRANT, W))             # [p, q, w]: (p // F == q * W + w)
    nisa.tensor_reduce(c["quad_f"], nl.add, by_w.permute((0, 2, 1)), axis=2)
    c["mask_r"] = nl.ndarray((RP, R), nl.float32, name="mask_r")
    nisa.tensor_reduce(c["mask_r"], nl.add, ident[0:RP, 0:RP].reshape_dim(1, (R, Pd)), axis=2)
    tiles = -(-PMAX // R)
    c["mask_p"] = nl.ndarray((RP, tiles * R), nl.float32, name="mask_p")
    nisa.tensor_copy(c["mask_p"].reshape_dim(1, (tiles, R)), c["mask_r"].expand_dim(1).broadcast(1, tiles),
                     engine=nisa.engine.gpsimd)
    c["sel"] = nl.ndarray((dk, F, R, Pd), nl.float32, name="fold_select")
    nisa.tensor_copy(c["sel"], ident[0:dk, 0:dk].reshape_dim(1, (Pd, F)).permute((0, 2, 1))
                     .expand_dim(2).broadcast(2, R), engine=nisa.engine.gpsimd)
    return c


def _gates(a, b, A_log, dt_bias):
    """decay = exp(-exp(A_log) * softplus(a + dt_bias)) and beta = sigmoid(b), fp32, in [nv, 2, B].

    Heads on partitions, so A_log and dt_bias are the per-partition scale and bias of ScalarE.
    """
    nv, B = a.shape
    sp = nl.ndarray((nv, B), nl.float32, name="softplus")
    nisa.activation(sp, op=nl.softplus, data=a, bias=dt_bias)               # softplus(a + dt_bias)
    neg_A = nl.ndarray((nv, 1), nl.float32, name="neg_A")
    nisa.activation(neg_A, op=nl.exp, data=A_log)
    nisa.tensor_scalar(neg_A, neg_A, op0=nl.multiply, operand0=-1.0)       # -exp(A_log)
    gates = nl.ndarray((nv, 2, B), nl.float32, name="gates")
    nisa.activation(gates[:, 0, :], op=nl.exp, data=sp, scale=neg_A)       # exp(g), g = -A * softplus
    nisa.activation(gates[:, 1, :], op=nl.sigmoid, data=b)                 # beta, fp32
    return gates


def _steps(B, nv, fold):
    """The sub-chunks in stream order: (b0, bc, s0, mc) = pairs s0 .. s0+mc-1 of the chunk of batch
    rows b0 .. b0+bc-1 (chunk pair p = bi * nv + h), at most 128 // F pairs each (the rows of one
    outer-product build), a multiple of R."""
    F, R = fold
    rows = max(1, PMAX // nv)
    m = (PMAX // F) // R * R
    steps = []
    for b0 in range(0, B, rows):
        bc = min(rows, B - b0)
        steps += [(b0, bc, s0, min(m, bc * nv - s0)) for s0 in range(0, bc * nv, m)]
    return steps


def _stream(o, new_state, q, k, v, gates, recurrent_state, consts, fold):
    """The state through the update, sub-chunk by sub-chunk (steps), software-pipelined.

    Engines and DMA queues run their instructions in program order, so the order is the schedule:
    * The state of step i sits in buffer i % STATE_BUFFERS of a ring. Step i first orders the load
      of step i + STATE_BUFFERS - 1, into the buffer that step i - 1 has ordered to store, so loads
      run that far ahead of compute and a load waits only for a store ordered before it.
    * ScalarE builds the step's decay diagonals first (they need only the chunk's decays);
      TensorE computes S^T [k, q] of step i + 1 before step i's update, while VectorE, ScalarE and
      GpSimd build the update's operands.
    * The next chunk's per-pair inputs are prepared in phases (_chunk) from its predecessor's first
      step on, one phase per step under the update, all that is left before its first S^T [k, q].
    """
    dk, _, B = q.shape
    dv, nv, _ = v.shape
    F, R = fold
    steps = _steps(B, nv, fold)
    rows = {b0: bc for b0, bc, _, _ in steps}
    slots = min(STATE_BUFFERS, len(steps))
    tiles = max(-(-mc // R) for *_, mc in steps)
    ring = nl.ndarray((R * (dk // F), slots, tiles, F * dv), nl.float32, name="state_ring")

    def move(i, load):
        b0, _, s0, mc = steps[i]
        hbm = recurrent_state if load else new_state
        _move_state(ring[:, i % slots], hbm, b0 * nv + s0, mc, fold, load)

    def prepare(b0):                  # a chunk's preparation: a generator of its phases
        return _chunk(o.dtype, q, k, v, gates, consts, fold, b0, rows[b0])

    ahead = STATE_BUFFERS - 1
    for i in range(min(ahead, len(steps))):
        move(i, load=True)
    chunk = _rest(prepare(0), None)
    kvsq = _state_products(ring[:, 0], chunk["x"], 0, steps[0][3], fold)
    following, phases = None, iter(())   # the next chunk's dict, and its phases still to run
    for i, (b0, bc, s0, mc) in enumerate(steps):
        if i + ahead < len(steps):
            move(i + ahead, load=True)
        diag = _decay_diagonals(chunk["decay"], s0, mc, fold, consts)
        if s0 == 0 and b0 + bc < B:
            phases = prepare(b0 + bc)
            following = next(phases)
        delta = _delta_and_output(chunk["o"], kvsq, chunk["kq"], chunk["v"], chunk["gbc"], s0, mc)
        lhs, rhs = _outer_operands(chunk["qk"], delta, s0, fold, consts)
        kvsq = None
        if i + 1 < len(steps):
            upcoming = chunk
            if steps[i + 1][0] != b0:
                upcoming = following = _rest(phases, following)
            kvsq = _state_products(ring[:, (i + 1) % slots], upcoming["x"], *steps[i + 1][2:], fold)
        following = next(phases, following)
        _rank1_update(ring[:, i % slots], lhs, rhs, diag, fold)
        move(i, load=False)
        if s0 + mc == bc * nv:
            nisa.tensor_copy(o[:, :, b0:b0 + bc].permute((0, 2, 1)), chunk["o"].reshape_dim(1, (bc, nv)))
            chunk = following


def _rest(phases, last):
    """Run the phases left in a generator; return its last yield (`last` if none was left)."""
    for last in phases:
        pass
    return last


def _chunk(o_dtype, q, k, v, gates, consts, fold, b0, bc):
    """What every pair of batch rows b0 .. b0+bc-1 (all nv heads, n = bc * nv pairs, pair
    p = bi * nv + h) needs before its state streams through, computed once for the whole chunk.

    A generator of three phases, yielding the dict after each so that the caller can issue its
    own work in between. Each phase begins with instructions that read what other engines made in
    the phase before: with the caller's work in between, that is ready when an engine reaches
    them, and no engine's in-order queue stalls on the chain (phase 1: VectorE, ScalarE and GpSimd
    read the inputs; phase 2: TensorE's sums, then ScalarE and VectorE finish the gates and
    norms; phase 3: TensorE's k . q and selector matmuls, then VectorE's block-diagonal mask).
    The dict: gbc [P, 2, >= n] decay, beta on every partition; qk [dk, n, 2] k, q * dk**-0.5;
    decay [R * Pd, tiles] folded; kq PSUM [dv, n] k . q; x [R * Pd, F, n, 2] block-diagonal [k, q];
    v [dv, n] the chunk's v; o [dv, n] for its output.
    """
    dk, nq, _ = q.shape
    dv, nv, _ = v.shape
    F, R = fold
    n = bc * nv
    tiles = -(-n // R)
    c = {}
    spread = _spread_gates(gates, b0, bc, consts)
    squares = _square_qk(q, k, b0, bc, nv // nq)
    c["v"] = nl.ndarray((dv, n), v.dtype, name="v_pairs")
    nisa.tensor_copy(c["v"].reshape_dim(1, (bc, nv)), v[:, :, b0:b0 + bc].permute((0, 2, 1)),
                     engine=nisa.engine.gpsimd)
    c["o"] = nl.ndarray((dv, n), o_dtype, name="o_pairs")
    yield c
    c["gbc"] = _broadcast_gates(spread, tiles * R, consts)
    c["qk"] = _normalize_qk(squares, q, k, b0, bc, nv // nq, consts)
    c["decay"] = _fold_decay(c["gbc"], fold, dk, consts, tiles)
    yield c
    c["kq"] = _k_dot_q(c["qk"], dv, consts)
    c["x"] = _block_diagonal_qk(c["qk"], fold, consts)
    yield c


def _spread_gates(gates, b0, bc, consts):
    """spread[c, g, bi, h] = gates[c, g, b0 + bi] * (c == h): [nv, 2, bc, nv], for _broadcast_gates."""
    nv = gates.shape[0]
    ident = consts["ident"]
    spread = nl.ndarray((nv, 2, bc, nv), nl.float32, name="gate_spread")
    nisa.tensor_tensor(spread, gates[:, :, b0:b0 + bc].expand_dim(3).broadcast(3, nv),
                       ident[0:nv, 0:nv].expand_dim(1).expand_dim(1).broadcast(1, 2).broadcast(2, bc),
                       op=nl.multiply)
    return spread


def _broadcast_gates(spread, width, consts):
    """Per-pair decay and beta on every partition: [P, 2, width] SBUF fp32, pair p in column p.

    ones[nv, P]^T @ spread (_spread_gates) puts gates[h, g, b0 + bi] on every partition (an exact
    sum: one non-zero term). Columns past the chunk's bc * nv pairs (a partial last state tile)
    are zeroed.
    """
    ones = consts["ones"]
    nv, _, bc, _ = spread.shape
    P = ones.shape[0]
    n = bc * nv
    ps = nl.ndarray((P, 2, bc, nv), nl.float32, buffer=nl.psum, name="gates_psum")
    nisa.nc_matmul(ps, ones[0:nv, 0:P], spread, is_stationary_onezero=True)
    gbc = nl.ndarray((P, 2, width), nl.float32, name="gates_bcast")
    nisa.activation(gbc[:, :, 0:n], op=nl.copy, data=ps)
    if width > n:
        nisa.memset(gbc[:, :, n:width], 0.0)
    return gbc


def _fold_decay(gbc, fold, dk, consts, tiles):
    """decay[r * Pd + i0, t] = decay of pair t * R + r: the per-partition scalar of each state tile."""
    F, R = fold
    RP = R * (dk // F)
    prod = nl.ndarray((RP, tiles, R), nl.float32, name="decay_select")
    nisa.tensor_tensor(prod, gbc[0:RP, 0, 0:tiles * R].reshape_dim(1, (tiles, R)),
                       consts["mask_r"].expand_dim(1).broadcast(1, tiles), op=nl.multiply)
    decay = nl.ndarray((RP, tiles), nl.float32, name="decay_folded")
    nisa.tensor_reduce(decay, nl.add, prod, axis=2)
    return decay


def _move_state(S, hbm, p0, mc, fold, load):
    """DMA the folded state of flat pairs p0 .. p0+mc-1 (HBM [B, nv, dk, dv] as B * nv pairs) between
    HBM and a ring slot S [R * Pd, tiles, F * dv] whose tile 0 holds pair p0.

    Pair t * R + r, rows i0 * F .. i0 * F + F-1 -> partition r * Pd + i0 of tile t: F * dv
    contiguous elements per partition and pair, up to DMA_TILES tiles per DMA. A head slice of a
    larger state (hbm = state[:, h0:h1], one program of an LNC grid) is not one run of pairs: it
    moves piece by piece, each piece the pairs of one batch row inside one tile.
    """
    F, R = fold
    B, nv, dk, dv = hbm.shape
    Pd = dk // F
    if not hbm.is_contiguous():
        for t in range(-(-mc // R)):
            for p in range(p0 + t * R, p0 + min(mc, (t + 1) * R)):
                if p == p0 + t * R or p % nv == 0:                # a piece starts: new tile or new batch row
                    n = min(p0 + min(mc, (t + 1) * R), (p // nv + 1) * nv) - p
                    r = p - p0 - t * R
                    _dma(S[r * Pd:(r + n) * Pd, t, :],
                         hbm[p // nv, p % nv:p % nv + n].reshape((n * Pd, F * dv)), load)
        return
    flat = hbm.reshape((B * nv, dk, dv))
    full = mc // R                                        # tiles holding R pairs
    for t0 in range(0, full, DMA_TILES):
        t1 = min(full, t0 + DMA_TILES)
        view = flat[p0 + t0 * R:p0 + t1 * R].reshape((t1 - t0, R * Pd, F * dv)).permute((1, 0, 2))
        _dma(S[:, t0:t1, :], view, load)
    if mc > full * R:                                     # a partial last tile
        rt = mc - full * R
        _dma(S[0:rt * Pd, full, :], flat[p0 + full * R:p0 + mc].reshape((rt * Pd, F * dv)), load)


def _dma(sbuf, hbm, load):
    if load:
        nisa.dma_copy(sbuf, hbm)
    else:
        nisa.dma_copy(hbm, sbuf)


def _block_diagonal_qk(qk, fold, consts):
    """x[r * Pd + i0, i1, p, c] = qk[i0 * F + i1, p, c] if p % R == r else 0: [R * Pd, F, n, 2].

    For each fold row i1, one selector matmul copies row i0 * F + i1 of every pair to partitions
    r * Pd + i0 (all r); one VectorE multiply reads the result from PSUM and keeps pair p only in
    its own partition block r = p % R.
    Tile t's [S^T k, S^T q] is then sum_i1 S[:, t, i1]^T @ x[:, i1, tile t's pairs].
    """
    F, R = fold
    dk, n, _ = qk.shape
    RP = consts["sel"].shape[2] * consts["sel"].shape[3]
    rows = nl.ndarray((RP, F, 2 * PMAX), nl.float32, buffer=nl.psum, name="fold_rows")   # 1 KiB per i1
    for i1 in range(F):
        nisa.nc_matmul(rows[:, i1, 0:2 * n], consts["sel"][:, i1], qk, is_stationary_onezero=True)
    x = nl.ndarray((RP, F, n, 2), nl.float32, name="qk_block_diag")
    own_block = consts["mask_p"][:, 0:n].expand_dim(1).broadcast(1, F).expand_dim(3).broadcast(3, 2)
    nisa.tensor_tensor(x, rows[:, :, 0:2 * n].reshape_dim(2, (n, 2)), own_block, op=nl.multiply)
    return x


def _k_dot_q(qk, dv, consts):
    """k . q of every pair, on every one of dv partitions: PSUM [dv, n] (a ones-matmul over dk)."""
    dk, n, _ = qk.shape
    prod = nl.ndarray((dk, n), nl.float32, name="kq_prod")
    nisa.tensor_tensor(prod, qk[:, :, 0], qk[:, :, 1], op=nl.multiply)
    kq = nl.ndarray((dv, n), nl.float32, buffer=nl.psum, name="kq")
    nisa.nc_matmul(kq, consts["ones"][0:dk, 0:dv], prod, is_stationary_onezero=True)
    return kq


def _state_products(S, x, s0, mc, fold):
    """[S^T k, S^T q] of chunk pairs s0 .. s0+mc-1 (their state in ring slot S, tile 0 = pair s0):
    F accumulating matmuls per tile, the state as the stationary. PSUM [dv, mc, 2] fp32."""
    F, R = fold
    dv = S.shape[2] // F
    Pd = S.shape[0] // R
    kvsq = nl.ndarray((dv, mc, 2), nl.float32, buffer=nl.psum, name="kv_sq")
    for tl in range(-(-mc // R)):
        p, rt = tl * R, min(R, mc - tl * R)
        for i1 in range(F):
            nisa.nc_matmul(kvsq[:, p:p + rt, :], S[0:rt * Pd, tl, i1 * dv:(i1 + 1) * dv],
                           x[0:rt * Pd, i1, s0 + p:s0 + p + rt, :], accumulate=(i1 > 0))
    return kvsq


def _delta_and_output(o_pairs, kvsq, kq, v_pairs, gbc, s0, mc):
    """delta and o of chunk pairs s0 .. s0+mc-1 from their [S^T k, S^T q] (kvsq); returns delta.

    S was read before the decay: [kv, sq] = decay * [S^T k, S^T q], delta = (v - kv) * beta, and
    o = sq + (k . q) delta, channel-major [dv, pair] (o_pairs, v_pairs: [dv, n]).
    """
    dv = v_pairs.shape[0]
    pairs = slice(s0, s0 + mc)
    kvsq_d = nl.ndarray((dv, mc, 2), nl.float32, name="kv_sq_decayed")
    nisa.tensor_tensor(kvsq_d, kvsq, gbc[0:dv, 0, pairs].expand_dim(2).broadcast(2, 2), op=nl.multiply)
    delta = nl.ndarray((dv, mc), nl.float32, name="delta")
    nisa.tensor_tensor(delta, v_pairs[:, pairs], kvsq_d[:, :, 0], op=nl.subtract)
    nisa.tensor_tensor(delta, delta, gbc[0:dv, 1, pairs], op=nl.multiply)
    kq_delta = nl.ndarray((dv, mc), nl.float32, name="kq_delta")
    nisa.tensor_tensor(kq_delta, kq[:, pairs], delta, op=nl.multiply)
    nisa.tensor_tensor(o_pairs[:, pairs], kvsq_d[:, :, 1], kq_delta, op=nl.add)
    return delta


def _outer_operands(qk, delta, s0, fold, consts):
    """The operands of the outer products k delta^T of chunk pairs s0 .. s0+mc-1 (mc * F <= 128).

    Rows c = (pair p, fold row f) sit on mc * F partitions, W = 32 / F pairs per quadrant:
        lhs[c, w, i0] = k_p[i0 * F + f] * (p % W == w)        (k rows, block-diagonal per quadrant)
        rhs[c, i1, j] = delta_p[j] * (i1 == f)
    Returns (lhs [mc * F, W, Pd], rhs [mc * F, F, dv]), SBUF fp32.
    """
    F = consts["mod_f"].shape[1]
    dk = qk.shape[0]
    dv, mc = delta.shape
    Pd = dk // F
    rows = mc * F
    W = min(mc, QUADRANT // F)
    div_f, mod_f = consts["div_f"], consts["mod_f"]
    # k rows: kr[(p, f), i0] = k_p[i0 * F + f], by a selector matmul from the channel-major k
    kx = nl.ndarray((dk, mc, F), nl.float32, name="k_spread")
    nisa.tensor_tensor(kx, qk[:, s0:s0 + mc, 0].expand_dim(2).broadcast(2, F),
                       mod_f[0:dk, :].expand_dim(1).broadcast(1, mc), op=nl.multiply)
    kr_ps = nl.ndarray((rows, Pd), nl.float32, buffer=nl.psum, name="k_rows_psum")
    nisa.nc_matmul(kr_ps, kx, div_f[0:dk, 0:Pd], is_moving_onezero=True)
    lhs = nl.ndarray((rows, W, Pd), nl.float32, name="outer_lhs")
    nisa.tensor_tensor(lhs, kr_ps.expand_dim(1).broadcast(1, W),
                       consts["quad_f"][0:rows, 0:W].expand_dim(2).broadcast(2, Pd), op=nl.multiply)
    # delta rows: rhs[(p, f), i1, j] = delta_p[j] * (i1 == f)
    d_rep = nl.ndarray((dv, mc, F), nl.float32, name="delta_rep")
    nisa.tensor_copy(d_rep, delta.expand_dim(2).broadcast(2, F), engine=nisa.engine.gpsimd)
    dT_ps = nl.ndarray((rows, dv), nl.float32, buffer=nl.psum, name="delta_rows_psum")
    nisa.nc_transpose(dT_ps, d_rep, engine=nisa.engine.tensor)
    rhs = nl.ndarray((rows, F, dv), nl.float32, name="outer_rhs")
    nisa.tensor_tensor(rhs, dT_ps.expand_dim(1).broadcast(1, F),
                       mod_f[0:rows, :].expand_dim(2).broadcast(2, dv), op=nl.multiply)
    return lhs, rhs


def _decay_diagonals(decay, s0, mc, fold, consts):
    """diag[:, tl, :] = the diagonal matrix of the decays of state tile s0 // R + tl, one ScalarE
    copy of the identity scaled by the tile's per-partition decay each: [R * Pd, tiles, R * Pd]."""
    _, R = fold
    RP = decay.shape[0]
    tiles = -(-mc // R)
    diag = nl.ndarray((RP, tiles, RP), nl.float32, name="decay_diag")
    for tl in range(tiles):
        t = s0 // R + tl
        nisa.activation(diag[:, tl, :], op=nl.copy, data=consts["ident"][0:RP, 0:RP],
                        scale=decay[:, t:t + 1])
    return diag


def _rank1_update(S, lhs, rhs, diag, fold):
    """S <- decay * S + k delta^T for the pairs of ring slot S, folded, in place.

    Per state tile, in one PSUM bank: a matmul with the tile's decay diagonal as the stationary
    (_decay_diagonals) gives decay * S, and one matmul over the quadrant of (pair, fold row) rows
    that holds the tile adds the outer products of its R pairs (_outer_operands),
    sum_c lhs[c, w, i0] rhs[c, i1, j] = k_p[i0 * F + i1] delta_p[j]. ScalarE evicts the result
    into S. Each sum has one non-zero term, so PSUM holds fp32(fp32(decay * S) + k delta^T).
    """
    F, R = fold
    Pd = S.shape[0] // R
    rows = lhs.shape[0]
    mc = rows // F
    for tl in range(-(-mc // R)):
        rt = min(R, mc - tl * R)
        P = rt * Pd
        new = nl.ndarray((P, S.shape[2]), nl.float32, buffer=nl.psum, name="state_new")
        nisa.nc_matmul(new, diag[0:P, tl, 0:P], S[0:P, tl, :])
        q0 = tl * R * F // QUADRANT * QUADRANT            # the quadrant of rows holding the tile
        q1 = min(q0 + QUADRANT, rows)
        w0 = tl * R - q0 // F
        nisa.nc_matmul(new, lhs[q0:q1, w0:w0 + rt, :], rhs[q0:q1], accumulate=True,
                       tile_position=(q0, 0), tile_size=(QUADRANT, PMAX))
        nisa.activation(S[0:P, tl, :], op=nl.copy, data=new)


def _pairs(x, b0, bc, G):
    """Batch rows b0.. of a channel-major [d, heads, B] tile as [d, bc, heads, G] (value head = kh*G + g)."""
    return x[:, :, b0:b0 + bc].permute((0, 2, 1)).expand_dim(3).broadcast(3, G)


def _square_qk(q, k, b0, bc, G):
    """k^2 and q^2 of batch rows b0 .. b0+bc-1 per value head, for _normalize_qk: [dk, bc, nv, 2] fp32."""
    dk, nq, _ = q.shape
    sq = nl.ndarray((dk, bc, nq * G, 2), nl.float32, name="qk_squares")
    nisa.activation(sq[:, :, :, 0], op=nl.square, data=_pairs(k, b0, bc, G))
    nisa.activation(sq[:, :, :, 1], op=nl.square, data=_pairs(q, b0, bc, G))
    return sq


def _normalize_qk(sq, q, k, b0, bc, G, consts):
    """l2norm of k and q over dk (partitions), q also times dk**-0.5: [dk, n, 2] fp32, [.., 0] = k.

    sq holds their squares (_square_qk). The [k, q] columns of a pair are adjacent: a 2-column
    moving tile for S^T [k, q].
    """
    ones = consts["ones"]
    dk, nq, _ = q.shape
    nv = nq * G
    qs, ks = _pairs(q, b0, bc, G), _pairs(k, b0, bc, G)
    ss = nl.ndarray((dk, bc, nv, 2), nl.float32, buffer=nl.psum, name="qk_sumsq")
    nisa.nc_matmul(ss, ones[0:dk, 0:dk], sq, is_stationary_onezero=True)  # sum over dk, on every partition
    rstd = nl.ndarray((dk, bc, nv, 2), nl.float32, name="qk_rstd")
    nisa.activation(rstd, op=nl.rsqrt, data=ss, bias=L2NORM_EPS)       # rsqrt(sum + eps)
    qk = nl.ndarray((dk, bc * nv, 2), nl.float32, name="qk")
    nisa.tensor_tensor(qk[:, :, 0], ks, rstd[:, :, :, 0], op=nl.multiply)
    nisa.scalar_tensor_tensor(qk[:, :, 1], data=qs, op0=nl.multiply, operand0=dk ** -0.5,
                              op1=nl.multiply, operand1=rstd[:, :, :, 1])
    return qk


def load_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias):
    """The stage's HBM inputs as the channel-major SBUF tiles `gated_delta_rule_block` takes.

    Returns (q, k, v, a, b, A_log, dt_bias) tiles: q, k as [dk, nq, B] views (nq = q.shape[1]: nv,
    or nk key heads for the GQA path), v [dv, nv, B], a, b [nv, B], A_log, dt_bias [nv, 1].
    Called by the standalone kernel and by gdn_tkg.
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
    A_sb = nl.ndarray((nv, 1), nl.float32, name="A_log")
    nisa.dma_copy(A_sb, A_log.reshape((nv, 1)))
    dt_sb = nl.ndarray((nv, 1), nl.float32, name="dt_bias")
    nisa.dma_copy(dt_sb, dt_bias.reshape((nv, 1)))
    return (_heads_first(q_sb, B), _heads_first(k_sb, B), _heads_first(v_sb, B), a_sb, b_sb, A_sb, dt_sb)


def _gated_delta_rule_hbm(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """HBM in, HBM out around the building block (no input checks; the entry point checks).

    q, k may hold nv or nk heads ([B, nq, dk]); the tests use the latter for the GQA path.
    """
    B, nq, dk = q.shape
    nv, dv = v.shape[1], v.shape[2]
    o = nl.ndarray((B, nv, dv), nl.bfloat16, buffer=nl.shared_hbm, name="o")
    new_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm, name="new_state")
    o_sb = nl.ndarray((dv, B, nv), nl.bfloat16, name="o_sb")
    gated_delta_rule_block(o_sb.permute((0, 2, 1)), new_state, *load_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias),
                           recurrent_state)
    store_rows(o.reshape((B * nv, dv)), o_sb.reshape((dv, B * nv)))
    return o, new_state


def _heads_first(t, B):
    """[d, B * heads] (HBM's row order: b-major) as the [d, heads, B] view the block takes."""
    return t.reshape_dim(1, (B, t.shape[1] // B)).permute((0, 2, 1))


def check_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """The stage's input contract (shapes, dims <= 128, dtypes); ValueError naming the argument."""
    expect_rank(q, "q", 3)
    B, nv, dk = q.shape
    expect(dk <= PMAX, "q", f"head_k_dim q.shape[2] <= {PMAX} (q and k hold dk on partitions)", dk)
    expect(nv <= PMAX, "q", f"num_v_heads q.shape[1] <= {PMAX}", nv)
    expect_shape(k, "k", (B, nv, dk))
    expect_rank(v, "v", 3)
    expect(v.shape[0] == B and v.shape[1] == nv, "v", f"shape [{B}, {nv}, dv] (B, nv as q)", list(v.shape))
    dv = v.shape[2]
    expect(dv <= PMAX, "v", f"head_v_dim v.shape[2] <= {PMAX} (v and o hold dv on partitions)", dv)
    expect_shape(a, "a", (B, nv))
    expect_shape(b, "b", (B, nv))
    expect_shape(A_log, "A_log", (nv,))
    expect_shape(dt_bias, "dt_bias", (nv,))
    expect_shape(recurrent_state, "recurrent_state", (B, nv, dk, dv))
    for t, name in ((q, "q"), (k, "k"), (v, "v"), (a, "a"), (b, "b")):
        expect_dtype(t, name, nl.bfloat16)
    for t, name in ((A_log, "A_log"), (dt_bias, "dt_bias"), (recurrent_state, "recurrent_state")):
        expect_dtype(t, name, nl.float32)


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
        - Rejects (ValueError naming the argument): wrong ranks or shapes (k as q; v, a, b, A_log,
          dt_bias and recurrent_state consistent with q's B, nv, dk and v's dv), dk > 128,
          dv > 128, nv > 128, dtypes other than the above.
        - q, k, v, a, b move as rows ([B * heads, d] and [B, nv]) through kernels.layout's
          load_channel_major: up to 128 rows per DMA (one contiguous row per partition), then
          TensorE transposes to channel-major [d, heads, B] and [nv, B]; o goes back the same way
          (store_rows). A_log and dt_bias [nv] load as [nv, 1] columns, one 4-byte element per
          partition.
        - See gated_delta_rule_block for the state's folded on-chip layout, the engines and the
          rounding points.

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
    return _gated_delta_rule_hbm(q, k, v, a, b, A_log, dt_bias, recurrent_state)
