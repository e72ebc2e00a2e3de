"""HBM rows <-> channel-major SBUF tiles: how the entry points move activations on and off chip.

In HBM the activations of the GDN decode step are row-major, [rows, channels]: a token's channels
(or a (token, head) pair's dv channels) are contiguous. On chip every stage works channel-major:
channels on partitions, rows in the free dim. A DMA whose access pattern does the transpose moves
one element, 2 bytes, per descriptor (contiguous run), while the DMA guides want 2-4 KiB per
partition and descriptor for full throughput (the book's NeuronCore chapter, "Descriptors").

Building blocks (plain functions, inlined where they are called):
  load_channel_major(dst, src)   HBM rows src [R, C(, K)] -> SBUF dst [P, nt, R(, K)], C = nt*P
  store_rows(dst, src)           SBUF src [P, nt, R(, K)] -> HBM rows dst [R, C(, K)]
  load_column(vector, i0, n)     HBM vector[i0:i0 + n] -> SBUF [n, 1], one element per partition

Both move rows instead, one long contiguous run per partition, and let TensorE turn [rows, P]
blocks around (`nc_transpose`, a matmul against the identity: bit-exact on trn2) through PSUM,
where one copy evicts all the transposes that share a bank.
"""
import nki.language as nl
import nki.isa as nisa

from .checks import expect, expect_dtype

# A row is cut over several partitions only into runs at least this long: the trn2 cost model's
# DMA_LONG_RUN_BYTES, from which on a run costs only its bytes (the DMA guides' figure puts 512 B
# runs at about a fifth of the peak rate; the model follows the trn2 streams behind that constant).
# Shorter pieces mean fewer TensorE transposes and fewer elements per partition to copy: at B = 1
# the output row's 8 transposes and [1, 1024] copy become 2 and [4, 256] (Qwen3-Next-80B TP4, one
# core), the chain that ends the fused kernel.
MIN_PIECE_BYTES = 512


def load_channel_major(dst, src):
    """Load HBM rows into a channel-major SBUF tile: contiguous row DMAs, then TensorE transposes.

    Dimensions:
        R: rows (tokens, or (token, head) pairs); any number, taken 128 at a time
        P: channels per tile, on dst's partitions (<= 128)
        nt: channel tiles side by side in dst's free dim; C = nt * P channels per row
        K: an optional inner dim of each channel (conv_state's window); 1 if absent

    Args:
        dst (nl.ndarray): [P, nt, R, K] @ SBUF if src has K, else [P, nt, R]; nt = 1 may be left
            out ([P, R, K] or [P, R]). Any float dtype, any free-dim strides. Written:
            dst[p, t, r, k] = src[r, t * P + p, k], rounded once to dst's dtype if it differs.
        src (nl.ndarray): [R, C, K] or [R, C] @ HBM, bf16 or fp32. Views are fine: a column
            slice src[:, c0:c1], or a reshape that makes rows of something else (see Notes).

    Returns:
        None; dst holds the tile.

    Notes:
        - Per chunk of <= 128 rows: ONE DMA into a staging tile, one contiguous HBM run per
          partition. Few rows are cut into J pieces of nt / J whole tiles (`_pieces`: at least
          MIN_PIECE_BYTES each, rows * J <= 128), so that they still spread over many DMA
          engines; a column slice of wider rows keeps J = 1 (`_rows_contiguous`).
        - Then (nt / J) * K TensorE transposes into PSUM and one eviction (`evict`) per bank.
          An odd rows * J of bf16 would write PSUM in half words, which the compiler rejects:
          those chunks are staged and transposed in fp32 (exact, `_transpose_dtype`).
        - SBUF: the staging tile, C * K * itemsize / J bytes per partition.
        - Views the callers use: conv_state [B, C, K] as is; conv_weight [C, K] as src
          [nt, P, K] into dst [P, 1, nt, K]; hidden [B, 1, H] as src [B, 128, H / 128] into dst
          [128, 1, B, H / 128] (feature h = p * (H / 128) + kt).

    Pseudocode:
        for r0 in range(0, R, 128):
            rows = src[r0:r0 + 128]                      # one DMA: a contiguous run per partition
            for t, k in product(range(nt), range(K)):
                dst[:, t, r0:r0 + 128, k] = rows[:, t * P:(t + 1) * P, k].T      # TensorE, PSUM
    """
    src, dst = _with_all_dims(src, dst, "src", "dst")
    R, C, K = src.shape
    P, nt = dst.shape[0], dst.shape[1]
    _check(dst, "dst", src, "src")
    size = _itemsize(src.dtype)
    pmax = nl.tile_size.pmax
    evictions = 0
    for r0 in range(0, R, pmax):
        rr = min(pmax, R - r0)
        J = _pieces(rr, nt, P * K * size) if _rows_contiguous(src) else 1
        TL = nt // J
        tdt = _transpose_dtype(src.dtype, rr * J)
        # partition r * J + j holds piece j of row r0 + r: channels j*TL*P .. (j + 1)*TL*P - 1;
        # the DMA widens bf16 to fp32 where the transposes need it (exact)
        rows = nl.ndarray((rr * J, TL * P, K), tdt, buffer=nl.sbuf, name="rows_in")
        pieces = src[r0:r0 + rr].reshape((rr * J, TL * P, K))
        nisa.dma_copy(dst=_squeezed(rows), src=_squeezed(pieces))
        evictions = _rows_in(dst, rows, r0, J, evictions)


