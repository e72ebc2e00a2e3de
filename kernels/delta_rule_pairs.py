"""Stage 4's state machinery with every contraction inside one (batch, head) pair.

A matmul multiplies every value of its contraction rows by every value of the other operand, so
0 * NaN = NaN carries a non-finite value from one pair's rows into every output the matmul shares
with them. Here the state is *unfolded*: pair p's [dk, dv] state lies on dk partitions (row i on
partition i) at free position p of a sub-chunk buffer [dk, pairs, dv], and
* S^T [k, q] is one matmul per pair, its state as the stationary, contracting its own dk rows;
* k delta^T is one K = 1 matmul per pair, its k and delta as rows on one partition (exact TensorE
  transposes put them on partitions 0, 32, 64, 96);
* exp(g) S is elementwise: VectorE in the eviction of the outer product (even groups of four
  pairs), or ScalarE in place plus an identity matmul over the group's four states, whose output
  columns are each one pair's (odd groups), so the two engines share the work.
The gates reach every partition without crossing heads: a and b spread over the heads of their own
batch row, A_log and dt_bias broadcast from a row by a K = 1 matmul.

The cost is the DMA runs: a pair's row is 512 B in HBM (the folded state of stage 4's versions 2
and 3, kernels/versions/delta_rule_fold.py, moves 2 KiB).

The state streams HBM -> ring -> HBM in sub-chunks through STATE_BUFFERS on-chip buffers. Engines
and DMA queues run in program order, so the order is the schedule: the load of sub-chunk
i + STATE_BUFFERS - 1 is issued before sub-chunk i computes, into the buffer whose store sub-chunk
i - 1 has just issued.
"""
import nki.isa as nisa
import nki.language as nl

from .slots import PoolRows

PMAX = nl.tile_size.pmax                        # partitions
PSUM_BANK_FMAX = nl.tile_size.psum_bank_fmax    # fp32 elements per partition of one PSUM bank
QUADRANT = 32                                   # partition quadrant: a small matmul's row tile
# Sub-chunk buffers of the ring: loads run STATE_BUFFERS - 1 sub-chunks ahead of compute (with 3,
# loads waited on stores at large B in the modeled profile; 5 gained nothing).
STATE_BUFFERS = 4
SUB_PAIRS = 32      # pairs per sub-chunk: [dk, 32, dv] fp32 is 16 KiB per partition at dv = 128
DMA_PAIRS = 8       # pairs per state DMA: four DMAs per sub-chunk each way, one per queue
GROUP = PMAX // QUADRANT   # pairs whose outer-product rows share one transpose (one per quadrant)
BANK_GROUPS = PSUM_BANK_FMAX // PMAX   # groups whose row transposes share a PSUM bank (d <= 128)
GATE_STEPS = 4      # pair_gates: VectorE, ScalarE, VectorE, ScalarE, each reading the last


