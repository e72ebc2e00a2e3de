"""The fused block's input contract: every dim from the tensor shapes, every bad input named.

Shared by each version of the fused decode kernel (the composition steps and `gdn_block_tkg`) and
by the torch reference, so that they accept and reject exactly the same arguments.
"""
import nki.language as nl

from .checks import expect, expect_dtype, expect_rank
from .conv1d_decode import K_MAX, K_MIN

MAX_TOKENS = 8    # tokens per sequence a verify step carries (speculative decoding drafts)


def block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
               norm_weight, recurrent_state, max_tokens=1, pooled=False):
    """Check the shapes of `gdn_block_tkg`'s 11 arguments; return (B, H, nk, nv, dk, dv, K).

    hidden is [B, T, H] with 1 <= T <= max_tokens (the composition steps take one token;
    `gdn_block_tkg` and `gdn_block_tkg_verify` up to MAX_TOKENS).

    Each dim comes from one argument, checked (rank, no empty dim, range) before anything is
    derived from it: B, H from hidden; nv, dk, dv from recurrent_state; nk from W_in_qkv's
    conv_dim = 2 * nk * dk + nv * dv columns; K from conv_weight. Every other argument is checked
    against them, so a wrong one is blamed, not the one it disagrees with. Reads shapes only, so
    it takes NKI, NumPy and torch tensors alike; the first bad argument fails an assert naming it.
    Dtypes: `check_block_dtypes`. pooled: the states are the pool form's pools
    (conv_state_pool, recurrent_state_pool), any number of slots in dim 0.
    """
    cs, rs = state_names(pooled)
    pmax = nl.tile_size.pmax
    expect_rank(hidden, "hidden", 3)
    B, S, H = hidden.shape
    if max_tokens == 1:
        expect(S == 1, "hidden", "one decode token, shape [B, 1, H]", f"shape {list(hidden.shape)}")
    expect(1 <= S <= max_tokens, "hidden",
           f"1 to {max_tokens} tokens per sequence, shape [B, T, H]", f"shape {list(hidden.shape)}")
    expect(H % pmax == 0, "hidden", f"hidden size H = hidden.shape[2] a multiple of {pmax}", H)

    expect_rank(recurrent_state, rs, 4)
    _, nv, dk, dv = recurrent_state.shape
    expect(pooled or recurrent_state.shape[0] == B, rs,
           f"batch {rs}.shape[0] = {B} (as hidden)", list(recurrent_state.shape))
    state_dims = (("num_v_heads", 1, nv), ("head_k_dim", 2, dk), ("head_v_dim", 3, dv))
    for name, axis, n in state_dims:
        expect(n <= pmax, rs, f"{name} {rs}.shape[{axis}] <= {pmax}", n)

    expect_rank(W_in_qkv, "W_in_qkv", 2)
    expect(W_in_qkv.shape[0] == H, "W_in_qkv", f"{H} rows (H of hidden)", list(W_in_qkv.shape))
    conv_dim = W_in_qkv.shape[1]
    key_dims = conv_dim - nv * dv                                  # 2 * nk * dk
    nk = key_dims // (2 * dk)
    expect(key_dims > 0 and key_dims % (2 * dk) == 0 and nv % nk == 0, "W_in_qkv",
           f"conv_dim = W_in_qkv.shape[1] = 2 * nk * {dk} + {nv} * {dv} columns for an integer "
           f"nk >= 1 dividing num_v_heads = {nv}", f"conv_dim = {conv_dim}")

    expect_rank(conv_weight, "conv_weight", 2)
    K = conv_weight.shape[1]
    expect(conv_weight.shape[0] == conv_dim, "conv_weight",
           f"conv_dim = {conv_dim} rows (W_in_qkv.shape[1])", list(conv_weight.shape))
    expect(K_MIN <= K <= K_MAX, "conv_weight",
           f"a conv window K = conv_weight.shape[1] in {K_MIN}..{K_MAX}", K)

    ranks = (("W_in_z", W_in_z, 2), ("W_in_a", W_in_a, 2), ("W_in_b", W_in_b, 2),
             (cs, conv_state, 3), ("A_log", A_log, 1), ("dt_bias", dt_bias, 1),
             ("norm_weight", norm_weight, 1))
    for arg, t, rank in ranks:
        expect_rank(t, arg, rank)
    weights = (("W_in_z", W_in_z, nv * dv), ("W_in_a", W_in_a, nv), ("W_in_b", W_in_b, nv))
    for arg, W, n in weights:
        expect(W.shape[0] == H and W.shape[1] == n, arg, f"shape [H, {n}] = [{H}, {n}]",
               list(W.shape))
    if pooled:
        expect(conv_state.shape[0] == recurrent_state.shape[0], cs,
               f"slots {cs}.shape[0] = {recurrent_state.shape[0]} (as {rs})",
               list(conv_state.shape))
    else:
        expect(conv_state.shape[0] == B, cs, f"batch {cs}.shape[0] = {B} (as hidden)",
               list(conv_state.shape))
    expect(conv_state.shape[1] == conv_dim, cs,
           f"conv_dim = {conv_dim} channels (as W_in_qkv)", list(conv_state.shape))
    expect(conv_state.shape[2] == K, cs,
           f"window {cs}.shape[2] = {K} (as conv_weight)", list(conv_state.shape))
    heads = f"length num_v_heads = {nv} ({rs}.shape[1])"
    expect(A_log.shape[0] == nv, "A_log", heads, list(A_log.shape))
    expect(dt_bias.shape[0] == nv, "dt_bias", heads, list(dt_bias.shape))
    expect(norm_weight.shape[0] == dv, "norm_weight",
           f"length head_v_dim = {dv} ({rs}.shape[3])", list(norm_weight.shape))
    return B, H, nk, nv, dk, dv, K


