"""The layer's out_proj on chip: the gated norm's output times this rank's rows of W_out.

y leaves the gated norm channel-major, [dv, nh, N]: a value head's channels on partitions. That is
the stationary operand as it stands: head h's [dv, tokens] block times W_out's rows of head h
([dv, <= 512 columns], moving) accumulates over the heads in PSUM, and the sums come out
row-major, [tokens, H], the layout of the partial sum in HBM (in_proj's project_rows, with the
heads as the contraction tiles). The weight streams in chunks of in_proj's size; the first ones,
as many as the plan's budget holds, are allocated early so that their DMAs can be issued behind
the in_proj weights and land while the recurrence computes.

On an LNC=2 grid each program sums its own heads over every column, and the two partial sums are
added through shared HBM: each program first stores the half of the columns the other owns, then
a core barrier, then each reads the other's contribution to its own half, adds and stores it.
"""
import nki.isa as nisa
import nki.language as nl

from .in_proj import (BF16_BYTES, _chunk_count, _chunk_matmuls, _evict_banks, _group_columns,
                      _new_accs, _token_chunks, _weight_chunk, issue_loads)


class OutProj(nl.NKIObject):
    """W_out's chunks in the order out_proj uses them, the first ones allocated ahead.

    Fields:
        W3: W_out as [dv, nh, H], this program's heads: W3[d, h, c] = W_out[(h0 + h) * dv + d, c].
        chunks: the token chunks (first column, columns) of at most 128, the stationary's size.
        programs, half, own0: the launch grid's programs, the columns each owns (H / programs)
            and this program's first.
        groups: (first column, columns) of each column group, in order: at most in_proj's
            ACC_BANKS PSUM banks over every token chunk; on an LNC=2 grid the other program's half
            of the columns first, then this program's (no group crosses the middle).
        counts: the weight chunks of each group (in_proj._chunk_count: at most WEIGHT_DMA_BYTES
            per partition each).
        ahead: the loads (SBUF tile, HBM rows, first head) allocated now, the first chunks of
            the stream whose bytes fit `ahead_bytes` per partition; the caller issues them.
    """

    def __init__(self, W_out, h0, nh, dv, N, ahead_bytes):
        H = W_out.shape[1]
        self.W3 = W_out.reshape((W_out.shape[0] // dv, dv, H)).permute((1, 0, 2))[:, h0:h0 + nh]
        self.chunks = _token_chunks(N)
        self.programs = nl.num_programs(axes=0)
        self.half = H // self.programs
        self.own0 = 0
        if self.programs > 1:
            self.own0 = nl.program_id(axis=0) * self.half
        width = _group_columns(N, 1)
        self.groups = []
        self.counts = []
        starts = [self.own0]
        if self.programs > 1:
            starts = [self.half - self.own0, self.own0]     # the other program's half first
        for i in range(len(starts)):
            for c0 in range(starts[i], starts[i] + self.half, width):
                w = min(width, starts[i] + self.half - c0)
                self.groups.append((c0, w))
                self.counts.append(_chunk_count(nh, w))
        self.ahead = []
        room = ahead_bytes
        for g in range(len(self.groups)):
            c0, w = self.groups[g]
            for j in range(self.counts[g]):
                size = _chunk_bytes(nh, w, j, self.counts[g])
                if size <= room:                     # in stream order: none after one that misses
                    self.ahead.append(_weight_chunk(self.W3, c0, w, j, self.counts[g]))
                    room -= size
                else:
                    room = -1


def _chunk_bytes(nh, width, j, n_chunks):
    """Bytes per partition of weight chunk j of a group: its heads times width bf16 columns."""
    return ((j + 1) * nh // n_chunks - j * nh // n_chunks) * width * BF16_BYTES


def out_proj(partial, y, op, queue=None):
    """partial = y @ W_out over this program's heads, summed over the programs of the grid.

    Dimensions:
        dv: head_v_dim (partitions); nh: this program's value heads; N: token columns (B * T);
        H: hidden size.

    Args:
        partial (nl.ndarray): [N, H] @ shared HBM, fp32, written (on an LNC=2 grid, both
            programs' sum; each program writes the other's half once before the core barrier).
        y (nl.ndarray): [dv, nh, N] @ SBUF, bf16, the gated norm's output, channel-major.
        op (OutProj): the weight stream, its `ahead` loads issued by the caller.
        queue: optional, the engine whose hardware-DGE queue carries the rest of the weight DMAs.

    Returns:
        None; partial holds the sums.

    Notes:
        - Head h's [dv, <= 128 tokens] block is the stationary operand, W_out's rows of head h
          the moving one ([dv, <= 512]); the heads accumulate in one fp32 PSUM bank per 512
          columns and token chunk, evicted exactly (fp32) and stored as rows.
        - A padding row of y (all 0) gives a partial row of exact zeros.

    Pseudocode:
        sums = y.reshape(dv * nh, N).T @ W_out[h0 * dv:(h0 + nh) * dv]       # fp32 [N, H]
        partial[...] = sums + (the other program's sums)                     # LNC=2
    """
    next_ahead = 0
    own = []                 # on a grid, this program's half: (first column, first row, rows)
    for g in range(len(op.groups)):
        c0, width = op.groups[g]
        accs = _new_accs(op.chunks, width)
        for j in range(op.counts[g]):
            if next_ahead < len(op.ahead):
                load = op.ahead[next_ahead]
                next_ahead += 1
            else:
                load = _weight_chunk(op.W3, c0, width, j, op.counts[g])
                issue_loads([load], queue)
            _chunk_matmuls(accs, y, load, op.chunks)
        mine = op.programs > 1 and op.own0 <= c0 < op.own0 + op.half
        for c in range(len(op.chunks)):
            b0, bb = op.chunks[c]
            rows = nl.ndarray((bb, width), nl.float32, name="out_proj_rows")
            _evict_banks(rows, accs[c])
            if mine:
                own.append((c0, b0, rows))
            else:
                nisa.dma_copy(dst=partial[b0:b0 + bb, c0:c0 + width], src=rows)
    if op.programs > 1:
        _add_other_half(partial, own)


def _add_other_half(partial, own):
    """After the core barrier, this program's half of partial: its own sums (own: (first column,
    first row, SBUF rows)) plus the other program's, which it stored there before the barrier."""
    nisa.core_barrier(partial, (0, 1))
    for i in range(len(own)):
        c0, b0, rows = own[i]
        bb, width = rows.shape
        theirs = nl.ndarray((bb, width), nl.float32, name="out_proj_theirs")
        nisa.dma_copy(dst=theirs, src=partial[b0:b0 + bb, c0:c0 + width])
        total = nl.ndarray((bb, width), nl.float32, name="out_proj_total")
        nisa.tensor_tensor(total, rows, theirs, op=nl.add)
        nisa.dma_copy(dst=partial[b0:b0 + bb, c0:c0 + width], src=total)
