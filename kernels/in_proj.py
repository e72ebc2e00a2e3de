"""Stage 1, in_proj: the four decode projections of a GDN layer, hidden @ W_in_{qkv,z,a,b}.

Building blocks (plain functions the fused kernel calls):
  load_hidden_T(dst, hidden)               hidden [B, 1, H] @ HBM -> SBUF, H on partitions
  project_columns(dst, hidden_T, W, col0)  a range of output channels of hidden @ W, channel-major
Entry point:
  in_proj_kernel(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b) -> mixed_qkv, z, a, b   (HBM -> HBM)

The weight block is the stationary matmul operand and hidden^T [128, B] the moving one, so every
matmul writes a channel-major [channels, B] PSUM tile: the project's on-chip layout, the one the
conv1d and the per-head stages read. Decode projections are bound by the weight stream from HBM;
the weights are read once, in large contiguous DMAs, through a bounded set of SBUF buffers.
"""
import nki
import nki.isa as nisa
import nki.language as nl

from .checks import expect, expect_dtype, expect_multiple, expect_rank
from .layout import load_channel_major, store_rows

P_MAX = 128                    # partitions; also the contraction tile of one matmul
PSUM_BANK_FP32 = 512           # fp32 elements per partition in one 2 KiB PSUM bank
WEIGHT_DMA_BYTES = 16 * 1024   # at most this many bytes per partition in one weight DMA (2 MiB per DMA)
ACC_BANKS = 2                  # PSUM banks one column group accumulates in (the scheduler may hold 2 groups)
BF16_BYTES = 2


def load_hidden_T(dst, hidden):
    """Load the decode token's hidden state once, with H on the partitions.

    Dimensions:
        B: batch (decode sequences), H: hidden size (a multiple of 128), KT = H // 128.

    Args:
        dst: [128, B, KT] @ SBUF, bf16 -- written: dst[p, b, kt] = hidden[b, 0, p * KT + kt].
        hidden: [B, 1, H] @ HBM, bf16.

    Returns:
        hidden_T: the [128, KT, B] view dst.permute((0, 2, 1)), the moving operand layout that
        `project_columns` takes (contraction tile kt is hidden_T[:, kt, :], one [128, B] tile).

    Notes:
        - Partition p holds the KT consecutive hidden features p*KT .. p*KT + KT - 1 (h = p*KT + kt),
          so a weight row block for one partition is a run of KT consecutive weight rows (see
          `project_columns`).
        - hidden moves as rows (kernels.layout.load_channel_major on the view [B, 128, KT]): one
          DMA per 128 tokens, a contiguous H * 2 bytes per partition, then KT TensorE transposes
          of [B, 128] (every KT-th element of the rows: features p*KT + kt) into PSUM, evicted by
          one tensor_copy per bank (1024 // B transposes per bank). A DMA straight into
          [128, B, KT] would move B * 128 runs of KT * 2 bytes (80 B at H = 5120), each a DMA
          descriptor.

    Pseudocode:
        dst[p, b, kt] = hidden[b, 0, p * KT + kt]
    """
    B, _, H = hidden.shape
    KT = H // P_MAX
    # Rows [B, 128, KT] (feature p*KT + kt of token b at [b, p, kt]) into dst viewed as [128, 1, B, KT].
    load_channel_major(dst.expand_dim(1), hidden.reshape((B, P_MAX, KT)))
    return dst.permute((0, 2, 1))


