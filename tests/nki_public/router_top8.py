# Mirrors the top-K step of aws-neuron/nki-library src/nkilib_src/nkilib/core/router_topk/router_topk.py
# at commit d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for this project, not copied: tokens
# on partitions folded as [128, T/128, E] in SBUF, nisa.max8 for each token tile, the first K of
# the 8 kept with tensor_copy, nisa.nc_find_index8 on the same tile for their expert indices
# (uint32), copied out and cast to fp32. The router matmul, activations, norm and scatter are left out.
"""Router top-K (K <= 8): each token's K largest logits and the experts they belong to."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def router_top8(logits, k):
    """The k largest logits of each token, descending, and their expert indices.

    Dimensions:
        T: tokens (a multiple of 128 or at most 128); E: experts (8 to 16384)

    Args:
        logits (nl.ndarray): [T, E] @ HBM, float32.
        k (int): 1 to 8.

    Returns:
        values (nl.ndarray): [T, k] @ HBM, float32.
        indices (nl.ndarray): [T, k] @ HBM, float32 (expert ids, as the library casts them).

    Pseudocode:
        top8 = -sort(-logits, axis=1)[:, :8]; idx = first index of each top8 value in its row
        return top8[:, :k], idx[:, :k]
    """
    T, E = logits.shape
    assert 1 <= k <= 8, f"k must be 1..8, got {k}"
    P = min(T, nl.tile_size.pmax)
    assert T % P == 0, f"T must be a multiple of {P}, got {T}"
    n_tiles = T // P
    logits_sb = nl.ndarray((P, n_tiles, E), dtype=logits.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=logits_sb, src=logits.reshape((n_tiles, P, E)).permute((1, 0, 2)))
    values_sb = nl.ndarray((P, n_tiles, k), dtype=nl.float32, buffer=nl.sbuf)
    index_sb = nl.ndarray((P, n_tiles, k), dtype=nl.uint32, buffer=nl.sbuf)
    index_f32 = nl.ndarray((P, n_tiles, k), dtype=nl.float32, buffer=nl.sbuf)
    tmp = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
    for t in range(n_tiles):
        top8 = nl.ndarray((P, 8), dtype=logits.dtype, buffer=nl.sbuf)
        nisa.max8(dst=top8, src=logits_sb[:, t, :])
        nisa.tensor_copy(dst=values_sb[:, t, :], src=top8[:, 0:k])
        nisa.nc_find_index8(dst=tmp, data=logits_sb[:, t, :], vals=top8)
        nisa.tensor_copy(dst=index_sb[:, t, :], src=tmp[:, 0:k])
        nisa.tensor_copy(dst=index_f32[:, t, :], src=index_sb[:, t, :])
    values = nl.ndarray((T, k), dtype=nl.float32, buffer=nl.shared_hbm)
    indices = nl.ndarray((T, k), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=values.reshape((n_tiles, P, k)).permute((1, 0, 2)), src=values_sb)
    nisa.dma_copy(dst=indices.reshape((n_tiles, P, k)).permute((1, 0, 2)), src=index_f32)
    return values, indices