def sub_chunks(B, nv, m):
    """(b0, bc, s0, mc) in stream order: pairs s0 .. s0+mc-1 (mc <= m) of the chunk of batch rows
    b0 .. b0+bc-1 (max(1, 128 // nv) rows, chunk pair p = bi * nv + h)."""
    rows = max(1, PMAX // nv)
    steps = []
    for b0 in range(0, B, rows):
        bc = min(rows, B - b0)
        for s0 in range(0, bc * nv, m):
            steps.append((b0, bc, s0, min(m, bc * nv - s0)))
    return steps


def pair_ones(dk, dv, nv):
    """The [P, P] fp32 all-ones tile of the stage's partition reductions and broadcasts,
    P = max(dk, dv, nv) (GpSimd). The fused kernel's RMSNorm reuses it."""
    P = max(dk, dv, nv)
    ones = nl.ndarray((P, P), nl.float32, name="ones")
    nisa.memset(ones, 1.0, engine=nisa.engine.gpsimd)
    return ones


def identity():
    """The [128, 128] fp32 identity (GpSimd iota, VectorE compare)."""
    ramp = nl.ndarray((PMAX, PMAX), nl.float32, name="ramp")
    nisa.iota(ramp, [[1, PMAX]], offset=0, channel_multiplier=-1)        # ramp[p, j] = j - p
    ident = nl.ndarray((PMAX, PMAX), nl.float32, name="ident")
    nisa.tensor_scalar(ident, ramp, op0=nl.equal, operand0=0.0)
    return ident


def pair_steps(B, nv):
    """The sub-chunks in stream order: (b0, bc, s0, mc) = pairs s0 .. s0+mc-1 of the chunk of
    batch rows b0 .. b0+bc-1 (max(1, 128 // nv) rows, chunk pair p = bi * nv + h)."""
    return sub_chunks(B, nv, SUB_PAIRS)


def pair_ring(dk, dv, steps, name="state_ring"):
    """The ring of sub-chunk state buffers: [dk, slots, pairs, dv] fp32 SBUF."""
    m = 0
    for step in steps:
        m = max(m, step[3])
    return nl.ndarray((dk, min(STATE_BUFFERS, len(steps)), m, dv), nl.float32, name=name)


def move_pairs(ring, hbm, steps, i, load, store_queue=False):
    """Load (load=True) or store the state of sub-chunk i between HBM [B, nv, dk, dv] and its ring
    slot, i % slots; nothing if there is no sub-chunk i. A head slice of a larger state (one
    program of an LNC grid) moves one piece per batch row, and the rows of a pool
    (slots.PoolRows) at most DMA_PAIRS pairs of one row per DMA.

    store_queue: stores on SyncE's hardware-DGE queue instead of the queues the compiler fills in
    turn: a queue of their own, so that a load waiting for its slot's store holds up no store and
    no store a load, or behind the DMAs a caller put there first (the fused kernel's weights)."""
    if i < len(steps):
        b0, _, s0, mc = steps[i]
        S = ring[:, i % ring.shape[1]]
        B, nv, dk, dv = hbm.shape
        p0 = b0 * nv + s0
        pool = isinstance(hbm, PoolRows)
        if not pool and hbm.is_contiguous():
            flat = hbm.reshape((B * nv, dk, dv))
            for j in range(0, mc, DMA_PAIRS):
                n = min(DMA_PAIRS, mc - j)
                _dma(S[:, j:j + n, :], flat[p0 + j:p0 + j + n].permute((1, 0, 2)), load,
                     store_queue)
        else:
            p = p0
            while p < p0 + mc:
                n = min(p0 + mc, (p // nv + 1) * nv) - p
                if pool:                        # one slot, in the contiguous path's pieces
                    n = min(n, DMA_PAIRS)
                    rows = hbm.heads(p // nv, p % nv, n)
                else:
                    rows = hbm[p // nv, p % nv:p % nv + n].permute((1, 0, 2))
                _dma(S[:, p - p0:p - p0 + n, :], rows, load, store_queue, pool)
                p = p + n


def _dma(sbuf, hbm, load, store_queue, pool=False):
    """One state DMA; a pool row's (a scalar offset) skips an out-of-range slot (kernels/slots.py)."""
    oob = nisa.oob_mode.error
    if pool:
        oob = nisa.oob_mode.skip
    if load:
        nisa.dma_copy(sbuf, hbm, oob_mode=oob)
    elif store_queue:
        nisa.dma_copy(hbm, sbuf, oob_mode=oob, dge_mode=nisa.dge_mode.hwdge,
                      engine=nisa.engine.sync)
    else:
        nisa.dma_copy(hbm, sbuf, oob_mode=oob)


def head_params(A_log, dt_bias, P):
    """[P, 2, nv] fp32: -exp(A_log) and dt_bias of every head on every partition.

    The [nv, 1] columns become rows by TensorE transposes (exact), and a K = 1 matmul copies the
    row to P partitions: no sum over heads, so a non-finite head stays in its own column. In two
    parts, head_row then head_broadcast, which a caller may issue apart."""
    return head_broadcast(head_row(A_log, dt_bias), P)


def head_row(A_log, dt_bias):
    """head_params' row, [1, 2, nv] fp32: -exp(A_log), dt_bias (two transposes, ScalarE's exp)."""
    nv = A_log.shape[0]
    row = nl.ndarray((1, 2, nv), nl.float32, name="head_row")
    for i in range(2):
        src = A_log
        if i == 1:
            src = dt_bias
        t_ps = nl.ndarray((1, nv), nl.float32, buffer=nl.psum, name="head_T")
        nisa.nc_transpose(t_ps, src, engine=nisa.engine.tensor)
        nisa.tensor_copy(row[:, i, :], t_ps)
    nisa.activation(row[:, 0, :], op=nl.exp, data=row[:, 0, :])
    nisa.tensor_scalar(row[:, 0, :], row[:, 0, :], op0=nl.multiply, operand0=-1.0)   # -exp(A_log)
    return row


def head_broadcast(row, P):
    """head_params from head_row's row: [P, 2, nv], the row on P partitions (one K = 1 matmul)."""
    nv = row.shape[2]
    ones = nl.ndarray((1, P), nl.float32, name="ones_row")
    nisa.memset(ones, 1.0)
    hp_ps = nl.ndarray((P, 2, nv), nl.float32, buffer=nl.psum, name="heads_psum")
    nisa.nc_matmul(hp_ps, ones, row, is_stationary_onezero=True)
    hp = nl.ndarray((P, 2, nv), nl.float32, name="heads_bcast")
    nisa.tensor_copy(hp, hp_ps)
    return hp


def spread_gate_inputs(a, b, b0, bc, ident):
    """a and b ([nv, B], heads on partitions) of batch rows b0 .. b0+bc-1 spread over the heads:
    [nv, 2, bc, nv] fp32 whose off-diagonal is a * 0, so that a ones-matmul over the heads
    (gate_inputs) takes a non-finite a only to its own batch row (VectorE)."""
    nv = a.shape[0]
    spread = nl.ndarray((nv, 2, bc, nv), nl.float32, name="ab_spread")
    for i in range(2):
        src = a
        if i == 1:
            src = b
        nisa.tensor_tensor(spread[:, i], src[:, b0:b0 + bc].expand_dim(2).broadcast(2, nv),
                           ident[0:nv, 0:nv].expand_dim(1).broadcast(1, bc), op=nl.multiply)
    return spread


def gate_inputs(spread, ones):
    """a and b of pair bi * nv + h on every partition: PSUM [P, 2, bc, nv] fp32 (P =
    ones.shape[1]) from spread_gate_inputs' tile by a ones-matmul; the input of pair_gates."""
    nv, _, bc, _ = spread.shape
    P = ones.shape[1]
    ab = nl.ndarray((P, 2, bc, nv), nl.float32, buffer=nl.psum, name="ab_bcast")
    nisa.nc_matmul(ab, ones[0:nv, 0:P], spread, is_stationary_onezero=True)
    return ab


def pair_gates(c, hp, j):
    """Step j of exp(g), beta of every pair of c["ab"] (gate_inputs) on every partition: after
    the last step c["gbc"] is [P, 2, bc * nv] fp32, g = -exp(A_log) softplus(a + dt_bias),
    beta = sigmoid(b). The head parameters come in broadcast (head_params). One engine per step,
    so that a caller can issue the steps apart and no engine waits on the chain."""
    ab = c["ab"]
    P, _, bc, nv = ab.shape
    if j == 0:
        c["a_dt"] = nl.ndarray((P, bc, nv), nl.float32, name="a_dt")
        nisa.tensor_tensor(c["a_dt"], ab[:, 0], hp[:, 1, :].expand_dim(1).broadcast(1, bc),
                           op=nl.add)
    elif j == 1:
        nisa.activation(c["a_dt"], op=nl.softplus, data=c["a_dt"])
    elif j == 2:
        nisa.tensor_tensor(c["a_dt"], c["a_dt"], hp[:, 0, :].expand_dim(1).broadcast(1, bc),
                           op=nl.multiply)
    else:
        gate_function(c, 0)
        gate_function(c, 1)


def gate_function(c, i):
    """Half i of pair_gates' last step: exp(g) (i = 0, which allocates c["gbc"]) or beta (i = 1)
    into c["gbc"][:, i]. One ScalarE function each, so that a caller preparing several chunks can
    run each over all of them with one function-table load."""
    P, _, bc, nv = c["ab"].shape
    if i == 0:
        c["gbc"] = nl.ndarray((P, 2, bc * nv), nl.float32, name="gates_bcast")
        nisa.activation(c["gbc"][:, 0].reshape_dim(1, (bc, nv)), op=nl.exp, data=c.pop("a_dt"))
    else:
        nisa.activation(c["gbc"][:, 1].reshape_dim(1, (bc, nv)), op=nl.sigmoid,
                        data=c.pop("ab")[:, 1])


def pair_products(ring, qk, steps, i, kvsq, p_lo, p_hi):
    """S^T [k, q] of pairs p_lo .. p_hi - 1 of sub-chunk i into kvsq [dv, mc, 2] PSUM fp32, one
    matmul per pair (its state as the stationary, its [k, q] columns of the chunk's qk [dk, n, 2]
    as the moving)."""
    s0 = steps[i][2]
    S = ring[:, i % ring.shape[1]]
    for p in range(p_lo, p_hi):
        nisa.nc_matmul(kvsq[:, p, :], S[:, p, :], qk[:, s0 + p, :])


def padded_columns(d, mc, name):
    """[d, mc, 32] fp32 zeros: column 0 of pair p takes its vector, so a transpose of four pairs
    puts them on partitions 0, 32, 64, 96 (outer_rows). Only column 0 is ever written: zeroed once,
    it serves every sub-chunk."""
    pad = nl.ndarray((d, mc, QUADRANT), nl.float32, name=name)
    nisa.memset(pad, 0.0, engine=nisa.engine.gpsimd)
    return pad


def outer_rows(pad, mc, rows, g0):
    """Groups g0 .. g0 + BANK_GROUPS - 1 (those that exist) of the first mc pairs of a padded tile
    (padded_columns) into rows [128, groups, d]: partition 32 r of group g holds pair GROUP g + r's
    vector, a row a K = 1 matmul can read. TensorE transposes (exact) into one PSUM bank, then one
    ScalarE eviction for the full groups (a fixed cost per instruction saved)."""
    d = pad.shape[0]
    n = min(BANK_GROUPS, -(-mc // GROUP) - g0)
    ps = nl.ndarray((PMAX, BANK_GROUPS, d), nl.float32, buffer=nl.psum, name="rows_psum")
    full = 0
    for t in range(n):
        g = g0 + t
        gs = min(GROUP, mc - GROUP * g)
        nisa.nc_transpose(ps[0:gs * QUADRANT, t, :], pad[:, GROUP * g:GROUP * g + gs, :],
                          engine=nisa.engine.tensor)
        if gs == GROUP:
            full = t + 1
    if full:
        nisa.activation(rows[:, g0:g0 + full, :], op=nl.copy, data=ps[:, 0:full, :])
    for t in range(full, n):
        gs = min(GROUP, mc - GROUP * (g0 + t))
        nisa.activation(rows[0:gs * QUADRANT, g0 + t, :], op=nl.copy,
                        data=ps[0:gs * QUADRANT, t, :])


def decay_odd_groups(ring, i, steps, gbc):
    """exp(g) S in place for the pairs of the odd groups of sub-chunk i (pair_update adds their
    outer products through an identity matmul): ScalarE, each state scaled by its decay. Issued
    ahead of the sub-chunk's update, so that no identity matmul waits on TensorE for them."""
    _, _, s0, mc = steps[i]
    S = ring[:, i % ring.shape[1]]
    dk = S.shape[0]
    for p in range(mc):
        if p // GROUP % 2 == 1:
            nisa.activation(S[:, p, :], op=nl.copy, data=S[:, p, :],
                            scale=gbc[0:dk, 0, s0 + p:s0 + p + 1])


def pair_update(ring, i, steps, k_rows, d_rows, gbc, ident, g):
    """S <- exp(g) S + k delta^T for group g (GROUP pairs) of sub-chunk i in its ring slot.

    The outer products are K = 1 matmuls into one PSUM bank. Even groups: VectorE evicts each pair
    as exp(g) S + PSUM. Odd groups (their states already scaled by exp(g), decay_odd_groups): an
    identity matmul adds the group's states (pairs along the free dim: each output column is one
    pair's), ScalarE evicts. Either way no sum mixes two pairs."""
    _, _, s0, mc = steps[i]
    S = ring[:, i % ring.shape[1]]
    dk, _, dv = S.shape
    gs = min(GROUP, mc - GROUP * g)
    p0 = GROUP * g
    new = nl.ndarray((dk, GROUP, dv), nl.float32, buffer=nl.psum, name="state_new")
    for r in range(gs):
        q = QUADRANT * r
        nisa.nc_matmul(new[:, r, :], k_rows[q:q + 1, g, :], d_rows[q:q + 1, g, :])
    if g % 2 == 1:
        nisa.nc_matmul(new[:, 0:gs, :], ident[0:dk, 0:dk], S[:, p0:p0 + gs, :], accumulate=True,
                       is_stationary_onezero=True)
        nisa.activation(S[:, p0:p0 + gs, :], op=nl.copy, data=new[:, 0:gs, :])
    else:
        for r in range(gs):
            p = p0 + r
            nisa.scalar_tensor_tensor(S[:, p, :], data=S[:, p, :], op0=nl.multiply,
                                      operand0=gbc[0:dk, 0, s0 + p:s0 + p + 1], op1=nl.add,
                                      operand1=new[:, r, :])
