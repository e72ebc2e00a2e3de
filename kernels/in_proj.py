"""Stage 1, in_proj: the four decode projections of a GDN layer, hidden @ W_in_{qkv,z,a,b}.

Building blocks (plain functions the fused kernel calls):
  load_hidden_T(dst, hidden)               hidden [B, 1, H] @ HBM -> SBUF, H on partitions
  load_tokens(hidden)                      hidden [B, T, H] the same way, B * T columns
  project_rows(dst, hidden_T, W, col0)     a range of output channels of hidden @ W, row-major
                                           [B, n]: in SBUF, or straight to HBM rows
  project_columns(dst, hidden_T, W, col0)  the same range channel-major on chip, [P, nt, B]
  ColumnStream(dst, hidden_T, W, col0)     project_columns in steps the caller places
  project_heads(hidden_T, W, h0, nh)       a narrow projection's rows h0 .. h0 + nh - 1
  project_pair(dst, hidden_T, W0, W1, c0)  two narrow weights at once, one matmul per row tile
  project_slices(dst, hidden_T, W, cols)   two column slices of one weight at once, the same way
  project_qk(qk, hidden_T, W, q0, key_dim) the q and k heads q0 .. of W_in_qkv, either way
Entry point:
  in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b) -> mixed_qkv, z, a, b   (HBM -> HBM)

hidden^T is the stationary matmul operand ([128, B]) and the weight streams through TensorE as the
moving one ([128, <= 512 columns]), as the NKI library's qkv_tkg does: N output channels take
(H / 128) * ceil(N / 512) matmuls, a quarter of the other orientation's (stage 1's chapter,
stages/01_in_proj.ipynb, compares the two). Decode projections are bound by the weight stream:
each weight is read once, in large contiguous DMAs, into buffers allocated per chunk so that the
next chunk loads while TensorE consumes this one.
"""
import nki
import nki.isa as nisa
import nki.language as nl

from .checks import expect, expect_dtype, expect_multiple, expect_rank
from .layout import evict, load_channel_major

# At most this many bytes per partition in one weight DMA (or one row): the DMA guides want
# >= 2 KiB, ideally >= 4 KiB, contiguous per partition; more buys little and costs a tail, as the
# last chunks of the queues land together (stage 1's chapter).
WEIGHT_DMA_BYTES = 4 * 1024
# PSUM banks one column group accumulates in, over all its token chunks: half of the 8, so that
# the next group can accumulate while this one is evicted and project_columns' transposes find one.
ACC_BANKS = 4
MAX_BATCH = ACC_BANKS * nl.tile_size.pmax   # chunks of 128 tokens in a group, a bank each at least
BF16_BYTES = 2
# The shortest weight-row run (bytes) worth streaming a slice of a weight's columns for: trn2
# streams of 512-1024 B runs measured 240 GB/s, 90% of the 4 KiB-run rate (github.com/KevGomes1403/
# nki-moe-megakernel, nki_kernels/specs/deltanet_decode_opt.md); below 512 B the NKI DMA guide's
# throughput figure falls to a fifth of peak and less (nki/get-started/about/nki-dma-overview.rst).
MIN_SLICE_RUN_BYTES = 512


