"""Host-side loader: a Hugging Face transformers GDN module's weights as `gdn_block_tkg` arguments.

Plain PyTorch/NumPy, no NKI (like kernels/reference.py). `gdn_weights(module)` takes a
`Qwen3_5GatedDeltaNet` or `Qwen3NextGatedDeltaNet` (transformers `modeling_qwen3_5.py` /
`modeling_qwen3_next.py`) and returns the kernel's eight weight arguments. The two layouts (the
book's GDN chapter, book/gdn/math.md, "1. in_proj"):

- Qwen3.5: four separate bias-free projections `in_proj_qkv | in_proj_z | in_proj_a | in_proj_b`;
  the kernel's weights are their transposes, no reordering.
- Qwen3-Next: two fused projections `in_proj_qkvz` and `in_proj_ba` whose output rows are
  interleaved per key-head group g: [q_g (dk) | k_g (dk) | v_g (G*dv) | z_g (G*dv)] and
  [b_g (G) | a_g (G)] (b first). They are de-interleaved once, here, into q | k | v, z, a, b.

The conv1d weight is already in q | k | v channel order in both models (transformers convolves
cat(query, key, value)); `[conv_dim, 1, K]` is squeezed to `[conv_dim, K]`.

`gdn_layer_shards(input_layernorm, linear_attn, tp)` cuts the whole layer's weights into the
arguments of `gdn_layer_tkg` for each of tp ranks, and `split_pools` the state pools the same way.
Rank r takes a contiguous run of key heads and the value heads that read them (value head h reads
key head h // G). Every head's path from in_proj to the gated norm touches no other key-head
group (the gated norm is over dv, per head), so the in_proj columns, conv channels, gates and
states split by head with no communication. out_proj is different: each output element sums over
all value channels, so a rank holds only out_proj.weight.T's rows of its own value heads, its
product is a partial sum of the layer's output, and the ranks add theirs with an all-reduce. The
input RMSNorm runs before the split: it normalises the whole hidden vector, which every rank holds
in full, so its weight is replicated and every rank computes the same normalised input.
"""
import numpy as np
import torch

from .reference import to_numpy

QWEN3_5_PROJECTIONS = ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b")
QWEN3_NEXT_PROJECTIONS = ("in_proj_qkvz", "in_proj_ba")
SHARED_PARAMETERS = ("conv1d.weight", "A_log", "dt_bias", "norm.weight")
HEAD_ATTRIBUTES = ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim")


