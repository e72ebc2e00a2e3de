# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/core/embeddings/rope_hf.py (reference math:
# rope_hf_torch.py) at commit d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for this project,
# not copied: the same NKI calls, positional dma_copy(dst, src), HBM `.ap()` patterns that coalesce
# sequence tiles and the packed cos/sin cache, and output buffers passed in and returned.
"""Rotary position embedding for the HuggingFace layout [batch, heads, seq, head_dim]."""
import nki
import nki.isa as nisa
import nki.language as nl

NUM_COALESCE_TILES = 8     # rope_hf: sequence tiles of 128 loaded by one DMA


@nki.jit
def rope_hf(q, k, q_out, k_out, cos=None, sin=None, rope_cache=None, backward=False):
    """Apply RoPE to q and k, writing q_out and k_out and returning them.

    Dimensions:
        B: batch; Hq, Hk: query and key heads; S: sequence (a multiple of 128 * lnc); D: head_dim

    Args:
        q (nl.ndarray): [B, Hq, S, D] @ HBM.
        k (nl.ndarray): [B, Hk, S, D] @ HBM.
        q_out, k_out (nl.ndarray): like q and k @ HBM, written and returned (aliased outputs).
        cos, sin (nl.ndarray): [(B,) S, D] @ HBM, or None when rope_cache is given.
        rope_cache (nl.ndarray): [(B,) S, 2 * D] @ HBM, cos in the first half, sin in the second.
        backward (bool): apply the transposed rotation (the gradient of the forward one).

    Returns:
        (q_out, k_out).

    Notes:
        - Sequence tiles go on partitions; up to 8 tiles of one head travel in one DMA, as
          [128, tiles, D], through an HBM access pattern.
        - With a launch grid (LNC=2) each core takes a contiguous half of the sequence.

    Pseudocode:
        rot(x) = concat(-x[..., D/2:], x[..., :D/2])       # backward: concat(x[..., D/2:], -x[..., :D/2])
        forward:  out = x * cos + rot(x) * sin
        backward: out = x * cos + rot_backward(x * sin)
    """
    lnc, shard_id = (nl.num_programs(axes=0), nl.program_id(axis=0)) if nl.program_ndim() != 0 else (1, 0)
    assert len(q.shape) == 4 and q.shape[-1] == k.shape[-1], f"q, k must be [B, heads, S, D], got {q.shape}, {k.shape}"
    packed = rope_cache != None  # noqa: E711  NKI 0.3.0 rejects `is` / `is not` in kernels
    table = rope_cache if packed else cos
    batch_size, _, seq_len, head_dim = q.shape
    assert seq_len % (nl.tile_size.pmax * lnc) == 0, f"seq_len must be a multiple of 128 * {lnc}, got {seq_len}"
    assert table.shape[-1] == (2 if packed else 1) * head_dim, \
        f"rope table last dim {table.shape[-1]} does not match head_dim {head_dim} (packed={packed})"

    seq_per_shard = seq_len // lnc
    seq_tile = min(nl.tile_size.pmax, seq_per_shard)
    num_seq_tiles = -(-seq_per_shard // seq_tile)
    rope_seq_len, rope_dim = table.shape[-2:]
    for b in range(batch_size):
        for tile0 in range(0, num_seq_tiles, NUM_COALESCE_TILES):
            num_tiles = min(NUM_COALESCE_TILES, num_seq_tiles - tile0)
            seq_start = shard_id * seq_per_shard + tile0 * seq_tile
            # [seq_tile partitions, num_tiles, head_dim]: row s of tile t is sequence seq_start + t * 128 + s.
            pattern = [[rope_dim, seq_tile], [seq_tile * rope_dim, num_tiles], [1, head_dim]]
            base = (b if len(table.shape) == 3 else 0) * rope_seq_len * rope_dim + seq_start * rope_dim
            cos_tile = nl.ndarray((seq_tile, num_tiles, head_dim), dtype=q.dtype, buffer=nl.sbuf)
            sin_tile = nl.ndarray((seq_tile, num_tiles, head_dim), dtype=q.dtype, buffer=nl.sbuf)
            if packed:
                nisa.dma_copy(cos_tile, rope_cache.ap(pattern=pattern, offset=base))
                nisa.dma_copy(sin_tile, rope_cache.ap(pattern=pattern, offset=base + head_dim))
            else:
                nisa.dma_copy(cos_tile, cos.ap(pattern=pattern, offset=base))
                nisa.dma_copy(sin_tile, sin.ap(pattern=pattern, offset=base))
            _rope_all_heads(q, q_out, cos_tile, sin_tile, b, seq_start, backward)
            _rope_all_heads(k, k_out, cos_tile, sin_tile, b, seq_start, backward)
    return q_out, k_out


def _rope_all_heads(x, x_out, cos_tile, sin_tile, b, seq_start, backward):
    seq_tile, num_tiles, head_dim = cos_tile.shape
    _, num_heads, seq_len, _ = x.shape
    pattern = [[head_dim, seq_tile], [seq_tile * head_dim, num_tiles], [1, head_dim]]
    for h in range(num_heads):
        offset = (b * num_heads + h) * seq_len * head_dim + seq_start * head_dim
        x_tile = nl.ndarray((seq_tile, num_tiles, head_dim), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(x_tile, x.ap(pattern=pattern, offset=offset))
        rotated = _rope_single(x_tile, cos_tile, sin_tile, backward)
        nisa.dma_copy(x_out.ap(pattern=pattern, offset=offset), rotated)


def _rope_single(x, cos, sin, backward):
    """[x1, x2] * cos + [-x2 * sin1, x1 * sin2] (forward) or + [x2 * sin2, -x1 * sin1] (backward)."""
    P, T, D = x.shape
    h = D // 2
    out = nl.ndarray((P, T, D), dtype=x.dtype, buffer=nl.sbuf)
    lo_term = nl.ndarray((P, T, h), dtype=x.dtype, buffer=nl.sbuf)
    hi_term = nl.ndarray((P, T, h), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=out, data1=x, data2=cos, op=nl.multiply)
    lo_sin, hi_sin = (sin[:, :, h:], sin[:, :, :h]) if backward else (sin[:, :, :h], sin[:, :, h:])
    nisa.tensor_tensor(dst=lo_term, data1=x[:, :, h:], data2=lo_sin, op=nl.multiply)
    nisa.tensor_tensor(dst=out[:, :, :h], data1=out[:, :, :h], data2=lo_term, op=nl.add if backward else nl.subtract)
    nisa.tensor_tensor(dst=hi_term, data1=x[:, :, :h], data2=hi_sin, op=nl.multiply)
    nisa.tensor_tensor(dst=out[:, :, h:], data1=out[:, :, h:], data2=hi_term, op=nl.subtract if backward else nl.add)
    return out