def load_hidden_T(dst, hidden):
    """Load the decode token's hidden state once, with H on the partitions.

    Dimensions:
        B: batch (decode sequences), H: hidden size (a multiple of 128), KT = H // 128.

    Args:
        dst: [128, B, KT] @ SBUF, bf16 -- written: dst[p, b, kt] = hidden[b, 0, p * KT + kt].
        hidden: [B, 1, H] @ HBM, bf16.

    Returns:
        hidden_T: the [128, KT, B] view dst.permute((0, 2, 1)) that `project_rows` and
        `project_columns` take (contraction tile kt is hidden_T[:, kt, :], the [128, B]
        stationary operand of every matmul of that tile).

    Notes:
        - Partition p holds features p*KT .. p*KT + KT - 1 (the NKI library's [H0, BxS, H1]
          layout, as qkv_tkg), so the weight rows one partition contracts are KT consecutive rows
          of W: one contiguous run (see `project_rows`).
        - hidden moves as rows (kernels.layout.load_channel_major on the view [B, 128, KT]): one
          DMA per 128 tokens, then KT TensorE transposes, not B * 128 runs of KT * 2 bytes.

    Pseudocode:
        dst[p, b, kt] = hidden[b, 0, p * KT + kt]
    """
    B, _, H = hidden.shape
    pmax = nl.tile_size.pmax
    # Rows [B, 128, KT] (feature p*KT + kt of token b at [b, p, kt]) into dst as [128, 1, B, KT].
    load_channel_major(dst.expand_dim(1), hidden.reshape((B, pmax, H // pmax)))
    return dst.permute((0, 2, 1))


def load_tokens(hidden):
    """hidden [B, T, H] @ HBM (bf16) on chip once, as the [128, KT, B * T] view every projection
    takes: token t of sequence b in column b * T + t (load_hidden_T on B * T rows of one token)."""
    B, T, H = hidden.shape
    pmax = nl.tile_size.pmax
    dst = nl.ndarray((pmax, B * T, H // pmax), nl.bfloat16, name="hidden_T")
    return load_hidden_T(dst, hidden.reshape((B * T, 1, H)))


def project_rows(dst, hidden_T, W, col0=0):
    """Project the token batch onto a range of W's output channels, row-major: [B, n] rows.

    Dimensions:
        B: batch (<= 512), H = 128 * KT: hidden size, N: W's output channels,
        n: channels written, col0 .. col0 + n - 1.

    Args:
        dst: [B, n] @ SBUF (B <= 128) or @ HBM, bf16 (any float dtype) -- written:
            dst[b, c] = (hidden @ W)[b, col0 + c], summed in fp32, rounded once. Views are fine
            (e.g. a column slice of wider HBM rows).
        hidden_T: [128, KT, B] @ SBUF, bf16 -- hidden_T[p, kt, b] = hidden[b, p*KT + kt], e.g. the
            view `load_hidden_T` returns. Any free-dim strides.
        W: [H, N] @ HBM, bf16 -- the weight in checkpoint layout (nn.Linear weight transposed).
        col0: first output channel (a Python int).

    Returns:
        None; dst holds the projection.

    Notes:
        - hidden_T[:, kt, chunk] stationary ([128, <= 128 tokens]), weight rows moving ([128,
          <= 512 columns]); the KT contraction tiles accumulate in one fp32 PSUM bank.
        - Columns go in groups whose accumulators fit ACC_BANKS banks over all token chunks. A
          group's weight rows stream once, in balanced row chunks of at most WEIGHT_DMA_BYTES per
          partition, each used by every token chunk while on chip; buffers are allocated inside
          their loops, so the next chunk loads while TensorE consumes this one.
        - One eviction per PSUM bank (`kernels.layout.evict`) rounds the sums to dst's dtype;
          an HBM dst gets them through an SBUF staging tile, one DMA per group and token chunk.

    Pseudocode:
        acc = np.zeros((B, n), np.float32)
        for kt in range(KT):
            rows = [p * KT + kt for p in range(128)]
            acc += hidden_T[:, kt, :].T @ W[rows, col0:col0 + n]
        dst[...] = acc.astype(dst.dtype)
    """
    B, n = dst.shape
    W3 = _weight_view(W, hidden_T, dst, 0, col0, n, n)
    chunks = _token_chunks(B)
    width = _group_columns(B, 1)
    for c in range(0, n, width):
        _rows_group(dst[:, c:c + min(width, n - c)], hidden_T, W3, col0 + c, chunks)


def project_columns(dst, hidden_T, W, col0=0, queue=None, by_block=False):
    """Project the token batch onto a range of W's output channels, channel-major on chip.

    Dimensions:
        B: batch (<= 512), H = 128 * KT: hidden size, N: W's output channels,
        P: channels per tile (dst partitions, <= 128), nt: tiles, so columns col0 ..
        col0 + nt*P - 1.

    Args:
        dst: [P, nt, B] or [P, B] (nt = 1) @ SBUF, bf16 (any float dtype) -- written:
            dst[p, t, b] = (hidden @ W)[b, col0 + t*P + p], summed in fp32, rounded once.
            Any free-dim strides.
        hidden_T: [128, KT, B] @ SBUF, bf16 -- hidden_T[p, kt, b] = hidden[b, p*KT + kt], e.g. the
            view `load_hidden_T` returns. Any free-dim strides.
        W: [H, N] @ HBM, bf16 -- the weight in checkpoint layout (nn.Linear weight transposed).
        col0: first output channel (a Python int).
        queue: optional, the engine (nisa.engine.sync) whose hardware-DGE queue carries the
            weight DMAs; None: the compiler's queues.
        by_block: a column group whose sums fit one PSUM bank is evicted one P-column block at a
            time, VectorE and ScalarE in turn, so that its first transpose waits for one block's
            copy, not the bank's (at B = 1 a [1, 512] copy takes about as long as four of the
            transposes it holds up).

    Returns:
        None; dst holds the projection.

    Notes:
        - The matmuls and weight DMAs are `project_rows`'s. A group's sums are evicted row-major
          in fp32 (exact), then TensorE transposes each [tokens, P] block into PSUM in fp32 (whole
          4-byte words for any B) and one eviction per bank writes dst, rounding once.
        - For the fused kernel: per head, dst [dk, n_heads, B] with col0 at the first head's
          channel (P = dk); for a / b, dst [nv, B]. A column range narrower than W gives weight
          runs of (its width) * 2 bytes per row: slice only where they are at least
          MIN_SLICE_RUN_BYTES.
        - `ColumnStream` runs the same instructions in steps the caller places.

    Pseudocode:
        acc = np.zeros((B, nt * P), np.float32)
        for kt in range(KT):
            rows = [p * KT + kt for p in range(128)]
            acc += hidden_T[:, kt, :].T @ W[rows, col0:col0 + nt * P]
        dst[...] = acc.reshape(B, nt, P).transpose(2, 1, 0).astype(dst.dtype)
    """
    stream = ColumnStream(dst, hidden_T, W, col0, queue, by_block)
    stream.sum(stream.n_chunks)


class ColumnStream(nl.NKIObject):
    """`project_columns(dst, hidden_T, W, col0, queue, by_block)` in steps, so that a caller can
    place each weight chunk's matmuls, its DMAs and the evictions in the engines' program order
    (in-order queues: where an instruction is issued is when it can run).

    Fields:
        dst: the projection's channel-major tile, written by the evictions.
        n_chunks: weight row chunks (of every column group, in TensorE's order).
        next: the chunks summed so far.

    Methods:
        allocate_loads(): allocate every chunk's SBUF tile now, so that their DMAs can be issued
            before the matmuls (issue_loads); otherwise each chunk's DMA is issued by `sum`, just
            before its matmuls.
        issue_loads(queue=None): issue the allocated chunks' DMAs, in order (on `queue`'s
            hardware-DGE queue if given).
        sum(n, hold=False): the matmuls of the next n chunks, and each column group's eviction
            after its last chunk; hold: the last group's sums stay in PSUM until evict().
        evict(): the held group's evictions and transposes; its PSUM banks are then free.
    """

    def __init__(self, dst, hidden_T, W, col0=0, queue=None, by_block=False):
        self.dst = dst
        self.W3, self.groups = _column_groups(dst, hidden_T, W, col0)
        self.bounds = [0]                     # weight chunks before each group, and in all
        for i in range(len(self.groups)):
            group = self.groups[i][0]
            self.bounds.append(self.bounds[-1] + _chunk_count(self.W3.shape[1],
                                                              group.shape[0] * group.shape[1]))
        self.hidden_T = hidden_T
        self.queue = queue
        self.by_block = by_block
        self.chunks = _token_chunks(hidden_T.shape[2])
        self.n_chunks = self.bounds[-1]
        self.next = 0
        self.loads = None                     # the chunks' (SBUF tile, HBM rows, first row tile)
        self.accs = None                      # the PSUM banks of the group being summed
        self.held = None                      # the group whose sums wait for evict()

    def allocate_loads(self):
        self.loads = []
        for i in range(len(self.groups)):
            group, c0 = self.groups[i]
            n = self.bounds[i + 1] - self.bounds[i]
            for j in range(n):
                self.loads.append(_weight_chunk(self.W3, c0, group.shape[0] * group.shape[1], j,
                                                n))

    def issue_loads(self, queue=None):
        issue_loads(self.loads, queue)

    def sum(self, n, hold=False):
        stop = min(self.next + n, self.n_chunks)
        while self.next < stop:
            i = self.next
            g = 0
            while self.bounds[g + 1] <= i:
                g += 1
            group, c0 = self.groups[g]
            width = group.shape[0] * group.shape[1]
            j = i - self.bounds[g]
            n_chunks = self.bounds[g + 1] - self.bounds[g]
            if j == 0:
                self.accs = _new_accs(self.chunks, width)
            if self.loads is None:
                load = _weight_chunk(self.W3, c0, width, j, n_chunks)
                issue_loads([load], self.queue)
            else:
                load = self.loads[i]
            _chunk_matmuls(self.accs, self.hidden_T, load, self.chunks)
            if j == n_chunks - 1 and hold and i == self.n_chunks - 1:
                self.held = group
            elif j == n_chunks - 1:
                _columns_evict(group, self.accs, self.chunks, self.by_block)
                if i == self.n_chunks - 1:
                    self.accs = None          # the last group's banks are free
            self.next = i + 1

    def evict(self):
        if self.held is not None:
            _columns_evict(self.held, self.accs, self.chunks, self.by_block)
            self.held = None
            self.accs = None


def project_heads(hidden_T, W, h0, nh, name, queue=None):
    """Columns h0 .. h0 + nh - 1 of a narrow projection (W_in_a or W_in_b: a column per value head)
    as a new channel-major [nh, B] tile. Rows of W are too narrow to slice, so every column is
    projected (project_columns, weight DMAs on `queue`); where nh is not all of them, rows h0 ..
    are copied to a tile of their own by an SBUF -> SBUF DMA (a compute engine may not start at an
    arbitrary partition)."""
    nv = W.shape[1]
    t = nl.ndarray((nv, hidden_T.shape[2]), nl.bfloat16, name=name)
    project_columns(t, hidden_T, W, queue=queue)
    if nh == nv:
        return t
    rows = nl.ndarray((nh, t.shape[1]), t.dtype, name=f"{name}_heads")
    nisa.dma_copy(rows, t[h0:h0 + nh])
    return rows


def project_pair(dst, hidden_T, W0, W1, c0=0):
    """Two narrow projections at once, channel-major: dst[:, 0] = columns c0 .. c0 + n - 1 of
    hidden @ W0, transposed, and dst[:, 1] the same of hidden @ W1, with one matmul per row tile
    for both.

    Args:
        dst: [n, 2, B] @ SBUF (any float dtype), written, rounded once from the fp32 sums.
        hidden_T: [128, KT, B] @ SBUF, bf16, as project_columns takes it.
        W0, W1: [H, P] @ HBM, bf16, the same shape, 2 * P <= 512 (one PSUM bank of sums).
        c0: the first column kept (a Python int), c0 + n <= P.

    Notes:
        - Rows of P * 2 bytes are too narrow to slice, so both weights stream whole: each weight
          chunk's two DMAs fill the halves of one SBUF tile [128, 2, rows, P], each half a
          contiguous run per partition, and one matmul reads a row tile of both halves. At a few
          columns a matmul's time is TensorE's fixed cost, not its columns.
        - The transposes out of the row-major sums take only columns c0 .. c0 + n - 1: a program
          of an LNC grid gets its own heads on partitions 0 .. n - 1 without a copy.
    """
    n = dst.shape[0]
    P = W0.shape[1]
    expect(list(W1.shape) == list(W0.shape), "W1", f"W0's shape {list(W0.shape)}", list(W1.shape))
    W3 = _weight_view(W0, hidden_T, dst, 2, c0, n, f"{n}")
    W3b = W1.reshape(W3.shape)
    fmax = nl.tile_size.psum_bank_fmax
    expect(len(dst.shape) == 3 and dst.shape[1] == 2 and 2 * P <= fmax, "dst",
           f"[n, 2, B], the two weights' {2 * P} sums in one PSUM bank (<= {fmax})",
           list(dst.shape))
    chunks = _token_chunks(hidden_T.shape[2])
    accs = _pair_sums(hidden_T, (W3, W3b), (0, 0), P, chunks)
    for c in range(len(chunks)):
        b0, bb = chunks[c]
        sums = nl.ndarray((bb, 2, P), dtype=nl.float32, buffer=nl.sbuf)       # row-major, exact
        evict(sums, accs[c][0], 2 * c)
        ps = nl.ndarray((n, 2, bb), dtype=nl.float32, buffer=nl.psum)
        for h in range(2):
            nisa.nc_transpose(dst=ps[:, h, :], data=sums[:, h, c0:c0 + n],
                              engine=nisa.engine.tensor)
        evict(dst[:, :, b0:b0 + bb], ps, 2 * c + 1)


def project_slices(dst, hidden_T, W, cols, queue=None):
    """Two column slices of one weight at once, channel-major, with one matmul per row tile for
    both: dst[:, i] = columns cols[i] .. cols[i] + nt*P - 1 of hidden @ W, as project_columns
    writes them (e.g. a program's q heads and its k heads of W_in_qkv).

    Args:
        dst: [P, 2, nt, B] @ SBUF (any float dtype), written: dst[p, i, t, b] = (hidden @ W)[b,
            cols[i] + t*P + p], summed in fp32, rounded once.
        hidden_T: [128, KT, B] @ SBUF, bf16, as project_columns takes it.
        W: [H, N] @ HBM, bf16.
        cols: (first column of slice 0, first column of slice 1), Python ints.
        queue: as project_columns'.

    Notes:
        - The two slices' chunks fill the halves of one SBUF tile [128, 2, rows, nt*P], each half
          one contiguous run per partition: both slices' 2 * nt * P sums must fit one PSUM bank
          (<= 512), so one matmul per row tile reads both, half project_columns' count on each.
        - The sums are evicted a block at a time (project_columns' by_block).
    """
    P, _, nt, B = dst.shape
    width = nt * P
    expect(len(cols) == 2, "cols", "two first columns, one per slice", cols)
    for i in range(2):
        expect(0 <= cols[i] and cols[i] + width <= W.shape[1], "cols",
               f"slices of {nt}*{P} columns inside W's {W.shape[1]}", list(cols))
    W3 = _weight_view(W, hidden_T, dst, 3, cols[0], width, f"{nt}*{P}")
    fmax = nl.tile_size.psum_bank_fmax
    expect(2 * width <= fmax, "dst",
           f"[P, 2, nt, B], both slices' 2 * nt * P sums in one PSUM bank (<= {fmax})",
           list(dst.shape))
    chunks = _token_chunks(B)
    accs = _pair_sums(hidden_T, (W3, W3), cols, width, chunks, queue)
    _columns_evict(dst.reshape((P, 2 * nt, B)), accs, chunks, True)


def project_qk(qk, hidden_T, W, q0, key_dim, queue=None, by_block=False):
    """The q and k columns of key heads q0 .. q0 + nq - 1 of W_in_qkv (columns q | k | v) into
    qk [dk, 2, nq, B] @ SBUF: q heads in qk[:, 0], k heads in qk[:, 1], channel-major.

    Every key head (nq * dk = key_dim): q | k is one column range (project_columns). A program's
    own heads: two slices, in one matmul per row tile (project_slices) where both fit one PSUM
    bank, else one project_columns each. queue, by_block: as project_columns'.
    """
    dk, _, nq, B = qk.shape
    if nq * dk == key_dim:
        project_columns(qk.reshape((dk, 2 * nq, B)), hidden_T, W, queue=queue, by_block=by_block)
    elif 2 * nq * dk <= nl.tile_size.psum_bank_fmax:
        project_slices(qk, hidden_T, W, (q0 * dk, key_dim + q0 * dk), queue=queue)
    else:
        for i in range(2):
            project_columns(qk[:, i], hidden_T, W, col0=i * key_dim + q0 * dk, queue=queue,
                            by_block=by_block)


def _pair_sums(hidden_T, W3s, cols, width, chunks, queue=None):
    """The fp32 sums of two column ranges, W3s[i][:, :, cols[i]:cols[i] + width] (each [128, KT,
    N]), side by side in one PSUM bank per token chunk: accs[c][0] [tokens, 2 * width]. Each row
    chunk's two DMAs fill the halves of one SBUF tile; one matmul per row tile reads both."""
    accs = _new_accs(chunks, 2 * width)
    KT = W3s[0].shape[1]
    n_chunks = _chunk_count(KT, 2 * width)
    for i in range(n_chunks):
        kt0, g = _chunk_rows(KT, i, n_chunks)
        w_sb = nl.ndarray((nl.tile_size.pmax, 2, g, width), dtype=W3s[0].dtype, buffer=nl.sbuf)
        issue_loads([(w_sb[:, 0], W3s[0][:, kt0:kt0 + g, cols[0]:cols[0] + width]),
                     (w_sb[:, 1], W3s[1][:, kt0:kt0 + g, cols[1]:cols[1] + width])], queue)
        for j in range(g):
            for c in range(len(chunks)):
                b0, bb = chunks[c]
                nisa.nc_matmul(dst=accs[c][0], stationary=hidden_T[:, kt0 + j, b0:b0 + bb],
                               moving=w_sb[:, :, j, :], accumulate=(kt0 + j > 0))
    return accs


def issue_loads(loads, queue=None):
    """Issue the DMAs of a list of (SBUF tile, HBM source, ...) loads, in order; on `queue`'s
    hardware-DGE queue if given (one in-order queue: they land in this order)."""
    for i in range(len(loads)):
        if queue is None:
            nisa.dma_copy(dst=loads[i][0], src=loads[i][1])
        else:
            nisa.dma_copy(dst=loads[i][0], src=loads[i][1], dge_mode=nisa.dge_mode.hwdge,
                          engine=queue)


def _column_groups(dst, hidden_T, W, col0):
    """project_columns's operands checked, and its column groups: (W as [128, KT, N], a list of
    (the group's dst [P, nt, B], its first column))."""
    if len(dst.shape) == 2:
        dst = dst.expand_dim(1)
    P, nt, B = dst.shape
    pmax = nl.tile_size.pmax
    expect(P <= pmax, "dst", f"at most {pmax} partitions (channels per tile)", P)
    W3 = _weight_view(W, hidden_T, dst, 2, col0, nt * P, f"{nt}*{P}")
    tiles = _group_columns(B, P) // P
    groups = []
    for t0 in range(0, nt, tiles):
        groups.append((dst[:, t0:t0 + min(tiles, nt - t0), :], col0 + t0 * P))
    return W3, groups


def _weight_view(W, hidden_T, dst, batch_dim, col0, n, n_text):
    """Check a building block's operands: dst's batch in dim `batch_dim`, columns col0 .. col0 + n
    (n_text) of W. Returns W viewed as [128, KT, N]: W3[p, kt, c] = W[p*KT + kt, c]."""
    H, N = W.shape
    pmax = nl.tile_size.pmax
    KT = H // pmax
    B = hidden_T.shape[2]
    expect(H % pmax == 0 and hidden_T.shape[0] == pmax and hidden_T.shape[1] == KT, "hidden_T",
           f"shape [128, H/128, B] for W's H = {H}", list(hidden_T.shape))
    where = "first" if batch_dim == 0 else "last"
    expect(dst.shape[batch_dim] == B, "dst", f"batch {B} (of hidden_T) in its {where} dim",
           list(dst.shape))
    expect(0 <= col0 and col0 + n <= N, "col0",
           f"columns col0 .. col0 + {n_text} inside W's {N} columns", col0)
    expect(B <= MAX_BATCH, "dst", f"batch B <= {MAX_BATCH} (chunks of 128 tokens, each "
                                  f"accumulating in its own PSUM bank)", B)
    return W.reshape((pmax, KT, N))


def _token_chunks(B):
    """(first token, tokens) of the chunks of at most 128 tokens: the stationary free size."""
    chunks = []
    pmax = nl.tile_size.pmax
    for b0 in range(0, B, pmax):
        chunks.append((b0, min(pmax, B - b0)))
    return chunks


def _group_columns(B, P):
    """Columns of one group: whole P-channel tiles whose accumulators, ACC_BANKS // (token chunks)
    banks per chunk, fit ACC_BANKS PSUM banks."""
    banks = ACC_BANKS // len(_token_chunks(B))
    return banks * nl.tile_size.psum_bank_fmax // P * P


def _accumulate(hidden_T, W3, c0, width, chunks):
    """The fp32 sums hidden @ W[:, c0:c0 + width] of every token chunk, in PSUM.

    Returns accs: accs[i][j] is the [tokens of chunk i, <= 512] bank of columns c0 + 512 * j ...
    The weight columns stream once, in row chunks of at most WEIGHT_DMA_BYTES per partition; each
    chunk's DMA is issued just before its matmuls.
    """
    accs = _new_accs(chunks, width)
    n_chunks = _chunk_count(W3.shape[1], width)
    for i in range(n_chunks):
        load = _weight_chunk(W3, c0, width, i, n_chunks)
        issue_loads([load])
        _chunk_matmuls(accs, hidden_T, load, chunks)
    return accs


def _new_accs(chunks, width):
    """The PSUM banks of one column group: accs[i][j] [tokens of chunk i, <= 512], columns
    512 * j ..."""
    fmax = nl.tile_size.psum_bank_fmax
    accs = []
    for chunk in chunks:
        banks = []
        for n0 in range(0, width, fmax):
            banks.append(nl.ndarray((chunk[1], min(fmax, width - n0)), dtype=nl.float32,
                                    buffer=nl.psum))
        accs.append(banks)
    return accs


def _chunk_matmuls(accs, hidden_T, load, chunks):
    """The matmuls of one weight chunk (SBUF tile, HBM rows, first row tile) into accs."""
    fmax = nl.tile_size.psum_bank_fmax
    w_sb, _, kt0 = load
    for j in range(w_sb.shape[1]):
        kt = kt0 + j
        for c in range(len(accs)):
            b0, bb = chunks[c]
            for k in range(len(accs[c])):
                acc = accs[c][k]
                nisa.nc_matmul(dst=acc, stationary=hidden_T[:, kt, b0:b0 + bb],
                               moving=w_sb[:, j, k * fmax:k * fmax + acc.shape[1]],
                               accumulate=(kt > 0))


def _chunk_count(KT, width):
    """Row chunks of a column group: at most WEIGHT_DMA_BYTES per partition each."""
    return -(-KT // max(1, min(KT, WEIGHT_DMA_BYTES // (width * BF16_BYTES))))


def _weight_chunk(W3, c0, width, i, n_chunks):
    """Row chunk i of n_chunks of columns c0 .. c0 + width - 1 (balanced: sizes differ by <= 1
    row), not issued: (its SBUF tile, its rows of W3, its first row tile)."""
    kt0, g = _chunk_rows(W3.shape[1], i, n_chunks)
    w_sb = nl.ndarray((W3.shape[0], g, width), dtype=W3.dtype, buffer=nl.sbuf)
    return (w_sb, W3[:, kt0:kt0 + g, c0:c0 + width], kt0)


def _chunk_rows(KT, i, n_chunks):
    """(first row tile, row tiles) of row chunk i of n_chunks over KT row tiles, balanced: sizes
    differ by at most one."""
    kt0 = i * KT // n_chunks
    return kt0, (i + 1) * KT // n_chunks - kt0


def _evict_banks(dst, banks):
    """Each PSUM bank of one token chunk into its columns of dst [tokens, width]."""
    fmax = nl.tile_size.psum_bank_fmax
    for k in range(len(banks)):
        evict(dst[:, k * fmax:k * fmax + banks[k].shape[1]], banks[k], k)


def _rows_group(dst, hidden_T, W3, c0, chunks):
    """One column group of `project_rows`: dst [B, width] (SBUF or HBM) = hidden @ W[:, c0:c0 +
    width]."""
    width = dst.shape[1]
    accs = _accumulate(hidden_T, W3, c0, width, chunks)
    to_hbm = nl.is_hbm(dst.buffer)
    for c in range(len(accs)):
        b0, bb = chunks[c]
        if to_hbm:
            rows = nl.ndarray((bb, width), dtype=dst.dtype, buffer=nl.sbuf)
            _evict_banks(rows, accs[c])
            nisa.dma_copy(dst=dst[b0:b0 + bb, :], src=rows)
        else:
            _evict_banks(dst[b0:b0 + bb, :], accs[c])


def _columns_evict(dst, accs, chunks, by_block=False):
    """One column group of `project_columns` out of PSUM: dst [P, nt, B] channel-major, via fp32
    row-major sums (by_block: as project_columns')."""
    P, nt, _ = dst.shape
    width = nt * P
    for c in range(len(accs)):
        b0, bb = chunks[c]
        sums = nl.ndarray((bb, width), dtype=nl.float32, buffer=nl.sbuf)     # row-major, exact
        if by_block and len(accs[c]) == 1:
            for t in range(nt):
                evict(sums[:, t * P:(t + 1) * P], accs[c][0][:, t * P:(t + 1) * P], t)
        else:
            _evict_banks(sums, accs[c])
        per_bank = nl.tile_size.psum_bank_fmax // bb       # [P, bb] fp32 transposes per bank
        for i0 in range(0, nt, per_bank):
            m = min(per_bank, nt - i0)
            ps = nl.ndarray((P, m, bb), dtype=nl.float32, buffer=nl.psum)
            for i in range(m):
                t = i0 + i
                nisa.nc_transpose(dst=ps[:, i, :], data=sums[:, t * P:(t + 1) * P],
                                  engine=nisa.engine.tensor)
            evict(dst[:, i0:i0 + m, b0:b0 + bb], ps, i0 // per_bank)


def in_proj_hbm(outs, hidden, weights):
    """The stage's HBM -> HBM body: outs[i] [B, N_i] @ HBM = hidden @ weights[i], hidden loaded
    once.

    Called by the standalone entry point (outputs in shared HBM) and by the scratch-chained fused
    kernel (HBM scratch). The rows go straight to HBM (`project_rows`): no transposes. The
    projections run last to first (b, a, z, qkv): TensorE is in order, so the narrow a and b
    projections run while the wide weights stream in, not after the last of them has arrived.
    """
    B, _, H = hidden.shape
    pmax = nl.tile_size.pmax
    hidden_T = load_hidden_T(nl.ndarray((pmax, B, H // pmax), dtype=nl.bfloat16, buffer=nl.sbuf),
                             hidden)
    for i in range(len(outs) - 1, -1, -1):
        project_rows(outs[i], hidden_T, weights[i])


@nki.jit
def in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b):
    """GDN stage 1: the four bias-free decode projections of one token batch, HBM -> HBM.

    Dimensions:
        B: batch (<= 512), H: hidden size (a multiple of 128), conv_dim = 2*key_dim + value_dim,
        value_dim = nv * dv, nv: value heads.

    Args:
        hidden: [B, 1, H] @ HBM, bf16.
        W_in_qkv: [H, conv_dim] @ HBM, bf16 (in_proj_qkv.weight.T; columns q | k | v).
        W_in_z: [H, value_dim] @ HBM, bf16.
        W_in_a: [H, nv] @ HBM, bf16.
        W_in_b: [H, nv] @ HBM, bf16.

    Returns:
        mixed_qkv [B, conv_dim], z [B, value_dim], a [B, nv], b [B, nv] @ shared HBM, bf16:
        fp32 accumulation, one rounding to bf16 (as nn.Linear in bf16).

    Notes:
        - Rejected at trace time (an assertion naming the argument): wrong ranks, hidden not
          [B, 1, H], H not a multiple of 128, B > 512, a weight whose rows are not H, W_in_b not the
          shape of W_in_a, any dtype other than bf16.
        - hidden is loaded once (load_hidden_T) and feeds all four projections; each weight
          streams from HBM exactly once (project_rows). Decode is weight-DMA bound:
          2 * H * (conv_dim + value_dim + 2*nv) bytes.
        - TensorE: (H / 128) * ceil(N / 512) matmuls per weight of N columns and chunk of 128
          tokens (hidden stationary, weight moving), no transposes: the row-major PSUM sums leave
          as rows, one contiguous DMA per column group and 128 tokens.

    Pseudocode:
        x = hidden[:, 0, :].astype(np.float32)
        mixed_qkv, z, a, b = ((x @ W.astype(np.float32)).astype(bf16)
                              for W in (W_in_qkv, W_in_z, W_in_a, W_in_b))
    """
    expect_rank(hidden, "hidden", 3)
    B, S, H = hidden.shape
    expect(S == 1, "hidden", "one decode token, shape [B, 1, H]", f"shape {list(hidden.shape)}")
    expect_multiple(H, nl.tile_size.pmax, "hidden", "hidden size H")
    expect(B <= MAX_BATCH, "hidden", f"batch B <= {MAX_BATCH} (chunks of 128 tokens, each "
                                     f"accumulating in its own PSUM bank)", B)
    expect_dtype(hidden, "hidden", nl.bfloat16)
    weights = (("W_in_qkv", W_in_qkv), ("W_in_z", W_in_z), ("W_in_a", W_in_a), ("W_in_b", W_in_b))
    for arg, W in weights:
        expect_rank(W, arg, 2)
        expect(W.shape[0] == H, arg, f"{H} rows (H of hidden), shape [H, N]",
               f"shape {list(W.shape)}")
        expect_dtype(W, arg, nl.bfloat16)
    expect(W_in_b.shape[1] == W_in_a.shape[1], "W_in_b",
           f"{W_in_a.shape[1]} columns (nv, as W_in_a)", f"shape {list(W_in_b.shape)}")

    mixed_qkv = nl.ndarray((B, W_in_qkv.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    z = nl.ndarray((B, W_in_z.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    a = nl.ndarray((B, W_in_a.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    b = nl.ndarray((B, W_in_b.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    in_proj_hbm((mixed_qkv, z, a, b), hidden, (W_in_qkv, W_in_z, W_in_a, W_in_b))
    return mixed_qkv, z, a, b
