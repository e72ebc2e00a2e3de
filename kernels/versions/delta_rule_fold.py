"""The delta rule's folded state: how versions 2 and 3 of stage 4 hold and stream it.

The final kernel keeps a pair's state unfolded so that no matmul sums over two pairs
(kernels/delta_rule_pairs.py); this file keeps what only the folded versions use.

A (batch, value head) pair's state S is [dk, dv] fp32, row-major in HBM. On chip it is *folded*:
F consecutive rows share a partition, so pair p = t * R + r, row i = i0 * F + i1 sits on partition
r * Pd + i0 (Pd = dk / F) of state tile t, at free position (i1, column j). Each state DMA then
moves F * dv * 4 contiguous bytes per partition and pair (2 KiB at dk = dv = 128, F = 4: the size
the DMA guides ask for; one row per partition would move 512 B), and R pairs fill a tile.

Everything else per pair (k, q, delta, o, the gates) is channel-major, [d, pairs], and TensorE
moves data between the two layouts:
* S^T [k, q]: per tile, F accumulating matmuls with the state as the stationary and a
  block-diagonal [k, q] (selector matmuls put row i0 * F + i1 of every pair on its own block).
* S <- decay * S + k delta^T: per tile, two matmuls into one PSUM bank, the diagonal matrix of the
  tile's decays (one per partition in this layout) times S, then the outer products of its R pairs
  as one matmul over their R * F (pair, fold row) rows, which must lie in one 32-row quadrant.
  ScalarE evicts the result into S.

Versions 2 and 3 stream the state through one on-chip buffer: a sub-chunk loads, computes and
stores before the next one loads.
"""
import nki.isa as nisa
import nki.language as nl

from ..delta_rule_pairs import PMAX, PSUM_BANK_FMAX, QUADRANT, identity, sub_chunks

SUB_CHUNK_PAIRS = 64                            # pairs per sub-chunk at most (stream_steps)
# State tiles per DMA: a sub-chunk of 8 tiles moves in 4 DMAs each way, which lead the in-order
# DMA queues in turn, so it lands before the next sub-chunk's loads share the bandwidth.
DMA_TILES = 2


def state_fold(dk, dv):
    """(F, R): state rows folded onto one partition, and (b, h) pairs stacked per partition tile.

    R * dk / F <= 128 partitions; the R * F rows of a tile's outer product in one quadrant; F * dv
    fp32 in one PSUM bank. The first of F = 4, 2 that fits wins; F = 1 (R reduced to a divisor of
    32) always fits.
    """
    for F in (4, 2):
        R = 0
        if dk % F == 0:
            R = PMAX // (dk // F)
        if R and QUADRANT % (R * F) == 0 and F * dv <= PSUM_BANK_FMAX:
            return F, R
    R = PMAX // dk
    while QUADRANT % R:
        R -= 1
    return 1, R


