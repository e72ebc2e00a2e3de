"""PyTorch reference of the Qwen3.5 gated delta-net (GDN) decode step, stage by stage.

Every NKI kernel in this package is tested against these functions. The semantics are those of
Hugging Face transformers' Qwen3.5 GDN decode path (`modeling_qwen3_5.py`) with the serving
stacks' fp32 beta, as the book's GDN chapter (book/gdn/math.md) sets them out:

1. `in_proj_ref`          hidden @ W_in_{qkv,z,a,b}, fp32 accumulation, bf16 results
2. `conv1d_decode_ref`    depthwise causal conv over a K-column window (newest token in the last
                          column, column 0 of the incoming state dropped) + SiLU; fp32 math,
                          bf16 out
3. `gqa_repeat_ref`       split q | k | v; value head h uses key head h // G (`repeat_interleave`)
4. `gated_delta_rule_ref` l2norm(q, k), q * dk**-0.5, beta = sigmoid(b), g = -exp(A_log) *
                          softplus(a + dt_bias), decay, delta rule update, o = S^T q; fp32 math,
                          o in bf16
5. `rmsnorm_gated_ref`    RMSNorm over dv with a plain weight, times silu(z); fp32 math, one bf16
                          rounding

`gdn_block_tkg_ref` composes them with the fused kernel's signature. `gdn_block_tkg_verify_ref` runs
T tokens per sequence (the speculative-decoding verify step) and keeps the states after each token.
`gdn_layer_tkg_ref` is one tensor-parallel rank's whole layer: the decoder layer's input RMSNorm
(`input_rmsnorm_ref`), the pool form of the block, and this rank's rows of out_proj (an fp32
partial sum that the caller all-reduces). Results are rounded to bf16
exactly where that chapter's "Dtypes at each point" says, so a kernel that mirrors those points agrees up to
accumulation order. Inputs are never modified; new states are returned.

Helpers: `to_torch` / `to_numpy` convert between NumPy (bf16 as `ml_dtypes.bfloat16`) and torch
without changing a bit, `make_inputs` draws realistic block inputs for a `GDNShape`,
`token_inputs` the same with T tokens per sequence, and `pipeline_inputs` adds every stage's
intermediates, computed by the reference; `pool_inputs` and `layer_inputs` add the serving forms'
pools and indices and the layer's two weights.
"""
import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F

from .configs import GDNShape
from .gdn_block_checks import MAX_TOKENS, block_dims
from .registry import BLOCK_ARGS, BLOCK_OUTPUTS, VERIFY_OUTPUTS

L2NORM_EPS = 1e-6        # l2norm(x) = x * rsqrt(sum(x^2) + eps), on q and k
RMSNORM_EPS = 1e-6       # config.rms_norm_eps of every Qwen3-Next / Qwen3.5 model
SOFTPLUS_THRESHOLD = 20  # softplus(x) = x above it (torch, fla, vLLM)

BF16 = torch.bfloat16


# --- input checks -----------------------------------------------------------------------------

def _fail(arg, expected, got):
    raise ValueError(f"{arg}: expected {expected}, got {got}")


def _check_rank(arg, t, layout):
    """Reject `t` unless it has as many dims as `layout` (e.g. "[B, nv, dk]") names."""
    rank = layout.count(",") + 1
    if t.dim() != rank:
        _fail(arg, f"a rank-{rank} tensor {layout}", f"shape {tuple(t.shape)}")


def _check_shape(arg, t, layout, shape):
    """Reject `t` unless its shape is `shape`; `layout` names the dims (e.g. "[B, conv_dim, K]")."""
    if tuple(t.shape) != tuple(shape):
        _fail(arg, f"shape {layout} = {tuple(shape)}", f"{tuple(t.shape)}")


# --- the five stages --------------------------------------------------------------------------

