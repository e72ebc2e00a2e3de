"""The fused block's input contract: every dim from the tensor shapes, every bad input named.

Shared by each version of the fused decode kernel (the composition steps and `gdn_block_tkg`), so
they accept and reject exactly the same arguments.
"""
import nki.language as nl

from .checks import expect, expect_dtype, expect_multiple, expect_rank
from .configs import GDNShape

PMAX = 128
K_MIN, K_MAX = 2, 4        # conv windows the conv1d stage supports (Qwen: 4)


def block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
               norm_weight, recurrent_state):
    """Check the 11 arguments of `gdn_block_tkg` against each other; return their dims as a GDNShape.

    B from hidden; nv, dk, dv from recurrent_state; conv_dim, K from conv_weight;
    nk = (conv_dim - nv * dv) / (2 * dk). Raises ValueError naming the first bad argument.
    """
    ranks = (("hidden", hidden, 3), ("W_in_qkv", W_in_qkv, 2), ("W_in_z", W_in_z, 2), ("W_in_a", W_in_a, 2),
             ("W_in_b", W_in_b, 2), ("conv_weight", conv_weight, 2), ("conv_state", conv_state, 3),
             ("A_log", A_log, 1), ("dt_bias", dt_bias, 1), ("norm_weight", norm_weight, 1),
             ("recurrent_state", recurrent_state, 4))
    for arg, t, rank in ranks:
        expect_rank(t, arg, rank)
    for arg, t in (("hidden", hidden), ("W_in_qkv", W_in_qkv), ("W_in_z", W_in_z), ("W_in_a", W_in_a),
                   ("W_in_b", W_in_b), ("conv_state", conv_state)):
        expect_dtype(t, arg, nl.bfloat16)
    for arg, t in (("conv_weight", conv_weight), ("A_log", A_log), ("dt_bias", dt_bias),
                   ("norm_weight", norm_weight), ("recurrent_state", recurrent_state)):
        expect_dtype(t, arg, nl.float32)

    B, S, H = hidden.shape
    expect(S == 1, "hidden", "one decode token, shape [B, 1, H]", f"shape {list(hidden.shape)}")
    expect_multiple(H, PMAX, "hidden", "hidden size H = hidden.shape[2]")
    _, nv, dk, dv = recurrent_state.shape
    expect(recurrent_state.shape[0] == B, "recurrent_state", f"batch recurrent_state.shape[0] = {B} (as hidden)",
           list(recurrent_state.shape))
    expect(dk <= PMAX, "recurrent_state", f"head_k_dim recurrent_state.shape[2] <= {PMAX}", dk)
    expect(dv <= PMAX, "recurrent_state", f"head_v_dim recurrent_state.shape[3] <= {PMAX}", dv)
    expect(nv <= PMAX, "recurrent_state", f"num_v_heads recurrent_state.shape[1] <= {PMAX}", nv)
    expect(tuple(A_log.shape) == (nv,), "A_log", f"length num_v_heads = {nv} (recurrent_state.shape[1])",
           list(A_log.shape))
    expect(tuple(dt_bias.shape) == (nv,), "dt_bias", f"length num_v_heads = {nv} (recurrent_state.shape[1])",
           list(dt_bias.shape))
    expect(tuple(norm_weight.shape) == (dv,), "norm_weight", f"length head_v_dim = {dv} (recurrent_state.shape[3])",
           list(norm_weight.shape))

    conv_dim, K = conv_weight.shape
    key_dims = conv_dim - nv * dv
    expect(key_dims > 0 and key_dims % (2 * dk) == 0, "conv_weight",
           f"conv_dim = 2 * key_dim + value_dim = 2 * nk * {dk} + {nv} * {dv} rows for an integer nk >= 1",
           f"conv_dim = {conv_dim}")
    nk = key_dims // (2 * dk)
    expect(nv % nk == 0, "recurrent_state", f"num_v_heads recurrent_state.shape[1] a multiple of num_k_heads = "
                                            f"{nk} (from conv_dim)", nv)
    expect(K_MIN <= K <= K_MAX, "conv_weight", f"a conv window K = conv_weight.shape[1] in {K_MIN}..{K_MAX}", K)
    expect(conv_state.shape[0] == B, "conv_state", f"batch conv_state.shape[0] = {B} (as hidden)",
           list(conv_state.shape))
    expect(conv_state.shape[2] == K, "conv_state", f"window conv_state.shape[2] = {K} (as conv_weight)",
           list(conv_state.shape))
    expect(conv_state.shape[1] == conv_dim, "conv_state", f"conv_dim = {conv_dim} channels (as conv_weight)",
           list(conv_state.shape))

    for arg, W, n in (("W_in_qkv", W_in_qkv, conv_dim), ("W_in_z", W_in_z, nv * dv), ("W_in_a", W_in_a, nv),
                      ("W_in_b", W_in_b, nv)):
        expect(tuple(W.shape) == (H, n), arg, f"shape [H, {n}] = [{H}, {n}]", list(W.shape))
    return GDNShape(B=B, H=H, nk=nk, nv=nv, dk=dk, dv=dv, K=K)
