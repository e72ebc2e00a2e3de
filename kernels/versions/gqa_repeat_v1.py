"""Stage 3, version 1: q, k and v heads from conv_out, one DMA per value head.

Value head h reads key head h // G (repeat_interleave). The obvious kernel copies each value
head of q and k on its own: 2 * nv + 1 DMAs. The chapter (stages/03_gqa_repeat) profiles it and
takes it to kernels/gqa_repeat.py, which needs 2 * G + 1.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from ..gqa_repeat import check_split_args


@nki.jit
def gqa_repeat_v1(conv_out, num_k_heads, head_k_dim, head_v_dim):
    """Stage 3, version 1: q, k, v heads from conv_out, q and k repeated head by head.

    Dimensions:
        B: batch; nk = num_k_heads; dk = head_k_dim; dv = head_v_dim; G = nv / nk

    Args:
        conv_out (nl.ndarray): [B, conv_dim] @ HBM, bf16, channels q | k | v, head-major.
        num_k_heads (int): nk, a compile-time constant.
        head_k_dim (int): dk, a compile-time constant.
        head_v_dim (int): dv, a compile-time constant.

    Returns:
        q, k (nl.ndarray): [B, nv, dk] @ shared HBM, bf16; head h is key head h // G.
        v (nl.ndarray): [B, nv, dv] @ shared HBM, bf16.

    Notes:
        - Rejects (an assertion naming the argument) a conv_out that is not 2-d bf16 or does
          not split into 2*nk*dk + nv*dv channels with nv a multiple of nk.
        - HBM to HBM: one DMA per value head of q and of k, one for v.

    Pseudocode:
        for h in range(nv):
            q[:, h] = conv_out q head h // G;  k[:, h] = conv_out k head h // G
        v = conv_out[:, 2 * nk * dk:].reshape(B, nv, dv)
    """
    B, nv = check_split_args(conv_out, num_k_heads, head_k_dim, head_v_dim)
    nk, dk, dv = num_k_heads, head_k_dim, head_v_dim
    key_dim = nk * dk
    G = nv // nk

    q = nl.ndarray((B, nv, dk), nl.bfloat16, buffer=nl.shared_hbm, name="q")
    k = nl.ndarray((B, nv, dk), nl.bfloat16, buffer=nl.shared_hbm, name="k")
    v = nl.ndarray((B, nv, dv), nl.bfloat16, buffer=nl.shared_hbm, name="v")
    for h in range(nv):
        j = h // G                                            # the key head value head h reads
        nisa.dma_copy(q[:, h, :], conv_out[:, j * dk:(j + 1) * dk])
        nisa.dma_copy(k[:, h, :], conv_out[:, key_dim + j * dk:key_dim + (j + 1) * dk])
    nisa.dma_copy(v, conv_out[:, 2 * key_dim:].reshape_dim(1, (nv, dv)))
    return q, k, v