def state_names(pooled):
    """The names of the two state arguments: the seed API's, or the pool form's pools."""
    if pooled:
        return "conv_state_pool", "recurrent_state_pool"
    return "conv_state", "recurrent_state"


def check_block_dtypes(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                       dt_bias, norm_weight, recurrent_state, pooled=False):
    """Check the dtypes of `gdn_block_tkg`'s 11 arguments: activations, projection weights and
    the conv window bf16; conv_weight, the head parameters and the recurrent state fp32 (pooled:
    the states are the pool form's pools)."""
    cs, rs = state_names(pooled)
    bf16 = (("hidden", hidden), ("W_in_qkv", W_in_qkv), ("W_in_z", W_in_z), ("W_in_a", W_in_a),
            ("W_in_b", W_in_b), (cs, conv_state))
    for arg, t in bf16:
        expect_dtype(t, arg, nl.bfloat16)
    fp32 = (("conv_weight", conv_weight), ("A_log", A_log), ("dt_bias", dt_bias),
            ("norm_weight", norm_weight), (rs, recurrent_state))
    for arg, t in fp32:
        expect_dtype(t, arg, nl.float32)


def check_slot_args(read_indices, write_indices, B, T):
    """The pool form's index arguments at trace time: read_indices [B], write_indices [B, T], both
    int32 (their values are checked on the host: kernels.check_pool_indices)."""
    expect_rank(read_indices, "read_indices", 1)
    expect(read_indices.shape[0] == B, "read_indices", f"shape [{B}] (one slot per sequence of "
           f"hidden)", list(read_indices.shape))
    expect_rank(write_indices, "write_indices", 2)
    expect(tuple(write_indices.shape) == (B, T), "write_indices",
           f"shape [{B}, {T}] (a slot per token of hidden)", list(write_indices.shape))
    expect_dtype(read_indices, "read_indices", nl.int32)
    expect_dtype(write_indices, "write_indices", nl.int32)


def check_layer_args(input_norm_weight, W_out, H, value_dim):
    """The layer form's two weights beyond the block's: input_norm_weight [H] fp32 (the input
    RMSNorm's, zero-centred) and W_out [value_dim, H] bf16 (this rank's rows of
    out_proj.weight.T)."""
    expect_rank(input_norm_weight, "input_norm_weight", 1)
    expect(input_norm_weight.shape[0] == H, "input_norm_weight", f"shape [{H}] (H of hidden)",
           list(input_norm_weight.shape))
    expect_rank(W_out, "W_out", 2)
    expect(tuple(W_out.shape) == (value_dim, H), "W_out",
           f"shape [value_dim, H] = [{value_dim}, {H}] (this rank's value heads' rows of "
           f"out_proj.weight.T)", list(W_out.shape))
    expect_dtype(input_norm_weight, "input_norm_weight", nl.float32)
    expect_dtype(W_out, "W_out", nl.bfloat16)