def gdn_weights(module):
    """The weight arguments of `kernels.gdn_block_tkg` from a transformers GDN module.

    Args:
        module: a `Qwen3_5GatedDeltaNet` (has in_proj_qkv, in_proj_z, in_proj_a, in_proj_b) or a
            `Qwen3NextGatedDeltaNet` (has in_proj_qkvz, in_proj_ba), detected by the parameters
            present; both also need conv1d.weight, A_log, dt_bias, norm.weight and the attributes
            num_k_heads, num_v_heads, head_k_dim, head_v_dim.

    Returns:
        dict of NumPy arrays (bf16 as ml_dtypes.bfloat16), keyed by the kernel's argument names:
        W_in_qkv [H, conv_dim], W_in_z [H, value_dim], W_in_a [H, nv], W_in_b [H, nv] in bf16;
        conv_weight [conv_dim, K], A_log [nv], dt_bias [nv], norm_weight [dv] in fp32.

    Raises:
        ValueError naming what is missing or mis-shaped when the module is neither layout.

    Notes:
        - Qwen3-Next's fused projections are de-interleaved per key-head group: value head
          h = g * G + j belongs to key-head group g, in the same order as HF's
          `fix_query_key_value_ordering`.
        - Weights are rounded to the kernel's dtypes: projections to bf16, the rest to fp32
          (exact for bf16 or fp32 checkpoints).
    """
    params = dict(module.named_parameters())
    missing = [n for n in (*SHARED_PARAMETERS, *HEAD_ATTRIBUTES)
               if n not in params and not hasattr(module, n)]
    if missing:
        raise ValueError(f"{type(module).__name__}: not a GDN module, missing {', '.join(missing)}")
    nk, nv, dk, dv = (int(getattr(module, n)) for n in HEAD_ATTRIBUTES)
    if nv % nk:
        raise ValueError(f"{type(module).__name__}: num_v_heads ({nv}) must be a multiple of "
                         f"num_k_heads ({nk})")

    if all(f"{n}.weight" in params for n in QWEN3_5_PROJECTIONS):
        qkv, z, a, b = (params[f"{n}.weight"].detach() for n in QWEN3_5_PROJECTIONS)
    elif all(f"{n}.weight" in params for n in QWEN3_NEXT_PROJECTIONS):
        qkv, z, a, b = _deinterleave(params["in_proj_qkvz.weight"].detach(),
                                     params["in_proj_ba.weight"].detach(), nk, nv, dk, dv)
    else:
        have = ", ".join(sorted(n.split(".")[0] for n in params if n.startswith("in_proj")))
        have = have or "none"
        raise ValueError(
            f"{type(module).__name__}: expected the Qwen3.5 projections "
            f"{', '.join(QWEN3_5_PROJECTIONS)} or the Qwen3-Next projections "
            f"{', '.join(QWEN3_NEXT_PROJECTIONS)}, found {have}")

    key_dim, value_dim = nk * dk, nv * dv
    expected = {"in_proj qkv": (qkv, 2 * key_dim + value_dim), "in_proj z": (z, value_dim),
                "in_proj a": (a, nv), "in_proj b": (b, nv)}
    for name, (w, rows) in expected.items():
        if w.dim() != 2 or w.shape[0] != rows:
            raise ValueError(f"{type(module).__name__}: {name} weight should have {rows} output "
                             f"rows, got shape {tuple(w.shape)}")
    conv = params["conv1d.weight"].detach()
    if conv.dim() != 3 or conv.shape[:2] != (2 * key_dim + value_dim, 1):
        raise ValueError(f"{type(module).__name__}: conv1d.weight should be [conv_dim, 1, K] with "
                         f"conv_dim = {2 * key_dim + value_dim}, got {tuple(conv.shape)}")

    def bf16_t(w):   # nn.Linear weight [out, H] -> the kernel's [H, out]
        return to_numpy(w.to(torch.bfloat16).t().contiguous())

    def fp32(w):
        return to_numpy(w.to(torch.float32).contiguous())

    return {
        "W_in_qkv": bf16_t(qkv), "W_in_z": bf16_t(z), "W_in_a": bf16_t(a), "W_in_b": bf16_t(b),
        "conv_weight": fp32(conv.squeeze(1)),
        "A_log": fp32(params["A_log"].detach()), "dt_bias": fp32(params["dt_bias"].detach()),
        "norm_weight": fp32(params["norm.weight"].detach()),
    }


def _deinterleave(w_qkvz, w_ba, nk, nv, dk, dv):
    """Qwen3-Next's per-group [q_g | k_g | v_g | z_g] and [b_g | a_g] rows -> (qkv, z, a, b) rows in
    the q | k | v, head-major order of Qwen3.5 (transformers' `fix_query_key_value_ordering`)."""
    G, H = nv // nk, w_qkvz.shape[-1]
    if w_qkvz.shape != (nk * (2 * dk + 2 * G * dv), H) or w_ba.shape != (2 * nv, H):
        raise ValueError(f"in_proj_qkvz / in_proj_ba should be [{nk * (2 * dk + 2 * G * dv)}, H] / "
                         f"[{2 * nv}, H], got {tuple(w_qkvz.shape)} / {tuple(w_ba.shape)}")
    groups = w_qkvz.reshape(nk, 2 * dk + 2 * G * dv, H)
    wq, wk, wv, wz = groups.split([dk, dk, G * dv, G * dv], dim=1)
    qkv = torch.cat([wq.reshape(nk * dk, H), wk.reshape(nk * dk, H), wv.reshape(nv * dv, H)])
    wba = w_ba.reshape(nk, 2 * G, H)
    return qkv, wz.reshape(nv * dv, H), wba[:, G:].reshape(nv, H), wba[:, :G].reshape(nv, H)


