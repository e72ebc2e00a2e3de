# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/experimental/conv/depthwise_conv1d.py
# (depthwise_conv1d_implicit_gemm) at commit d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for
# this project, not copied: the same NKI calls and idioms (implicit im2col through an HBM `.ap()`
# with partition step 1, memset(tile, 0) before partial loads, TensorE transpose of the filter
# through PSUM, per-channel [S, 1] stationary, channel sharding by nl.program_id), more compactly.
# Not mirrored: the dilation / permutation / group-count arguments the library only asserts on.
"""Depthwise 1-D convolution as one small matmul per channel over an implicitly built im2col tile."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def depthwise_conv1d_implicit_gemm(img_ref, filter_ref, padding=((0, 0), (0, 0)), stride=(1, 1),
                                   feature_group_count=1):
    """Depthwise conv1d: out[n, c, 0, q] = sum_s filter[c, 0, 0, s] * x_padded[n, c, q * stride_w + s].

    Dimensions:
        N: batch; C: channels; W: input width; S: kernel size
        Q: output width = (W + W_pad_l + W_pad_r - S) // stride_w + 1

    Args:
        img_ref (nl.ndarray): [N, C, 1, W] @ HBM.
        filter_ref (nl.ndarray): [C, 1, 1, S] @ HBM.
        padding (tuple): ((H_pad_l, H_pad_r), (W_pad_l, W_pad_r)), zero padding.
        stride (tuple): (1, stride_w).
        feature_group_count (int): must equal C (depthwise).

    Returns:
        output (nl.ndarray): [N, C, 1, Q] @ shared HBM, img_ref.dtype.

    Notes:
        - Kernel taps go on partitions, S_TILE = min(S, 128) at a time; a channel's output is the
          [S_TILE, 1] x [S_TILE, Q] matmul accumulated over S tiles in a [1, Q] fp32 PSUM row.
        - Row s of the input tile holds x_padded[s_start + s + q * stride_w] for every q: one DMA
          whose HBM pattern has partition step 1 (rows overlap), none of im2col's S x Q copy.
        - Launched as kernel[2] (LNC=2), each core convolves half the channels.

    Pseudocode:
        xp = pad(x, W_pad_l, W_pad_r)
        out[n, c, 0, q] = sum(filter[c, 0, 0, :] * xp[n, c, 0, q * stride_w : q * stride_w + S])
    """
    _, (pad_l, pad_r) = padding
    stride_h, stride_w = stride
    assert stride_h == 1, f"only stride_h=1 is supported, got {stride_h}"
    N, C, _, W = img_ref.shape
    S = filter_ref.shape[3]
    assert feature_group_count == C, f"depthwise only: feature_group_count must be C={C}, got {feature_group_count}"
    Q = (W + pad_l + pad_r - S) // stride_w + 1

    P_MAX, F_MAX = nl.tile_size.pmax, nl.tile_size.psum_fmax
    S_TILE, Q_TILE = min(S, P_MAX), min(Q, F_MAX)
    num_shards = nl.num_programs()
    c_per_shard = C // num_shards
    C_TILE = min(c_per_shard, P_MAX)
    num_s_tiles, num_q_tiles, num_c_tiles = -(-S // S_TILE), -(-Q // Q_TILE), -(-c_per_shard // C_TILE)
    shard_id = nl.program_id(axis=0)

    output = nl.ndarray((N, C, 1, Q), dtype=img_ref.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N):
        for c_tile in nl.affine_range(num_c_tiles):
            c_start = c_tile * C_TILE
            c_size = min(C_TILE, c_per_shard - c_start)
            c_global = shard_id * c_per_shard + c_start
            filters = []
            for st in nl.affine_range(num_s_tiles):
                s_start = st * S_TILE
                s_size = min(S_TILE, S - s_start)
                filters.append(_load_filter_tile(filter_ref, c_global, c_size, C_TILE, s_start, s_size,
                                                 S_TILE))
            for ch in nl.affine_range(c_size):
                row = (n * C + c_global + ch) * W
                inputs = []
                for st in nl.affine_range(num_s_tiles):
                    s_start = st * S_TILE
                    s_size = min(S_TILE, S - s_start)
                    inputs.append(_load_input_tile(img_ref, row, s_start, s_size, S_TILE, Q, pad_l,
                                                   stride_w))
                for q_tile in nl.affine_range(num_q_tiles):
                    q_start = q_tile * Q_TILE
                    q_size = min(Q_TILE, Q - q_start)
                    result_psum = nl.ndarray((1, Q_TILE), dtype=nl.float32, buffer=nl.psum)
                    nisa.memset(result_psum, 0)
                    for st in nl.sequential_range(num_s_tiles):
                        s_size = min(S_TILE, S - st * S_TILE)
                        nisa.nc_matmul(dst=result_psum[0:1, 0:q_size], stationary=filters[st][0:s_size, ch:ch + 1],
                                       moving=inputs[st][0:s_size, q_start:q_start + q_size])
                    result_sbuf = nl.ndarray((1, Q_TILE), dtype=output.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=result_sbuf[0:1, 0:q_size], src=result_psum[0:1, 0:q_size])
                    out_offset = (n * C + c_global + ch) * Q + q_start
                    nisa.dma_copy(dst=output.ap(pattern=[[1, 1], [1, q_size]], offset=out_offset),
                                  src=result_sbuf[0:1, 0:q_size])
    return output


def _load_filter_tile(filter_ref, c_start, c_size, C_TILE, s_start, s_size, S_TILE):
    """filter[c_start : c_start + c_size, s_start : s_start + s_size] transposed to taps-on-partitions
    [S_TILE, C_TILE], zero where the tile is partial."""
    S = filter_ref.shape[3]
    partial = c_size < C_TILE or s_size < S_TILE
    filter_tmp = nl.ndarray((C_TILE, S_TILE), dtype=filter_ref.dtype, buffer=nl.sbuf)
    if partial:
        nisa.memset(filter_tmp, 0)
    nisa.dma_copy(dst=filter_tmp[0:c_size, 0:s_size],
                  src=filter_ref.ap(pattern=[[S, c_size], [1, s_size]], offset=s_start + c_start * S))
    filter_psum = nl.ndarray((S_TILE, C_TILE), dtype=filter_ref.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=filter_psum[0:s_size, 0:c_size], data=filter_tmp[0:c_size, 0:s_size])
    filter_tile = nl.ndarray((S_TILE, C_TILE), dtype=filter_ref.dtype, buffer=nl.sbuf)
    if partial:
        nisa.memset(filter_tile, 0)
    nisa.tensor_copy(dst=filter_tile[0:s_size, 0:c_size], src=filter_psum[0:s_size, 0:c_size])
    return filter_tile


def _load_input_tile(img_ref, row, s_start, s_size, S_TILE, Q, pad_l, stride_w):
    """[S_TILE, Q] tile with tile[s, q] = x_padded[s_start + s + q * stride_w] of one channel's row."""
    W = img_ref.shape[3]
    tile = nl.ndarray((S_TILE, Q), dtype=img_ref.dtype, buffer=nl.sbuf)
    full = []   # the columns whose rows all fall inside the unpadded input: a contiguous run
    for q in range(Q):
        if _valid_rows(q, s_start, s_size, stride_w, pad_l, W) == (0, s_size):
            full.append(q)
    if len(full) < Q or s_size < S_TILE:
        nisa.memset(tile, 0)
    if full:
        q0, nq = full[0], len(full)
        first = row + s_start + q0 * stride_w - pad_l
        if len(full) < Q or stride_w == 1:
            nisa.dma_copy(dst=tile[0:s_size, q0:q0 + nq],
                          src=img_ref.ap(pattern=[[1, s_size], [stride_w, nq]], offset=first), dge_mode=nisa.dge_mode.none)
        else:
            # Unpadded tile with stride > 1: one contiguous load per row, then an on-chip strided copy.
            bulk = (Q - 1) * stride_w + 1
            input_bulk = nl.ndarray((S_TILE, bulk), dtype=img_ref.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=input_bulk[0:s_size, 0:bulk],
                          src=img_ref.ap(pattern=[[1, s_size], [1, bulk]], offset=first), dge_mode=nisa.dge_mode.none)
            nisa.tensor_copy(dst=tile[0:s_size, 0:Q], src=input_bulk.ap(pattern=[[bulk, s_size], [stride_w, Q]]))
    for q in range(Q):
        lo, hi = _valid_rows(q, s_start, s_size, stride_w, pad_l, W)
        if q not in full and lo < hi:   # a column cut by the padding: its valid rows only
            nisa.dma_copy(dst=tile[lo:hi, q], src=img_ref.ap(pattern=[[1, hi - lo], [1, 1]],
                                                             offset=row + s_start + lo + q * stride_w - pad_l),
                          dge_mode=nisa.dge_mode.none)
    return tile


def _valid_rows(q, s_start, s_size, stride_w, pad_l, W):
    """The rows [lo, hi) of column q of an input tile that fall inside the unpadded input."""
    pos = s_start + q * stride_w - pad_l
    return max(0, -pos), min(s_size, W - pos)