def in_proj_ref(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b):
    """Stage 1: the four decode projections (GEMVs), fp32 accumulation, results rounded to bf16.

    hidden [B, 1, H] bf16; W_in_qkv [H, conv_dim], W_in_z [H, value_dim], W_in_a and W_in_b
    [H, nv], all bf16.
    Returns mixed_qkv [B, conv_dim], z [B, value_dim], a [B, nv], b [B, nv], all bf16.
    """
    _check_rank("hidden", hidden, "[B, 1, H]")
    B, T, H = hidden.shape
    if T != 1:
        _fail("hidden", "one decode token, shape [B, 1, H]", f"shape {tuple(hidden.shape)}")
    for arg, W, cols in (("W_in_qkv", W_in_qkv, "conv_dim"), ("W_in_z", W_in_z, "value_dim"),
                         ("W_in_a", W_in_a, "nv"), ("W_in_b", W_in_b, "nv")):
        _check_rank(arg, W, f"[H, {cols}]")
        if W.shape[0] != H:
            _fail(arg, f"shape [H, {cols}] with H = {H} (from hidden)", f"{tuple(W.shape)}")
    _check_shape("W_in_b", W_in_b, "[H, nv] (as W_in_a)", W_in_a.shape)

    x = hidden[:, 0].float()
    return tuple((x @ W.float()).to(BF16) for W in (W_in_qkv, W_in_z, W_in_a, W_in_b))


def conv1d_decode_ref(mixed_qkv, conv_weight, conv_state):
    """Stage 2: one step of the depthwise causal conv1d, then SiLU.

    mixed_qkv [B, conv_dim] bf16 (the new token), conv_weight [conv_dim, K] fp32,
    conv_state [B, conv_dim, K] bf16 holding the last K tokens, oldest in column 0.
    The window is [conv_state[..., 1:], mixed_qkv]: column 0 of the incoming state drops out, the
    new token lands in the last column and meets conv_weight[:, K-1].
    Returns conv_out = bf16(silu(sum_j window[..., j] * conv_weight[:, j])) [B, conv_dim] (fp32
    math) and new_conv_state = window [B, conv_dim, K] bf16.
    """
    _check_rank("mixed_qkv", mixed_qkv, "[B, conv_dim]")
    _check_rank("conv_weight", conv_weight, "[conv_dim, K]")
    B, conv_dim = mixed_qkv.shape
    K = conv_weight.shape[1]
    _check_shape("conv_weight", conv_weight, "[conv_dim, K]", (conv_dim, K))
    _check_shape("conv_state", conv_state, "[B, conv_dim, K]", (B, conv_dim, K))

    window = torch.cat([conv_state[:, :, 1:].to(BF16), mixed_qkv.to(BF16)[:, :, None]], dim=-1)
    conv_out = F.silu((window.float() * conv_weight.float()).sum(-1)).to(BF16)
    return conv_out, window


def gqa_repeat_ref(conv_out, num_k_heads, head_k_dim, head_v_dim):
    """Stage 3: split conv_out into q | k | v heads and expand q, k from key heads to value heads.

    conv_out [B, conv_dim] (bf16), conv_dim = 2 * num_k_heads * head_k_dim + nv * head_v_dim.
    Value head h uses key head h // G with G = nv // num_k_heads (`repeat_interleave`, not tile).
    Returns q [B, nv, dk], k [B, nv, dk], v [B, nv, dv], new tensors in conv_out's dtype.
    """
    _check_rank("conv_out", conv_out, "[B, conv_dim]")
    B, conv_dim = conv_out.shape
    key_dim = num_k_heads * head_k_dim
    value_dim = conv_dim - 2 * key_dim
    nv = value_dim // head_v_dim
    if value_dim <= 0 or value_dim % head_v_dim or nv % num_k_heads:
        _fail("conv_out", f"[B, 2*{num_k_heads}*{head_k_dim} + nv*{head_v_dim}] with nv a multiple "
              f"of num_k_heads = {num_k_heads}", f"shape {tuple(conv_out.shape)}")
    G = nv // num_k_heads

    q = conv_out[:, :key_dim].reshape(B, num_k_heads, head_k_dim)
    k = conv_out[:, key_dim:2 * key_dim].reshape(B, num_k_heads, head_k_dim)
    v = conv_out[:, 2 * key_dim:].reshape(B, nv, head_v_dim)
    return q.repeat_interleave(G, dim=1), k.repeat_interleave(G, dim=1), v.clone()