def project_columns(dst, hidden_T, W, col0=0):
    """Project the token batch onto a range of W's output channels, channel-major on chip.

    Dimensions:
        B: batch (<= 512), H = 128 * KT: hidden size, N: W's output channels,
        P: channels per tile (dst partitions, <= 128), T: tiles, so columns col0 .. col0 + T*P - 1.

    Args:
        dst: [P, T, B] or [P, B] (T = 1) @ SBUF, bf16 (any float dtype) -- written:
            dst[p, t, b] = (hidden @ W)[b, col0 + t*P + p], summed in fp32, rounded once.
        hidden_T: [128, KT, B] @ SBUF, bf16 -- hidden_T[p, kt, b] = hidden[b, p*KT + kt], e.g. the
            view `load_hidden_T` returns. Any free-dim strides.
        W: [H, N] @ HBM, bf16 -- the weight in checkpoint layout (nn.Linear weight transposed).
        col0: first output channel (a Python int).

    Returns:
        None; dst holds the projection.

    Notes:
        - Weight block stationary ([128 rows of H, P channels]), hidden_T[:, kt, :] moving
          ([128, B]): each nc_matmul writes a [P, B] PSUM tile, channels on partitions. The H/128
          contraction tiles accumulate in fp32 PSUM (accumulate=False on the first, True after).
        - Columns go in groups whose fp32 accumulators fit ACC_BANKS PSUM banks ([P, 512 // B
          tiles, B] per bank) and whose row slice fits WEIGHT_DMA_BYTES. A group streams its
          columns in balanced row chunks [128, g, width] of at most WEIGHT_DMA_BYTES per
          partition (g consecutive rows h = p*KT + kt): one contiguous HBM run per partition when
          the group spans all of W's columns, else g runs of width * 2 bytes.
        - Each chunk buffer is allocated inside the loop, so the scheduler can load the next chunk
          while TensorE consumes this one.
        - For the fused kernel: per head, call with dst [dk, n_heads, B] and col0 at the first
          head's channel (P = dk); for a / b, dst [nv, B]. Narrow column ranges give shorter
          weight runs (P * 2 bytes per row); project whole weights where the layout allows.

    Pseudocode:
        acc = np.zeros((P, T, B), np.float32)
        for kt in range(KT):
            rows = [p * KT + kt for p in range(128)]
            for t in range(T):
                cols = slice(col0 + t * P, col0 + (t + 1) * P)
                acc[:, t, :] += W[rows, cols].T @ hidden_T[:, kt, :]
        dst[...] = acc.astype(bf16)
    """
    if len(dst.shape) == 2:
        dst = dst.expand_dim(1)
    P, T, B = dst.shape
    H, N = W.shape
    KT = H // P_MAX
    expect(H % P_MAX == 0 and hidden_T.shape[0] == P_MAX and hidden_T.shape[1] == KT, "hidden_T",
           f"shape [128, H/128, B] for W's H = {H}", list(hidden_T.shape))
    expect(hidden_T.shape[2] == B, "dst", f"batch {hidden_T.shape[2]} (of hidden_T) in its last dim",
           list(dst.shape))
    expect(P <= P_MAX, "dst", f"at most {P_MAX} partitions (channels per tile)", P)
    expect(0 <= col0 and col0 + T * P <= N, "col0",
           f"columns col0 .. col0 + {T}*{P} inside W's {N} columns", col0)
    expect(B <= PSUM_BANK_FP32, "dst", f"batch B <= {PSUM_BANK_FP32} (the matmul moving free size)", B)

    W3 = W.reshape((P_MAX, KT, N))                # W3[p, kt, n] = W[p*KT + kt, n]
    tiles_per_bank = PSUM_BANK_FP32 // B
    group_tiles = min(T, ACC_BANKS * tiles_per_bank, max(1, WEIGHT_DMA_BYTES // (P * BF16_BYTES)))
    for t0 in range(0, T, group_tiles):
        nt = min(group_tiles, T - t0)
        c0 = col0 + t0 * P
        width = nt * P
        # fp32 accumulators of this column group, one PSUM bank each: [P, <= tiles_per_bank, B].
        accs = []
        for b0 in range(0, nt, tiles_per_bank):
            accs.append(nl.ndarray((P, min(tiles_per_bank, nt - b0), B), dtype=nl.float32, buffer=nl.psum))
        # Row chunks of at most WEIGHT_DMA_BYTES per partition, balanced (sizes differ by <= 1 row).
        n_chunks = -(-KT // max(1, min(KT, WEIGHT_DMA_BYTES // (width * BF16_BYTES))))
        for i in range(n_chunks):
            kt0 = i * KT // n_chunks
            g = (i + 1) * KT // n_chunks - kt0
            w_sb = nl.ndarray((P_MAX, g, width), dtype=W.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=w_sb, src=W3[:, kt0:kt0 + g, c0:c0 + width])
            for j in range(g):
                kt = kt0 + j
                for t in range(nt):
                    acc = accs[t // tiles_per_bank]
                    nisa.nc_matmul(dst=acc[:, t % tiles_per_bank, :],
                                   stationary=w_sb[:, j, t * P:(t + 1) * P],
                                   moving=hidden_T[:, kt, :],
                                   accumulate=(kt > 0))
        # Evict: one PSUM -> SBUF copy per bank, rounding the fp32 sums to dst's dtype once.
        for i, acc in enumerate(accs):
            tb = t0 + i * tiles_per_bank
            nisa.tensor_copy(dst=dst[:, tb:tb + acc.shape[1], :], src=acc)


def in_proj_hbm(outs, hidden, weights):
    """The stage's HBM -> HBM body: outs[i] [B, N_i] @ HBM = hidden @ weights[i], hidden loaded once.

    Called by the standalone entry point (outputs in shared HBM) and by the reference-design fused
    kernel (HBM scratch).
    """
    B, _, H = hidden.shape
    hidden_T = load_hidden_T(nl.ndarray((P_MAX, B, H // P_MAX), dtype=nl.bfloat16, buffer=nl.sbuf), hidden)
    for out, W in zip(outs, weights):
        _project_to_hbm(out, hidden_T, W)


def _project_to_hbm(out, hidden_T, W):
    """Entry-point helper: out [B, N] @ HBM = hidden @ W, via 128-channel tiles and a tail tile.

    The channel-major tiles leave as rows (`store_rows`: TensorE transposes, contiguous row DMAs).
    """
    B, N = out.shape
    full, tail = N // P_MAX, N % P_MAX
    if full > 0:
        tiles = nl.ndarray((P_MAX, full, B), dtype=nl.bfloat16, buffer=nl.sbuf)
        project_columns(tiles, hidden_T, W, col0=0)
        store_rows(out[:, 0:full * P_MAX], tiles)
    if tail > 0:
        last = nl.ndarray((tail, B), dtype=nl.bfloat16, buffer=nl.sbuf)
        project_columns(last, hidden_T, W, col0=full * P_MAX)
        store_rows(out[:, full * P_MAX:N], last)


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
        - Rejected at trace time (ValueError naming the argument): wrong ranks, hidden not
          [B, 1, H], H not a multiple of 128, B > 512, a weight whose rows are not H, W_in_b not the
          shape of W_in_a, any dtype other than bf16.
        - hidden is loaded once (load_hidden_T) and feeds all four projections; each weight
          streams from HBM exactly once (project_columns). Decode is weight-DMA bound:
          2 * H * (conv_dim + value_dim + 2*nv) bytes.
        - On chip the results are channel-major [channels, B]; they leave as rows
          (kernels.layout.store_rows: TensorE transposes, one eviction per PSUM bank, one
          contiguous row DMA per output and 128 tokens; a store through a transposing HBM view
          would move 2-byte elements, one DMA descriptor each).

    Pseudocode:
        x = hidden[:, 0, :].astype(np.float32)
        mixed_qkv, z, a, b = ((x @ W.astype(np.float32)).astype(bf16)
                              for W in (W_in_qkv, W_in_z, W_in_a, W_in_b))
    """
    expect_rank(hidden, "hidden", 3)
    B, S, H = hidden.shape
    expect(S == 1, "hidden", "one decode token, shape [B, 1, H]", f"shape {list(hidden.shape)}")
    expect_multiple(H, P_MAX, "hidden", "hidden size H")
    expect(B <= PSUM_BANK_FP32, "hidden", f"batch B <= {PSUM_BANK_FP32} (the matmul moving free size)", B)
    expect_dtype(hidden, "hidden", nl.bfloat16)
    weights = (("W_in_qkv", W_in_qkv), ("W_in_z", W_in_z), ("W_in_a", W_in_a), ("W_in_b", W_in_b))
    for arg, W in weights:
        expect_rank(W, arg, 2)
        expect(W.shape[0] == H, arg, f"{H} rows (H of hidden), shape [H, N]", f"shape {list(W.shape)}")
        expect_dtype(W, arg, nl.bfloat16)
    expect(W_in_b.shape[1] == W_in_a.shape[1], "W_in_b", f"{W_in_a.shape[1]} columns (nv, as W_in_a)",
           f"shape {list(W_in_b.shape)}")

    outs = tuple(nl.ndarray((B, W.shape[1]), dtype=nl.bfloat16, buffer=nl.shared_hbm) for _, W in weights)
    in_proj_hbm(outs, hidden, tuple(W for _, W in weights))
    mixed_qkv, z, a, b = outs
    return mixed_qkv, z, a, b
