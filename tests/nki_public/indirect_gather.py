# Mirrors the indirect gather example of the nisa.dma_copy docs, aws-neuron/aws-neuron-sdk
# nki/api/nki/isa/__init__.py (dma_copy, "Indirect gather example") at commit
# 81ce03ae261e12925e53437a0f690478e6366155, and the embedding-row gathers of aws-neuron/nki-library
# (src/nkilib_src/nkilib/core/moe/moe_cte/moe_cte_utils.py at d2ad3a5). Written for this project,
# not copied: uint32 row indices DMA'd into a [P, 1] SBUF tile and an HBM `.ap()` with
# vector_offset= and indirect_dim=0, in row tiles of 128.
"""Gather rows of an HBM table by indices (an embedding lookup) with indirect DMA."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def gather_rows(table, indices):
    """out[i, :] = table[indices[i, 0], :].

    Dimensions:
        V: table rows; F: row length; N: indices

    Args:
        table (nl.ndarray): [V, F] @ HBM.
        indices (nl.ndarray): [N, 1] @ HBM, uint32, each in [0, V).

    Returns:
        out (nl.ndarray): [N, F] @ HBM, table.dtype.

    Pseudocode:
        out = table[indices[:, 0]]
    """
    V, F = table.shape
    N = indices.shape[0]
    out = nl.ndarray((N, F), dtype=table.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for n0 in range(0, N, P):
        rows = min(P, N - n0)
        idx = nl.ndarray((rows, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=indices[n0:n0 + rows, :])
        tile = nl.ndarray((rows, F), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=table.ap(pattern=[[F, rows], [1, F]], vector_offset=idx, indirect_dim=0))
        nisa.dma_copy(dst=out[n0:n0 + rows, :], src=tile)
    return out