def gather_channel_major(dst, pool, c0, rows, offsets):
    """load_channel_major of rows picked when the DMAs run: dst [P, nt, R, K] @ SBUF takes
    pool[slot r, c0 + t * P + p, k] (pool [N, C', K] @ HBM), slot r given twice: rows [R, 1] and
    offsets [1, R] int32 @ SBUF.

    One sequence (R = 1): its row in load_channel_major's J pieces by one scalar_offset DMA.
    Several: one row per partition by a vector_offset DMA per 128 rows (the software DGE, which
    the dma_copy docs require for it; rows may be None where R = 1). An out-of-range slot is
    skipped (oob_mode.skip): its columns of dst are undefined. Then load_channel_major's
    transposes."""
    P, nt, R, K = dst.shape
    evictions = 0
    for r0 in range(0, R, nl.tile_size.pmax):
        rr = min(nl.tile_size.pmax, R - r0)
        src, J = _slot_rows(pool, c0, P, nt, rows, offsets, r0, rr)
        staged = nl.ndarray((rr * J, nt * P * K // J), _transpose_dtype(pool.dtype, rr * J),
                            buffer=nl.sbuf, name="rows_in")
        nisa.dma_copy(dst=staged, src=src, oob_mode=nisa.oob_mode.skip)
        evictions = _rows_in(dst, staged.reshape((rr * J, nt * P // J, K)), r0, J, evictions)


def _slot_rows(pool, c0, P, nt, rows, offsets, r0, rr):
    """(the pool's side of one DMA, J) for rows r0 .. r0 + rr - 1 of gather_channel_major or
    scatter_rows, channels c0 .. c0 + nt * P - 1: one sequence's row in J pieces
    (load_channel_major's) by a scalar offset, or rr rows one per partition by a vector offset."""
    K = pool.shape[2]
    C = nt * P
    if rr == 1:
        J = _pieces(1, nt, P * K * _itemsize(pool.dtype))
        return pool.ap([[C * K // J, J], [1, C * K // J]], offset=c0 * K,
                       scalar_offset=offsets[0:1, r0:r0 + 1], indirect_dim=0), J
    return pool.ap([[pool.shape[1] * K, rr], [1, C * K]], offset=c0 * K,
                   vector_offset=rows[r0:r0 + rr], indirect_dim=0), 1


def _rows_in(dst, rows, r0, J, evictions):
    """The transposes of one chunk of load_channel_major: rows [rr * J, TL * P, K] @ SBUF (piece j
    of row r on partition r * J + j) into columns r0 .. r0 + rr - 1 of dst [P, nt, R, K], one
    eviction per PSUM bank; returns the evictions issued so far."""
    P, nt, _, K = dst.shape
    TL = nt // J
    rr = rows.shape[0] // J
    tdt = rows.dtype
    out = dst.reshape_dim(1, (J, TL))[:, :, :, r0:r0 + rr, :]             # [P, J, TL, rr, K]
    per_bank = _psum_bank_bytes() // (rr * J * _itemsize(tdt))            # transposes per bank
    for t0, m, k0, nk in _bank_groups(TL, K, per_bank, tiles_and_k=(J == 1)):
        ps = nl.ndarray((P, m, nk, rr, J), tdt, buffer=nl.psum, name="rows_in_T")
        for i in range(m):
            for k in range(k0, k0 + nk):
                block = _squeezed(rows[:, (t0 + i) * P:(t0 + i + 1) * P, k])  # [rr * J, P]
                nisa.nc_transpose(dst=_squeezed(ps[:, i, k - k0]), data=block,
                                  engine=nisa.engine.tensor)
        evict(out[:, :, t0:t0 + m, :, k0:k0 + nk], ps.permute((0, 4, 1, 3, 2)), evictions)
        evictions += 1
    return evictions


def store_rows(dst, src, queue=None):
    """Store a channel-major SBUF tile as HBM rows: TensorE transposes, then contiguous row DMAs.

    The inverse of `load_channel_major`.

    Dimensions:
        R: rows (tokens, or (token, head) pairs); any number, taken 128 at a time
        P: channels per tile, on src's partitions (<= 128)
        nt: channel tiles side by side in src's free dim; C = nt * P channels per row
        K: an optional inner dim of each channel (conv_state's window); 1 if absent

    Args:
        dst (nl.ndarray): [R, C, K] or [R, C] @ HBM (views are fine, e.g. a column slice).
            Written: dst[r, t * P + p, k] = src[p, t, r, k], rounded once to dst's dtype if it
            differs.
        src (nl.ndarray): [P, nt, R, K] @ SBUF if dst has K, else [P, nt, R]; nt = 1 may be left out
            ([P, R, K] or [P, R]). bf16 or fp32, any free-dim strides.
        queue: optional, the engine (nisa.engine.sync) whose hardware-DGE queue carries the row
            DMAs; None: the compiler's queues.

    Returns:
        None; dst holds the rows.

    Notes:
        - Per chunk of <= 128 rows: (nt / J) * K TensorE transposes into PSUM, one eviction
          (`evict`) per bank into a staging tile in dst's dtype, then ONE DMA, one contiguous
          HBM run per partition; rows cut into J pieces as in `load_channel_major`.
        - An odd P of bf16 would write PSUM in half words, which the compiler rejects: then one
          GpSimd copy widens the chunk of src to fp32 first (exact).
        - SBUF: the staging tile, C * K * itemsize / J bytes per partition.

    Pseudocode:
        for r0 in range(0, R, 128):
            rows = empty((min(128, R - r0), C, K))
            for t, k in product(range(nt), range(K)):
                rows[:, t * P:(t + 1) * P, k] = src[:, t, r0:r0 + 128, k].T      # TensorE, PSUM
            dst[r0:r0 + 128] = rows                      # one DMA: a contiguous run per partition
    """
    dst, src = _with_all_dims(dst, src, "dst", "src")
    R, C, K = dst.shape
    P, nt = src.shape[0], src.shape[1]
    _check(src, "src", dst, "dst")
    pmax = nl.tile_size.pmax
    evictions = 0
    for r0 in range(0, R, pmax):
        rr = min(pmax, R - r0)
        J = _pieces(rr, nt, P * K * _itemsize(dst.dtype)) if _rows_contiguous(dst) else 1
        TL = nt // J
        # partition r * J + j holds piece j of row r0 + r: channels j*TL*P .. (j + 1)*TL*P - 1
        rows = nl.ndarray((rr * J, TL * P, K), dst.dtype, buffer=nl.sbuf, name="rows_out")
        evictions = _rows_out(rows, src, r0, J, evictions)
        pieces = dst[r0:r0 + rr].reshape((rr * J, TL * P, K))
        if queue is None:
            nisa.dma_copy(dst=_squeezed(pieces), src=_squeezed(rows))
        else:
            nisa.dma_copy(dst=_squeezed(pieces), src=_squeezed(rows),
                          dge_mode=nisa.dge_mode.hwdge, engine=queue)


def scatter_rows(pool, c0, rows, offsets, src):
    """store_rows to rows picked when the DMAs run: pool[slot r, c0 + t * P + p, k] (pool [N, C',
    K] @ HBM) takes src[p, t, r, k] (src [P, nt, R, K] @ SBUF), slot r given as in
    gather_channel_major (rows [R, 1], offsets [1, R]).

    store_rows' transposes, then one sequence's row in J pieces by a scalar_offset DMA, or one row
    per partition by a vector_offset DMA per 128 rows; an out-of-range slot is not written
    (oob_mode.skip)."""
    P, nt, R, K = src.shape
    evictions = 0
    for r0 in range(0, R, nl.tile_size.pmax):
        rr = min(nl.tile_size.pmax, R - r0)
        dst, J = _slot_rows(pool, c0, P, nt, rows, offsets, r0, rr)
        staged = nl.ndarray((rr * J, nt * P // J, K), pool.dtype, buffer=nl.sbuf, name="rows_out")
        evictions = _rows_out(staged, src, r0, J, evictions)
        nisa.dma_copy(dst=dst, src=staged.reshape((rr * J, nt * P * K // J)),
                      oob_mode=nisa.oob_mode.skip)


def _rows_out(rows, src, r0, J, evictions):
    """The transposes of one chunk of store_rows: columns r0 .. of src [P, nt, R, K] @ SBUF into
    rows [rr * J, TL * P, K] (piece j of row r on partition r * J + j), widened to fp32 first
    where PSUM needs it; returns the evictions issued so far."""
    P, nt, _, K = src.shape
    TL = nt // J
    rr = rows.shape[0] // J
    tdt = _transpose_dtype(src.dtype, P)
    per_bank = _psum_bank_bytes() // (P * _itemsize(tdt))                     # transposes per bank
    by_tile = rows.reshape_dim(1, (TL, P))                                # [rr * J, TL, P, K]
    tiles = src.reshape_dim(1, (J, TL))[:, :, :, r0:r0 + rr, :]           # [P, J, TL, rr, K]
    if tdt != src.dtype:              # widen the chunk to fp32 for the transposes (exact)
        wide = nl.ndarray((P, J, TL, rr, K), tdt, buffer=nl.sbuf, name="rows_out_fp32")
        nisa.tensor_copy(dst=_squeezed(wide), src=_squeezed(tiles), engine=nisa.engine.gpsimd)
        tiles = wide
    for t0, m, k0, nk in _bank_groups(TL, K, per_bank, tiles_and_k=True):
        ps = nl.ndarray((rr * J, m, nk, P), tdt, buffer=nl.psum, name="rows_out_T")
        for i in range(m):
            for k in range(k0, k0 + nk):
                block = _squeezed(tiles[:, :, t0 + i, :, k].permute((0, 2, 1)))  # [P, rr, J]
                nisa.nc_transpose(dst=_squeezed(ps[:, i, k - k0]), data=block,
                                  engine=nisa.engine.tensor)
        evict(by_tile[:, t0:t0 + m, :, k0:k0 + nk], ps.permute((0, 1, 3, 2)), evictions)
        evictions += 1
    return evictions


def load_column(vector, i0, n, name):
    """vector[i0:i0 + n] @ HBM as a new [n, 1] SBUF tile, one element per partition: one contiguous
    row DMA and a TensorE transpose (load_channel_major), where a DMA straight into n partitions
    costs a descriptor per element."""
    t = nl.ndarray((n, 1), vector.dtype, name=name)
    load_channel_major(t, vector[i0:i0 + n].reshape((1, n)))
    return t


def token_columns(t, i, T):
    """Token i's columns (b * T + i) of a channel-major [..., B * T] tile of T tokens per
    sequence: a [..., B] view."""
    return t.reshape_dim(len(t.shape) - 1, (t.shape[-1] // T, T))[..., i]


def _with_all_dims(hbm, tile, hbm_arg, tile_arg):
    """Views with every dim: hbm [R, C, K] (K = 1 if absent), tile [P, nt, R, K] (nt = 1 if
    absent)."""
    expect(len(hbm.shape) in (2, 3), hbm_arg, "HBM rows [R, C] or [R, C, K]",
           f"shape {list(hbm.shape)}")
    if len(hbm.shape) == 2:
        hbm, tile = hbm.expand_dim(2), tile.expand_dim(len(tile.shape))
    expect(len(tile.shape) in (3, 4), tile_arg,
           "a channel-major tile [P, nt, R] or [P, R] ([P, nt, R, K] or [P, R, K] for rows "
           "[R, C, K])",
           f"shape {list(tile.shape)}")
    if len(tile.shape) == 3:
        tile = tile.expand_dim(1)
    return hbm, tile


def _check(tile, tile_arg, hbm, hbm_arg):
    """The tile's partitions, tiles, rows and inner dim against the rows; src bf16 or fp32."""
    P, nt = tile.shape[0], tile.shape[1]
    R, C, K = hbm.shape
    pmax = nl.tile_size.pmax
    expect(P <= pmax, tile_arg, f"at most {pmax} partitions (channels per tile)", P)
    expect(tuple(tile.shape[2:]) == (R, K), tile_arg,
           f"[P, nt] then {hbm_arg}'s rows and inner dim {[R, K]}", list(tile.shape))
    expect(nt * P == C, tile_arg, f"nt * P = {C} channels, as the rows of {hbm_arg} hold",
           f"nt = {nt} tiles of P = {P}")
    # transposable dtypes
    expect_dtype(tile if tile_arg == "src" else hbm, "src", (nl.bfloat16, nl.float32))


def _squeezed(t):
    """The view without size-1 dims after the first, so that access patterns list real dims only."""
    for d in range(len(t.shape) - 1, 0, -1):
        if t.shape[d] == 1 and len(t.shape) > 2:
            t = t.squeeze_dim(d)
    return t


def _itemsize(dtype):
    return 4 if dtype == nl.float32 else 2


def _psum_bank_bytes():
    """Bytes per partition of one PSUM bank: psum_bank_fmax fp32 elements (2 KiB on trn2)."""
    return 4 * nl.tile_size.psum_bank_fmax


def _transpose_dtype(dtype, n):
    """The dtype the TensorE transposes run in when each writes n elements per PSUM partition.

    PSUM takes sub-word (bf16) writes only as whole 4-byte words per partition; an odd n of bf16
    (e.g. B = 1 rows) would write 2 bytes past a word boundary, which the compiler rejects. Those
    transposes run in fp32 instead (bf16 -> fp32 -> bf16 is exact, -0.0 and infinities included).
    """
    return nl.float32 if _itemsize(dtype) < 4 and n % 2 else dtype


def _rows_contiguous(hbm):
    """Whether the rows of hbm [R, C, K] follow each other in memory, so that [rows, J, C / J, K]
    views as [rows * J, C / J, K]: a DMA's HBM side must have the SBUF side's partition count in
    dim 0. A column slice of wider rows is not: its rows then take one partition each (J = 1)."""
    return hbm.shape[0] == 1 or hbm.strides[0] == hbm.shape[1] * hbm.strides[1]


def _pieces(rows, nt, tile_bytes):
    """J: pieces a row of nt tiles is cut into, the largest J | nt with rows * J <= 128 partitions
    and pieces of at least MIN_PIECE_BYTES (1 if none)."""
    best = 1
    for J in range(2, nt + 1):
        if (nt % J == 0 and rows * J <= nl.tile_size.pmax
                and nt // J * tile_bytes >= MIN_PIECE_BYTES):
            best = J
    return best


def _bank_groups(nt, K, per_bank, tiles_and_k):
    """(first tile, tiles, first k, ks) of the transposes that share one PSUM bank and one eviction.

    Whole tiles while their K transposes fit a bank (only if `tiles_and_k`, or K = 1: an eviction
    then stays within 3 free dims), else a k-range of one tile.
    """
    groups = []
    if K == 1 or (tiles_and_k and K <= per_bank):
        g = max(1, per_bank // K)
        for t in range(0, nt, g):
            groups.append((t, min(g, nt - t), 0, K))
        return groups
    for t in range(nt):
        for k in range(0, K, per_bank):
            groups.append((t, 1, k, min(per_bank, K - k)))
    return groups


def evict(dst, psum, i):
    """The i-th PSUM -> SBUF copy of a run, alternately on VectorE and ScalarE so that two run at
    once. Both engines copy bit-exactly when the dtypes match and otherwise cast through fp32 to
    dst's dtype (the nki.isa.tensor_copy documentation), so the engine does not change a value."""
    engine = nisa.engine.scalar if i % 2 else nisa.engine.vector
    nisa.tensor_copy(dst=_squeezed(dst), src=_squeezed(psum), engine=engine)