def gdn_layer_shards(input_layernorm, linear_attn, tp):
    """Rank by rank, the weight arguments of `kernels.gdn_layer_tkg` for tensor parallelism `tp`.

    Args:
        input_layernorm: the decoder layer's `Qwen3_5RMSNorm` / `Qwen3NextRMSNorm` (weight [H]).
        linear_attn: its `Qwen3_5GatedDeltaNet` / `Qwen3NextGatedDeltaNet`, as for `gdn_weights`,
            with out_proj.
        tp: the number of ranks, a divisor of num_k_heads.

    Returns:
        list of tp dicts of NumPy arrays keyed by the kernel's argument names: rank r's
        W_in_qkv [H, conv_dim / tp] (columns q_r | k_r | v_r), conv_weight (the same channels),
        W_in_z, W_in_a, W_in_b, A_log, dt_bias (its value heads), W_out [value_dim / tp, H] bf16
        (out_proj.weight.T's rows of its value heads); norm_weight and input_norm_weight [H]
        fp32 replicated.

    Raises:
        ValueError naming `tp` when it does not divide num_k_heads, or `input_layernorm.weight`
        when it is not [H].
    """
    w = gdn_weights(linear_attn)
    nk, nv, dk, dv = (int(getattr(linear_attn, n)) for n in HEAD_ATTRIBUTES)
    rank_heads(nk, nv, tp, 0)   # the check of tp
    H = w["W_in_qkv"].shape[0]
    norm = input_layernorm.weight.detach()
    if tuple(norm.shape) != (H,):
        raise ValueError(f"input_layernorm.weight: expected shape [H] = ({H},), got {tuple(norm.shape)}")
    w["input_norm_weight"] = to_numpy(norm.to(torch.float32).contiguous())
    w["W_out"] = to_numpy(linear_attn.out_proj.weight.detach().to(torch.bfloat16).t().contiguous())
    shards = []
    for r in range(tp):
        keys, values = rank_heads(nk, nv, tp, r)
        channels = conv_channels(nk, dk, dv, keys, values)
        cols = slice(values.start * dv, values.stop * dv)
        shards.append({
            "input_norm_weight": w["input_norm_weight"], "norm_weight": w["norm_weight"],
            "W_in_qkv": np.ascontiguousarray(w["W_in_qkv"][:, channels]),
            "conv_weight": np.ascontiguousarray(w["conv_weight"][channels]),
            "W_in_z": np.ascontiguousarray(w["W_in_z"][:, cols]),
            "W_in_a": np.ascontiguousarray(w["W_in_a"][:, values]),
            "W_in_b": np.ascontiguousarray(w["W_in_b"][:, values]),
            "A_log": w["A_log"][values].copy(), "dt_bias": w["dt_bias"][values].copy(),
            "W_out": np.ascontiguousarray(w["W_out"][cols]),
        })
    return shards


def split_pools(conv_state_pool, recurrent_state_pool, num_k_heads, tp):
    """The state pools cut by rank as `gdn_layer_shards` cuts the weights: a list of tp
    (conv_state_pool [N, conv_dim / tp, K] with rank r's q | k | v channels,
    recurrent_state_pool [N, nv / tp, dk, dv] with its value heads), NumPy copies."""
    N, nv, dk, dv = recurrent_state_pool.shape
    conv_dim = 2 * num_k_heads * dk + nv * dv
    if nv % num_k_heads or conv_state_pool.shape[:2] != (N, conv_dim):
        raise ValueError(f"conv_state_pool: expected [N, conv_dim, K] = [{N}, {conv_dim}, K] with nv = "
                         f"{nv} a multiple of num_k_heads = {num_k_heads}, got "
                         f"{list(conv_state_pool.shape)}")
    rank_heads(num_k_heads, nv, tp, 0)   # the check of tp
    pools = []
    for r in range(tp):
        keys, values = rank_heads(num_k_heads, nv, tp, r)
        channels = conv_channels(num_k_heads, dk, dv, keys, values)
        pools.append((np.ascontiguousarray(conv_state_pool[:, channels]),
                      np.ascontiguousarray(recurrent_state_pool[:, values])))
    return pools


def rank_heads(nk, nv, tp, r):
    """Rank r's (key heads, value heads) as slices: contiguous runs of nk / tp and nv / tp, so
    value head h's key head h // G is the rank's own."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or nk % tp:
        raise ValueError(f"tp: expected a divisor of num_k_heads = {nk}, got {tp}")
    kr, vr = nk // tp, nv // tp
    return slice(r * kr, (r + 1) * kr), slice(r * vr, (r + 1) * vr)


def conv_channels(nk, dk, dv, keys, values):
    """The q | k | v channels (of W_in_qkv's columns and the conv's) of the key heads `keys` and
    the value heads `values`, as an index array."""
    key_dim = nk * dk
    return np.concatenate([np.arange(keys.start * dk, keys.stop * dk),
                           key_dim + np.arange(keys.start * dk, keys.stop * dk),
                           2 * key_dim + np.arange(values.start * dv, values.stop * dv)])
