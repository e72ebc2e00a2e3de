"""The pool form's slots: which row of a persistent state pool each sequence reads and each of its
tokens writes, as the DMAs' runtime offsets.

A serving engine keeps the conv windows and recurrent states of every live request in two pools,
[N, conv_dim, K] and [N, nv, dk, dv], and hands the decode step a slot per sequence
(read_indices [B]) and per token (write_indices [B, T]). Nothing about a slot is known when the
kernel is traced, so every pool access is a DMA whose row offset is read from SBUF when it runs
(the dma_copy docs, "Indirect addressing"):
  * a state row (nh heads of 64 KiB) moves in today's pieces, one DMA per piece of one sequence's
    row, its slot a 1x1 `scalar_offset` (either DGE; no DMA spans two slots);
  * the conv window rows (a few KiB each) move as today, one row per partition for up to 128
    sequences in one DMA, their slots a [rows, 1] `vector_offset` (the software DGE); one
    sequence's row moves in pieces by a scalar offset, as load_channel_major cuts it.
A negative index (a padding row; a draft token whose checkpoint is not kept) becomes N, one past
the pool, and the DGE's bounds check skips that transfer (`oob_mode.skip`). Why the DGE's skip: a
kernel cannot branch on a value it reads at run time, so a per-row predicate would still need a
slot to read and write. A scalar-offset DMA moves one slot, all or nothing. A window DMA may mix
live and skipped rows, as the NKI library's block KV-cache update does (a dma_copy scatter with
oob_mode.skip, nkilib experimental/transformer/attention_block_tkg.py); the open report of a
device abort with skip and mixed indices (github.com/aws-neuron/aws-neuron-sdk/issues/1390)
concerns an indirect dma_transpose, which this kernel does not use.
The offsets are loaded once, ahead of the weights.
"""
import nki.isa as nisa
import nki.language as nl


class Slots(nl.NKIObject):
    """One launch's slots, on chip, and which pool rows' channels this program writes.

    Fields:
        read, write: [1, B] and [1, B, T] int32 @ SBUF, the scalar offsets of each sequence's
            read slot and of its tokens' write slots (a negative index made N).
        read_rows, write_rows: [B, 1] and [B, T] int32 @ SBUF, the same as vector offsets, one
            sequence per partition (None where B = 1: one sequence's window moves by scalar
            offsets, layout.gather_channel_major).
        live: [dv, B] uint8 @ SBUF, 1 where the row is a sequence (a read slot in the pool), for
            the select that zeroes a padding row's output.
        key_dim: channels of q (and of k) in a window row.
        own_k0: the first key head whose q and k window channels this program writes: on an LNC
            grid, a key head whose value heads two programs share is read by both and written
            by the first.
        barrier: whether the programs share a key head (then every program calls the barrier
            that orders both reads of its window before the write, conv1d_decode.conv_groups).
    """

    def __init__(self, read_indices, write_indices, N, p):
        B, T = write_indices.shape
        self.read = _offsets((1, B), read_indices.reshape((1, B)), N, "read")
        self.write = _offsets((1, B, T), write_indices.reshape((1, B, T)), N, "write")
        self.read_rows, self.write_rows = None, None
        if B > 1:
            self.read_rows = _offsets((B, 1), read_indices.reshape((B, 1)), N, "read_rows")
            self.write_rows = _offsets((B, T), write_indices, N, "write_rows")
        # live: read slot < N, as a row, on dv partitions by a K = 1 matmul (no DMA)
        row = nl.ndarray((1, B), nl.float32, name="live_row")
        nisa.tensor_scalar(row, self.read, op0=nl.less, operand0=N)
        ones = nl.ndarray((1, p.dv), nl.float32, name="ones_dv")
        nisa.memset(ones, 1.0)
        live_ps = nl.ndarray((p.dv, B), nl.float32, buffer=nl.psum, name="live_psum")
        nisa.nc_matmul(live_ps, ones, row, is_stationary_onezero=True)
        self.live = nl.ndarray((p.dv, B), nl.uint8, name="live")
        nisa.tensor_copy(self.live, live_ps)
        self.key_dim = p.key_dim
        self.own_k0 = -(-p.h0 // p.G)
        self.barrier = nl.num_programs(axes=0) > 1 and p.nh % p.G != 0


def _offsets(shape, src, N, name):
    """src (int32 @ HBM) in a new SBUF tile of `shape`, every negative index made N: max(i, N * (i
    < 0)), two VectorE instructions, exact in int32. The DMA goes on ScalarE's hardware-DGE queue,
    which nothing else in the step uses, so that it shifts no other DMA's queue."""
    raw = nl.ndarray(shape, nl.int32, name=name + "_raw")
    nisa.dma_copy(raw, src, dge_mode=nisa.dge_mode.hwdge, engine=nisa.engine.scalar)
    past = nl.ndarray(shape, nl.int32, name=name + "_past")
    nisa.tensor_scalar(past, raw, op0=nl.less, operand0=0, op1=nl.multiply, operand1=N)
    t = nl.ndarray(shape, nl.int32, name=name)
    nisa.tensor_tensor(t, raw, past, op=nl.maximum)
    return t


class PoolRows(nl.NKIObject):
    """Heads h0 .. h0 + nh - 1 of B rows of a state pool [N, nv, dk, dv] @ HBM, row b at the slot
    offsets[0, b] ([1, B] int32 @ SBUF): what a state tensor [B, nh, dk, dv] is to the seed form.

    Fields: pool, offsets, h0; shape (B, nh, dk, dv) and dtype, as a tensor's."""

    def __init__(self, pool, offsets, h0, nh):
        self.pool = pool
        self.offsets = offsets
        self.h0 = h0
        self.shape = (offsets.shape[1], nh, pool.shape[2], pool.shape[3])
        self.dtype = pool.dtype

    def heads(self, b, h, n):
        """Heads h .. h + n - 1 (of this view) of row b as [dk, n, dv]: one slot, a scalar
        offset."""
        dk, dv = self.pool.shape[2], self.pool.shape[3]
        return self.pool.ap([[dv, dk], [dk * dv, n], [1, dv]], offset=(self.h0 + h) * dk * dv,
                            scalar_offset=self.offsets[0:1, b:b + 1], indirect_dim=0)


def zero_padding(y, slots):
    """The columns of padding rows of y [P, nh, B * T] @ SBUF (P <= dv) set to exactly 0: a select
    (VectorE), since a skipped gather leaves undefined values (NaN among them) that a multiply by
    a mask would keep."""
    P, nh, N = y.shape
    B = slots.live.shape[1]
    mask = slots.live[0:P].expand_dim(1).broadcast(1, nh).expand_dim(3).broadcast(3, N // B)
    nisa.tensor_copy_predicated(y.reshape_dim(2, (B, N // B)), 0.0, mask, reverse_pred=True)