def fold_ones(dk, dv, nv):
    """The [P, P] fp32 all-ones tile of the stage's partition reductions and broadcasts,
    P = max(dk, dv, nv, R * dk / F) (GpSimd). The fused kernel's RMSNorm reuses it."""
    F, R = state_fold(dk, dv)
    P = max(dk, dv, nv, R * (dk // F))
    ones = nl.ndarray((P, P), nl.float32, name="ones")
    nisa.memset(ones, 1.0, engine=nisa.engine.gpsimd)
    return ones




def fold_constants(dk, fold, ones):
    """The 0/1 fp32 tiles the fold's matmuls and masks use, built once (GpSimd, VectorE).

    ones (fold_ones, passed in); ident [128, 128]; div_f[p, c] = (p // F == c);
    mod_f[p, c] = (p % F == c); quad_f[p, w] = (p // F % (32 / F) == w);
    mask_r[p, r] = (p // Pd == r) [R * Pd, R]; mask_p[p, c] = (p // Pd == c % R);
    sel[i, i1, r, i0] = (i == i0 * F + i1) [dk, F, R, Pd]. Returns a dict of these names.
    """
    F, R = fold
    Pd = dk // F
    RP = R * Pd
    c = {"ones": ones}
    ident = identity()
    c["ident"] = ident
    by_f = ident.reshape_dim(1, (PMAX // F, F))                          # (p == c * F + f)
    c["div_f"] = nl.ndarray((PMAX, PMAX // F), nl.float32, name="div_f")
    nisa.tensor_reduce(c["div_f"], nl.add, by_f, axis=2)
    c["mod_f"] = nl.ndarray((PMAX, F), nl.float32, name="mod_f")
    nisa.tensor_reduce(c["mod_f"], nl.add, by_f.permute((0, 2, 1)), axis=2)
    W = QUADRANT // F
    c["quad_f"] = nl.ndarray((PMAX, W), nl.float32, name="quad_f")
    by_w = c["div_f"].reshape_dim(1, (PMAX // QUADRANT, W))             # (p // F == q * W + w)
    nisa.tensor_reduce(c["quad_f"], nl.add, by_w.permute((0, 2, 1)), axis=2)
    c["mask_r"] = nl.ndarray((RP, R), nl.float32, name="mask_r")
    nisa.tensor_reduce(c["mask_r"], nl.add, ident[0:RP, 0:RP].reshape_dim(1, (R, Pd)), axis=2)
    tiles = -(-PMAX // R)
    c["mask_p"] = nl.ndarray((RP, tiles * R), nl.float32, name="mask_p")
    nisa.tensor_copy(c["mask_p"].reshape_dim(1, (tiles, R)),
                     c["mask_r"].expand_dim(1).broadcast(1, tiles), engine=nisa.engine.gpsimd)
    c["sel"] = nl.ndarray((dk, F, R, Pd), nl.float32, name="fold_select")
    nisa.tensor_copy(c["sel"], ident[0:dk, 0:dk].reshape_dim(1, (Pd, F)).permute((0, 2, 1))
                     .expand_dim(2).broadcast(2, R), engine=nisa.engine.gpsimd)
    return c


def stream_steps(B, nv, fold):
    """The sub-chunks in stream order: (b0, bc, s0, mc) = pairs s0 .. s0+mc-1 of the chunk of
    batch rows b0 .. b0+bc-1 (max(1, 128 // nv) rows, chunk pair p = bi * nv + h), at most
    128 // F pairs (the rows of one outer-product build), a multiple of R, and at most
    SUB_CHUNK_PAIRS (unfolded, F = 1, 128 pairs' decay diagonals alone would take 64 KiB of SBUF
    per partition, more than is left beside the rest at B >= 16)."""
    F, R = fold
    return sub_chunks(B, nv, min((PMAX // F) // R * R, SUB_CHUNK_PAIRS))




def move_state(ring, hbm, steps, i, fold, load):
    """Load (load=True) or store the state of sub-chunk i between HBM [B, nv, dk, dv] and its ring
    slot, i % slots; nothing if there is no sub-chunk i."""
    if i < len(steps):
        b0, _, s0, mc = steps[i]
        _move_pairs(ring[:, i % ring.shape[1]], hbm, b0 * hbm.shape[1] + s0, mc, fold, load)


def _move_pairs(S, hbm, p0, mc, fold, load):
    """DMA the folded state of flat pairs p0 .. p0+mc-1 (HBM [B, nv, dk, dv] as B * nv pairs)
    between HBM and a ring slot S [R * Pd, tiles, F * dv] whose tile 0 holds pair p0.

    Up to DMA_TILES tiles per DMA. A head slice of a larger state (hbm = state[:, h0:h1], one
    program of an LNC grid) is not one run of pairs: it moves one piece per batch row and tile.
    """
    F, R = fold
    B, nv, dk, dv = hbm.shape
    Pd = dk // F
    if hbm.is_contiguous():
        flat = hbm.reshape((B * nv, dk, dv))
        full = mc // R                                       # tiles holding R pairs
        for t0 in range(0, full, DMA_TILES):
            t1 = min(full, t0 + DMA_TILES)
            view = flat[p0 + t0 * R:p0 + t1 * R].reshape((t1 - t0, R * Pd, F * dv))
            _dma(S[:, t0:t1, :], view.permute((1, 0, 2)), load)
        if mc > full * R:                                    # a partial last tile
            rt = mc - full * R
            _dma(S[0:rt * Pd, full, :], flat[p0 + full * R:p0 + mc].reshape((rt * Pd, F * dv)),
                 load)
    else:
        for t in range(-(-mc // R)):
            p_end = p0 + min(mc, (t + 1) * R)
            for p in range(p0 + t * R, p_end):
                if p == p0 + t * R or p % nv == 0:         # a piece starts: new tile or batch row
                    n = min(p_end, (p // nv + 1) * nv) - p
                    r = p - p0 - t * R
                    _dma(S[r * Pd:(r + n) * Pd, t, :],
                         hbm[p // nv, p % nv:p % nv + n].reshape((n * Pd, F * dv)), load)


def _dma(sbuf, hbm, load):
    if load:
        nisa.dma_copy(sbuf, hbm)
    else:
        nisa.dma_copy(hbm, sbuf)


def spread_gates(gates, b0, bc, consts):
    """spread[c, g, bi, h] = gates[c, g, b0 + bi] * (c == h): [nv, 2, bc, nv] (broadcast_gates)."""
    nv = gates.shape[0]
    spread = nl.ndarray((nv, 2, bc, nv), nl.float32, name="gate_spread")
    nisa.tensor_tensor(spread, gates[:, :, b0:b0 + bc].expand_dim(3).broadcast(3, nv),
                       consts["ident"][0:nv, 0:nv].expand_dim(1).expand_dim(1).broadcast(1, 2)
                       .broadcast(2, bc), op=nl.multiply)
    return spread


def broadcast_gates(spread, width, consts):
    """Per-pair gates on every partition: [P, 2, width] fp32, pair p = bi * nv + h in column p.

    ones[nv, P]^T @ spread (spread_gates) is exact: one non-zero term per sum. Columns past the
    bc * nv pairs (a partial last state tile) are zeroed.
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


def fold_decay(gbc, fold, dk, consts, tiles):
    """decay[r * Pd + i0, t] = decay of pair t * R + r (gbc[:, 0]): a state tile's per-partition
    scalar."""
    F, R = fold
    RP = R * (dk // F)
    prod = nl.ndarray((RP, tiles, R), nl.float32, name="decay_select")
    nisa.tensor_tensor(prod, gbc[0:RP, 0, 0:tiles * R].reshape_dim(1, (tiles, R)),
                       consts["mask_r"].expand_dim(1).broadcast(1, tiles), op=nl.multiply)
    decay = nl.ndarray((RP, tiles), nl.float32, name="decay_folded")
    nisa.tensor_reduce(decay, nl.add, prod, axis=2)
    return decay


def block_diagonal_qk(qk, fold, consts):
    """x[r * Pd + i0, i1, p, c] = qk[i0 * F + i1, p, c] if p % R == r else 0: [R * Pd, F, n, 2].

    Per fold row i1, a selector matmul copies row i0 * F + i1 of every pair to partitions
    r * Pd + i0 (all r); one VectorE multiply reads PSUM and keeps pair p in block r = p % R.
    """
    F, R = fold
    n = qk.shape[1]
    RP = consts["sel"].shape[2] * consts["sel"].shape[3]
    rows = nl.ndarray((RP, F, 2 * PMAX), nl.float32, buffer=nl.psum, name="fold_rows")
    for i1 in range(F):
        nisa.nc_matmul(rows[:, i1, 0:2 * n], consts["sel"][:, i1], qk, is_stationary_onezero=True)
    x = nl.ndarray((RP, F, n, 2), nl.float32, name="qk_block_diag")
    own_block = consts["mask_p"][:, 0:n].expand_dim(1).broadcast(1, F).expand_dim(3).broadcast(3, 2)
    nisa.tensor_tensor(x, rows[:, :, 0:2 * n].reshape_dim(2, (n, 2)), own_block, op=nl.multiply)
    return x


def state_products(ring, x, steps, i, fold):
    """[S^T k, S^T q] of sub-chunk i (state in its ring slot, block-diagonal [k, q] of its chunk
    in x): F accumulating matmuls per tile, the state as the stationary. PSUM [dv, mc, 2] fp32."""
    F, R = fold
    _, _, s0, mc = steps[i]
    S = ring[:, i % ring.shape[1]]
    dv = S.shape[2] // F
    Pd = S.shape[0] // R
    kvsq = nl.ndarray((dv, mc, 2), nl.float32, buffer=nl.psum, name="kv_sq")
    for tl in range(-(-mc // R)):
        p, rt = tl * R, min(R, mc - tl * R)
        for i1 in range(F):
            nisa.nc_matmul(kvsq[:, p:p + rt, :], S[0:rt * Pd, tl, i1 * dv:(i1 + 1) * dv],
                           x[0:rt * Pd, i1, s0 + p:s0 + p + rt, :], accumulate=(i1 > 0))
    return kvsq


def outer_operands(qk, delta, s0, consts):
    """The operands of the outer products k delta^T of chunk pairs s0 .. s0+mc-1 (mc * F <= 128).

    Rows c = (pair p, fold row f) on mc * F partitions, W = 32 / F pairs per quadrant:
        lhs[c, w, i0] = k_p[i0 * F + f] * (p % W == w)        (block-diagonal per quadrant)
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
    # k rows: kr[(p, f), i0] = k_p[i0 * F + f], a selector matmul from the channel-major k
    kx = nl.ndarray((dk, mc, F), nl.float32, name="k_spread")
    nisa.tensor_tensor(kx, qk[:, s0:s0 + mc, 0].expand_dim(2).broadcast(2, F),
                       mod_f[0:dk, :].expand_dim(1).broadcast(1, mc), op=nl.multiply)
    kr_ps = nl.ndarray((rows, Pd), nl.float32, buffer=nl.psum, name="k_rows_psum")
    nisa.nc_matmul(kr_ps, kx, div_f[0:dk, 0:Pd], is_moving_onezero=True)
    lhs = nl.ndarray((rows, W, Pd), nl.float32, name="outer_lhs")
    nisa.tensor_tensor(lhs, kr_ps.expand_dim(1).broadcast(1, W),
                       consts["quad_f"][0:rows, 0:W].expand_dim(2).broadcast(2, Pd), op=nl.multiply)
    # delta rows: rhs[(p, f), i1, j] = delta_p[j] * (i1 == f), through a TensorE transpose
    d_rep = nl.ndarray((dv, mc, F), nl.float32, name="delta_rep")
    nisa.tensor_copy(d_rep, delta.expand_dim(2).broadcast(2, F), engine=nisa.engine.gpsimd)
    dT_ps = nl.ndarray((rows, dv), nl.float32, buffer=nl.psum, name="delta_rows_psum")
    nisa.nc_transpose(dT_ps, d_rep, engine=nisa.engine.tensor)
    rhs = nl.ndarray((rows, F, dv), nl.float32, name="outer_rhs")
    nisa.tensor_tensor(rhs, dT_ps.expand_dim(1).broadcast(1, F),
                       mod_f[0:rows, :].expand_dim(2).broadcast(2, dv), op=nl.multiply)
    return lhs, rhs


def decay_diagonals(decay, s0, mc, fold, consts):
    """diag[:, tl, :] = the diagonal matrix of the decays of state tile s0 // R + tl (decay from
    fold_decay): per tile a ScalarE copy of the identity scaled per partition. [RP, tiles, RP]."""
    _, R = fold
    RP = decay.shape[0]
    tiles = -(-mc // R)
    diag = nl.ndarray((RP, tiles, RP), nl.float32, name="decay_diag")
    for tl in range(tiles):
        t = s0 // R + tl
        nisa.activation(diag[:, tl, :], op=nl.copy, data=consts["ident"][0:RP, 0:RP],
                        scale=decay[:, t:t + 1])
    return diag


def rank1_update(ring, i, lhs, rhs, diag, fold):
    """S <- decay * S + k delta^T for sub-chunk i, in its ring slot, folded.

    Per state tile, in one PSUM bank: the decay diagonal times S, then one matmul over the
    quadrant of (pair, fold row) rows that holds the tile adds its R pairs' outer products,
    sum_c lhs[c, w, i0] rhs[c, i1, j] = k_p[i0 * F + i1] delta_p[j]. ScalarE evicts into S. Each
    sum has one non-zero term, so PSUM adds decay * S and k delta^T once each (fp32 operands:
    TensorE's two-pass fp32 products, not exact fp32 multiplies).
    """
    F, R = fold
    S = ring[:, i % ring.shape[1]]
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