def _l2norm(x):
    """x * rsqrt(sum(x^2) + eps) over the last dim (eps inside the sqrt: zero stays zero)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


def gated_delta_rule_ref(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """Stage 4: gates and the single-token gated delta rule, all in fp32.

    q, k [B, nv, dk], v [B, nv, dv], a, b [B, nv] bf16; A_log, dt_bias [nv] fp32;
    recurrent_state [B, nv, dk, dv] fp32 (HF / fla "K-major" layout).
    Per (batch, value head): q <- l2norm(q) * dk**-0.5, k <- l2norm(k), beta = sigmoid(b),
    g = -exp(A_log) * softplus(a + dt_bias) (threshold 20), S <- exp(g) S, delta = (v - S^T k) beta,
    S <- S + k delta^T, o = S^T q (the updated S).
    Returns o [B, nv, dv] bf16 and the new state [B, nv, dk, dv] fp32.
    """
    _check_rank("q", q, "[B, nv, dk]")
    _check_rank("v", v, "[B, nv, dv]")
    B, nv, dk = q.shape
    dv = v.shape[2]
    _check_shape("k", k, "[B, nv, dk] (as q)", q.shape)
    _check_shape("v", v, "[B, nv, dv]", (B, nv, dv))
    _check_shape("a", a, "[B, nv]", (B, nv))
    _check_shape("b", b, "[B, nv]", (B, nv))
    _check_shape("A_log", A_log, "[nv]", (nv,))
    _check_shape("dt_bias", dt_bias, "[nv]", (nv,))
    _check_shape("recurrent_state", recurrent_state, "[B, nv, dk, dv]", (B, nv, dk, dv))

    q = _l2norm(q.float()) * dk ** -0.5
    k = _l2norm(k.float())
    beta = torch.sigmoid(b.float())
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float(), threshold=SOFTPLUS_THRESHOLD)

    S = recurrent_state.float() * g.exp()[:, :, None, None]           # decay first
    kv_mem = torch.einsum("bhij,bhi->bhj", S, k)                       # S^T k
    delta = (v.float() - kv_mem) * beta[:, :, None]
    S = S + k[:, :, :, None] * delta[:, :, None, :]                     # rank-1 update k delta^T
    o = torch.einsum("bhij,bhi->bhj", S, q)                            # S^T q, updated S
    return o.to(BF16), S


def rmsnorm_gated_ref(o, z, norm_weight):
    """Stage 5: RMSNorm over dv with a plain weight (not 1 + w), gated by silu(z), in fp32.

    o [B, nv, dv] bf16, z [B, value_dim] bf16 (value heads in order), norm_weight [dv] fp32.
    Returns out [B, 1, value_dim] bf16, flattened head-major (index h * dv + j), rounded once.
    """
    _check_rank("o", o, "[B, nv, dv]")
    B, nv, dv = o.shape
    _check_shape("z", z, "[B, value_dim]", (B, nv * dv))
    _check_shape("norm_weight", norm_weight, "[dv]", (dv,))

    x = o.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMSNORM_EPS)
    y = x * norm_weight.float() * F.silu(z.float().reshape(B, nv, dv))
    return y.to(BF16).reshape(B, 1, nv * dv)


def gdn_tkg_ref(q, k, v, a, b, z, A_log, dt_bias, norm_weight, recurrent_state):
    """Stages 4 and 5 chained, as the `gdn_tkg` kernel fuses them: returns (out, new recurrent_state)."""
    o, new_state = gated_delta_rule_ref(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    return rmsnorm_gated_ref(o, z, norm_weight), new_state


# --- the block --------------------------------------------------------------------------------

def gdn_block_tkg_ref(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                      dt_bias, norm_weight, recurrent_state):
    """One GDN decode step, hidden -> RMSNormGated output (before out_proj): stages 1-5 composed.

    Shapes and dtypes as `gdn_block_tkg`; the dims come from the tensor shapes and are checked by
    the kernels' own `block_dims` (kernels/gdn_block_checks.py), so the reference rejects the same
    shapes, with a ValueError.
    Returns out [B, 1, value_dim] bf16, new conv_state [B, conv_dim, K] bf16,
    new recurrent_state [B, nv, dk, dv] fp32.
    hidden [B, T, H] with T > 1 runs `gdn_block_tkg_verify_ref`: out [B, T, value_dim] and the
    states after the last token.
    """
    if hidden.dim() == 3 and hidden.shape[1] != 1:
        out, conv_states, states = gdn_block_tkg_verify_ref(
            hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log, dt_bias,
            norm_weight, recurrent_state)
        return out, conv_states[:, -1], states[:, -1]
    try:
        _, _, nk, _, dk, dv, _ = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                                            conv_state, A_log, dt_bias, norm_weight, recurrent_state)
    except AssertionError as e:     # the kernels' check, raised as host code's ValueError
        raise ValueError(str(e)) from None
    mixed_qkv, z, a, b = in_proj_ref(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b)
    conv_out, new_conv_state = conv1d_decode_ref(mixed_qkv, conv_weight, conv_state)
    q, k, v = gqa_repeat_ref(conv_out, nk, dk, dv)
    o, new_recurrent_state = gated_delta_rule_ref(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    out = rmsnorm_gated_ref(o, z, norm_weight)
    return out, new_conv_state, new_recurrent_state


def gdn_block_tkg_verify_ref(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                             A_log, dt_bias, norm_weight, recurrent_state):
    """T tokens per sequence in one step, the states after every token kept: the verify step of
    speculative decoding, which keeps an accepted prefix of T draft tokens.

    hidden [B, T, H] bf16 with 1 <= T <= MAX_TOKENS; the other arguments as `gdn_block_tkg_ref`.
    Token t's conv window is the last K columns of [conv_state, x_0 .. x_t]; the recurrence runs
    token by token. Stages 1 and 2 take the T tokens at once (one GEMM; the windows cut from one
    column sequence), stages 3 to 5 run per token.
    Returns out [B, T, value_dim] bf16, conv_states [B, T, conv_dim, K] bf16 (the window after
    each token) and recurrent_states [B, T, nv, dk, dv] fp32 (the state after each token).
    """
    _check_rank("hidden", hidden, "[B, T, H]")
    B, T, H = hidden.shape
    if not 1 <= T <= MAX_TOKENS:
        _fail("hidden", f"1 to {MAX_TOKENS} tokens per sequence, shape [B, T, H]",
              f"shape {tuple(hidden.shape)}")
    try:    # every other dim: the kernels' check, on the first token
        _, _, nk, _, dk, dv, K = block_dims(hidden[:, :1], W_in_qkv, W_in_z, W_in_a, W_in_b,
                                            conv_weight, conv_state, A_log, dt_bias, norm_weight,
                                            recurrent_state)
    except AssertionError as e:
        raise ValueError(str(e)) from None
    x = hidden.float().reshape(B * T, H)
    mixed_qkv, z, a, b = ((x @ W.float()).to(BF16).reshape(B, T, -1)
                          for W in (W_in_qkv, W_in_z, W_in_a, W_in_b))
    # the K + T columns [conv_state, x_0 .. x_T-1]; token t's window is columns t + 1 .. t + K
    columns = torch.cat([conv_state.to(BF16), mixed_qkv.transpose(1, 2)], dim=-1)
    windows = columns.unfold(2, K, 1)[:, :, 1:]                             # [B, conv_dim, T, K]
    conv_out = F.silu((windows.float() * conv_weight.float()[:, None, :]).sum(-1)).to(BF16)
    outs, states = [], []
    state = recurrent_state
    for t in range(T):
        q, k, v = gqa_repeat_ref(conv_out[:, :, t], nk, dk, dv)
        o, state = gated_delta_rule_ref(q, k, v, a[:, t], b[:, t], A_log, dt_bias, state)
        outs.append(rmsnorm_gated_ref(o, z[:, t], norm_weight))
        states.append(state)
    return torch.cat(outs, dim=1), windows.transpose(1, 2).contiguous(), torch.stack(states, dim=1)


def gdn_block_tkg_pool_ref(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                           conv_state_pool, A_log, dt_bias, norm_weight, recurrent_state_pool,
                           read_indices, write_indices):
    """The pool form: gather each live sequence's window and state from its read slot, run
    `gdn_block_tkg_verify_ref`, scatter token t's to slot write_indices[b, t] (where >= 0).
    Padding rows (read index -1) give zero outputs and touch no slot. Returns out and new pools
    (copies; the arguments are not written)."""
    B, T, _ = hidden.shape
    read, write = read_indices.long(), write_indices.long()
    live = read >= 0
    rows = torch.where(live, read, torch.zeros_like(read))
    out, windows, states = gdn_block_tkg_verify_ref(
        hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state_pool[rows], A_log,
        dt_bias, norm_weight, recurrent_state_pool[rows])
    out = torch.where(live[:, None, None], out, torch.zeros_like(out))
    conv_pool, state_pool = conv_state_pool.clone(), recurrent_state_pool.clone()
    for b, t in (write >= 0).nonzero().tolist():
        conv_pool[write[b, t]] = windows[b, t]
        state_pool[write[b, t]] = states[b, t]
    return out, conv_pool, state_pool


def input_rmsnorm_ref(hidden, weight):
    """The decoder layer's input RMSNorm (transformers' Qwen3NextRMSNorm / Qwen3_5RMSNorm) in fp32:
    x * rsqrt(mean(x^2) + eps) * (1 + weight), over H; the weight is zero-centred as transformers
    stores it (not the gated norm's plain weight).

    hidden [B, T, H] bf16, weight [H] fp32. Returns [B, T, H] bf16, rounded once.
    """
    _check_rank("hidden", hidden, "[B, T, H]")
    _check_shape("input_norm_weight", weight, "[H]", hidden.shape[-1:])
    x = hidden.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMSNORM_EPS)
    return (x * (1 + weight.float())).to(BF16)


def gdn_layer_tkg_ref(hidden, input_norm_weight, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                      conv_state_pool, A_log, dt_bias, norm_weight, recurrent_state_pool, W_out,
                      read_indices, write_indices):
    """One tensor-parallel rank's GDN layer: `input_rmsnorm_ref`, `gdn_block_tkg_pool_ref` on its
    output (this rank's heads), then y @ W_out with fp32 sums.

    W_out [value_dim, H] bf16 is out_proj.weight.T's rows of this rank's value heads; the other
    arguments as `gdn_block_tkg_pool_ref`. Returns partial [B, T, H] fp32 (the rank's share of
    out_proj's output, before the all-reduce; a padding row's y is 0, so its partial is exactly 0)
    and the new pools (copies; the arguments are not written).
    """
    x = input_rmsnorm_ref(hidden, input_norm_weight)
    y, conv_pool, state_pool = gdn_block_tkg_pool_ref(
        x, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state_pool, A_log, dt_bias,
        norm_weight, recurrent_state_pool, read_indices, write_indices)
    _check_shape("W_out", W_out, "[value_dim, H]", (y.shape[-1], hidden.shape[-1]))
    return y.float() @ W_out.float(), conv_pool, state_pool


# --- helpers ----------------------------------------------------------------------------------

def to_torch(x):
    """NumPy array -> new torch tensor of the same dtype (bf16 bits unchanged, no shared memory)."""
    x = np.array(x, copy=True)
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(x.view(np.uint16)).view(BF16)
    return torch.from_numpy(x)


def to_numpy(t):
    """torch tensor -> new NumPy array of the same dtype (bf16: `ml_dtypes.bfloat16`, bits kept)."""
    t = t.detach().cpu()
    if t.dtype == BF16:
        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def block_input_specs(shape: GDNShape, T=1):
    """{name: (shape, NumPy dtype)} of the 11 block inputs, in signature order (`BLOCK_ARGS`),
    with T tokens per sequence (hidden [B, T, H])."""
    s, bf16, f32 = shape, ml_dtypes.bfloat16, np.float32
    return {
        "hidden": ((s.B, T, s.H), bf16),
        "W_in_qkv": ((s.H, s.conv_dim), bf16),
        "W_in_z": ((s.H, s.value_dim), bf16),
        "W_in_a": ((s.H, s.nv), bf16),
        "W_in_b": ((s.H, s.nv), bf16),
        "conv_weight": ((s.conv_dim, s.K), f32),
        "conv_state": ((s.B, s.conv_dim, s.K), bf16),
        "A_log": ((s.nv,), f32),
        "dt_bias": ((s.nv,), f32),
        "norm_weight": ((s.dv,), f32),
        "recurrent_state": ((s.B, s.nv, s.dk, s.dv), f32),
    }


def block_output_specs(shape: GDNShape, T=1, verify=False):
    """{name: (shape, NumPy dtype)} of the block's 3 results for T tokens per sequence, in return
    order: out [B, T, value_dim] bf16 and the new states shaped and typed as the old
    (`BLOCK_OUTPUTS`), or with `verify` every token's, [B, T, ...] (`VERIFY_OUTPUTS`)."""
    specs = block_input_specs(shape)
    states = [specs["conv_state"], specs["recurrent_state"]]
    if verify:
        states = [((shape.B, T) + dims[1:], dtype) for dims, dtype in states]
    names = [name for name, _ in (VERIFY_OUTPUTS if verify else BLOCK_OUTPUTS)]
    return dict(zip(names, [((shape.B, T, shape.value_dim), ml_dtypes.bfloat16)] + states))


def make_inputs(shape: GDNShape, seed=0, **overrides):
    """Random block inputs for `shape` with realistic magnitudes, as NumPy arrays by argument name.

    hidden ~ N(0, 1); projection weights ~ N(0, 1/H), so projection outputs are O(1);
    conv_weight ~ N(0, 1/K); conv_state ~ N(0, 1); A_log = log(U(0.01, 16)) (Qwen3.5 init);
    dt_bias ~ 1 + 0.1 N(0, 1); norm_weight ~ 1 + 0.1 N(0, 1); recurrent_state ~ 0.1 N(0, 1).
    bf16 entries are `ml_dtypes.bfloat16`, the others float32. Deterministic for a given seed.
    `overrides` replace entries by name: an array is converted to the entry's dtype (its shape is
    kept, so bad shapes can be built), a scalar fills the entry's shape. The other entries are the
    same as without overrides.
    """
    specs = block_input_specs(shape)
    unknown = set(overrides) - set(specs)
    if unknown:
        _fail("overrides", f"names among {list(specs)}", sorted(unknown))
    rng = np.random.default_rng(seed)

    def normal(name, mean=0.0, std=1.0):
        return mean + std * rng.standard_normal(specs[name][0], dtype=np.float32)

    H, K = shape.H, shape.K
    values = {
        "hidden": normal("hidden"),
        "W_in_qkv": normal("W_in_qkv", std=H ** -0.5),
        "W_in_z": normal("W_in_z", std=H ** -0.5),
        "W_in_a": normal("W_in_a", std=H ** -0.5),
        "W_in_b": normal("W_in_b", std=H ** -0.5),
        "conv_weight": normal("conv_weight", std=K ** -0.5),
        "conv_state": normal("conv_state"),
        "A_log": np.log(rng.uniform(0.01, 16.0, size=shape.nv)),
        "dt_bias": normal("dt_bias", mean=1.0, std=0.1),
        "norm_weight": normal("norm_weight", mean=1.0, std=0.1),
        "recurrent_state": normal("recurrent_state", std=0.1),
    }
    inputs = {}
    for name, (dims, dtype) in specs.items():
        value = np.asarray(overrides.get(name, values[name]))
        inputs[name] = np.full(dims, value, dtype) if value.ndim == 0 else value.astype(dtype)
    return inputs


def token_inputs(shape: GDNShape, T, seed=0):
    """`make_inputs(shape, seed)` with hidden [B, T, H] ~ N(0, 1): T tokens per sequence, the
    verify step's input. The hidden rows come from their own stream (seeded by seed and T), so the
    other ten inputs are those of make_inputs, whatever T."""
    rng = np.random.default_rng([seed, T])
    return make_inputs(shape, seed=seed,
                       hidden=rng.standard_normal((shape.B, T, shape.H), dtype=np.float32))


def pipeline_inputs(shape: GDNShape, seed=0):
    """NumPy arrays by name: the 11 block inputs (`make_inputs`) and every stage's intermediates.

    Adds mixed_qkv, z, a, b (in_proj), conv_out (conv1d), q, k, v (GQA repeat) and o (the
    recurrence), computed by the torch reference. The reference's new states are dropped.
    """
    x = make_inputs(shape, seed=seed)
    t = {name: to_torch(x[name]) for name in BLOCK_ARGS}
    mixed_qkv, z, a, b = in_proj_ref(t["hidden"], t["W_in_qkv"], t["W_in_z"], t["W_in_a"], t["W_in_b"])
    conv_out, _ = conv1d_decode_ref(mixed_qkv, t["conv_weight"], t["conv_state"])
    q, k, v = gqa_repeat_ref(conv_out, shape.nk, shape.dk, shape.dv)
    o, _ = gated_delta_rule_ref(q, k, v, a, b, t["A_log"], t["dt_bias"], t["recurrent_state"])
    x.update({name: to_numpy(value) for name, value in
              dict(mixed_qkv=mixed_qkv, z=z, a=a, b=b, conv_out=conv_out, q=q, k=k, v=v, o=o).items()})
    return x


def pool_inputs(inputs):
    """The pool form's arguments for a step whose windows and states are inputs' (NumPy, by
    kernels.registry.POOL_ARGS name): pools of N = B * T slots, sequence b reading slot b in place
    and keeping token t's checkpoint at slot t * B + b (the sweep's rows; a pool's HBM bytes do not
    depend on N)."""
    B, T, _ = inputs["hidden"].shape
    conv, state = inputs["conv_state"], inputs["recurrent_state"]
    x = dict(inputs)
    x["conv_state_pool"] = np.concatenate([conv] * T)
    x["recurrent_state_pool"] = np.concatenate([state] * T)
    x["read_indices"] = np.arange(B, dtype=np.int32)
    x["write_indices"] = (np.arange(B, dtype=np.int32)[:, None]
                          + B * np.arange(T, dtype=np.int32)[None, :]).astype(np.int32)
    return x


def layer_inputs(inputs):
    """The layer form's two weights beside a step's inputs (NumPy, by kernels.registry.LAYER_ARGS
    name), drawn as make_inputs draws the block's, from their own stream:
    input_norm_weight ~ 0.1 N(0, 1) (zero-centred, as transformers stores it) and
    W_out ~ N(0, 1 / value_dim), so that the partial sums are O(1)."""
    H = inputs["hidden"].shape[2]
    value_dim = inputs["W_in_z"].shape[1]
    rng = np.random.default_rng([H, value_dim])
    x = dict(inputs)
    x["input_norm_weight"] = (0.1 * rng.standard_normal(H)).astype(np.float32)
    x["W_out"] = (rng.standard_normal((value_dim, H), dtype=np.float32)
                  / np.sqrt(max(value_dim, 1))).astype(inputs["W_in_z"].dtype)
    return x
