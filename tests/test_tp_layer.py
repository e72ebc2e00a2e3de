"""The tensor-parallel GDN layer: kernels.hf_weights' TP loader, kernels.reference's
gdn_layer_tkg_ref against transformers, and benchmarks.tp_layer's multi-process harness (the kernel
on gloo ranks against transformers' layer). transformers is optional: without it these tests skip.
"""
import importlib.util

import numpy as np
import pytest
import torch

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed (pip install transformers==5.24.0 beside this project)",
                allow_module_level=True)

from benchmarks.tp_layer import (MODELS, TINY, build_layer, decode_inputs,  # noqa: E402
                                 hf_layer_steps, run)
from kernels.accuracy import LAYER_COSINE, cosine  # noqa: E402
from kernels.hf_weights import gdn_layer_shards, gdn_weights, split_pools  # noqa: E402
from kernels.reference import gdn_layer_tkg_ref, input_rmsnorm_ref, to_numpy, to_torch  # noqa: E402
from kernels.registry import LAYER_ARGS  # noqa: E402
from tests.gdn_testing import assert_bit_exact, assert_state_close  # noqa: E402

S = TINY   # B 2, H 256, nk 4, nv 8, dk = dv = 32, K 4
STEPS = 3


def same(got, want):
    """Equal dtype, shape and bits."""
    return got.dtype == want.dtype and got.shape == want.shape and np.array_equal(
        np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


def join_channels(parts, tp, axis):
    """Ranks' q_r | k_r | v_r runs along `axis` back into q | k | v."""
    kd, vd = S.key_dim // tp, S.value_dim // tp
    cut = [np.split(p, [kd, 2 * kd], axis=axis) for p in parts]
    assert all(c[2].shape[axis] == vd for c in cut)
    return np.concatenate([c[i] for i in range(3) for c in cut], axis=axis)


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("model", MODELS)
def test_shards_join_back_to_the_unsplit_weights(model, tp):
    """Every rank's pieces, joined in rank order, are the unsplit loader's (gdn_weights: for
    Qwen3-Next the de-interleaved layout) and out_proj.weight.T; the norms are on every rank."""
    _, norm, attn = build_layer(model)
    full, shards = gdn_weights(attn), gdn_layer_shards(norm, attn, tp)
    assert len(shards) == tp and all(set(s) == set(LAYER_ARGS) - {
        "hidden", "conv_state_pool", "recurrent_state_pool", "read_indices", "write_indices"} for s in shards)
    assert same(join_channels([s["W_in_qkv"] for s in shards], tp, 1), full["W_in_qkv"])
    assert same(join_channels([s["conv_weight"] for s in shards], tp, 0), full["conv_weight"])
    for name, axis in (("W_in_z", 1), ("W_in_a", 1), ("W_in_b", 1), ("A_log", 0), ("dt_bias", 0)):
        assert same(np.concatenate([s[name] for s in shards], axis=axis), full[name]), name
    W_out = to_numpy(attn.out_proj.weight.detach().to(torch.bfloat16).t().contiguous())
    assert same(np.concatenate([s["W_out"] for s in shards]), W_out)
    input_norm = norm.weight.detach().numpy()
    assert not (input_norm == 0).all()
    for s in shards:
        assert same(s["norm_weight"], full["norm_weight"])
        assert same(s["input_norm_weight"], input_norm)


def test_qwen3_next_rank_takes_its_key_head_groups():
    """Qwen3-Next rank r's in_proj columns are exactly the in_proj_qkvz / in_proj_ba rows of its
    key-head groups (each group [q_g | k_g | v_g | z_g] and [b_g | a_g]): the row blocks a
    column-parallel in_proj_qkvz / in_proj_ba hands rank r. Every row labelled with its index."""
    tp = 2
    _, norm, attn = build_layer("qwen3_next")
    with torch.no_grad():   # row index r as (r // 16, r % 16): both exact in bf16
        for w in (attn.in_proj_qkvz.weight, attn.in_proj_ba.weight):
            rows = torch.arange(w.shape[0])
            w.zero_()
            w[:, 0], w[:, 1] = rows // 16, rows % 16

    def source_rows(W):
        W = W.astype(np.float32)
        return sorted((W[0] * 16 + W[1]).astype(int).tolist())

    per_group, groups = 2 * S.dk + 2 * S.G * S.dv, S.nk // tp
    for r, s in enumerate(gdn_layer_shards(norm, attn, tp)):
        g0, g1 = r * groups, (r + 1) * groups
        assert source_rows(np.concatenate([s["W_in_qkv"], s["W_in_z"]], axis=1)) == list(
            range(g0 * per_group, g1 * per_group))
        assert source_rows(np.concatenate([s["W_in_b"], s["W_in_a"]], axis=1)) == list(
            range(g0 * 2 * S.G, g1 * 2 * S.G))


@pytest.mark.parametrize("tp", [2, 4])
def test_pools_split_as_the_weights(tp):
    """split_pools cuts the conv channels as W_in_qkv's columns and the states by value head."""
    _, conv_pool, state_pool, _ = decode_inputs(S, 1)
    conv_pool, state_pool = to_numpy(conv_pool), to_numpy(state_pool)
    pools = split_pools(conv_pool, state_pool, S.nk, tp)
    assert same(join_channels([c for c, _ in pools], tp, 1), conv_pool)
    assert same(np.concatenate([s for _, s in pools], axis=1), state_pool)


@pytest.mark.parametrize("tp", [3, 8, 0])
def test_tp_that_does_not_divide_the_key_heads_is_refused(tp):
    _, norm, attn = build_layer("qwen3_5")
    message = f"^tp: expected a divisor of num_k_heads = {S.nk}, got {tp}$"
    with pytest.raises(ValueError, match=message):
        gdn_layer_shards(norm, attn, tp)
    _, conv_pool, state_pool, _ = decode_inputs(S, 1)
    with pytest.raises(ValueError, match=message):
        split_pools(to_numpy(conv_pool), to_numpy(state_pool), S.nk, tp)


@pytest.mark.parametrize("model", MODELS)
def test_input_rmsnorm_ref_is_transformers_bit_for_bit(model):
    """input_rmsnorm_ref against the model's own RMSNorm run in bf16 (its fp32 math, one
    rounding)."""
    _, norm, _ = build_layer(model)
    hidden = decode_inputs(S, 1)[0][0]
    with torch.no_grad():
        want = norm.to(torch.bfloat16)(hidden)
    assert_bit_exact(to_numpy(input_rmsnorm_ref(hidden, norm.weight.detach().float())), to_numpy(want),
                     "input RMSNorm")


def ref_steps(shard, hidden, conv_pool, state_pool, read, write):
    """gdn_layer_tkg_ref step by step on its returned pools: (partials, conv pool, state pool)."""
    partials = []
    for x in hidden:
        args = dict(shard, hidden=x, conv_state_pool=conv_pool, recurrent_state_pool=state_pool,
                    read_indices=read, write_indices=write)
        partial, conv_pool, state_pool = gdn_layer_tkg_ref(*(args[n] for n in LAYER_ARGS))
        partials.append(partial)
    return torch.stack(partials), conv_pool, state_pool


@pytest.mark.parametrize("model", MODELS)
def test_layer_reference_at_tp1_matches_transformers(model):
    """gdn_layer_tkg_ref on the whole layer (tp = 1) over STEPS cached decode steps, against
    transformers' input_layernorm + linear_attn (+ residual): every step's outputs, the final
    states in the sequences' slots, the spare slots untouched."""
    config, norm, attn = build_layer(model)
    hidden, conv_pool, state_pool, slots = decode_inputs(S, STEPS)
    want_attn, want_out, want_conv, want_state = hf_layer_steps(
        config, norm, attn, hidden, conv_pool[slots.long()], state_pool[slots.long()])
    shard = {n: to_torch(x) for n, x in gdn_layer_shards(norm, attn, 1)[0].items()}
    partials, new_conv, new_state = ref_steps(shard, hidden, conv_pool, state_pool, slots,
                                              slots[:, None].clone())
    assert partials.dtype == torch.float32 and partials.shape == want_attn.shape
    for t in range(STEPS):
        assert cosine(partials[t], want_attn[t]) >= LAYER_COSINE, f"attention output, step {t}"
        out = partials[t].to(torch.bfloat16) + hidden[t]
        assert cosine(out.float(), want_out[t]) >= LAYER_COSINE, f"layer output, step {t}"
    assert_state_close(to_numpy(new_state[slots.long()]), to_numpy(want_state))
    assert cosine(new_conv[slots.long()].float(), want_conv) >= LAYER_COSINE
    spare = torch.ones(len(state_pool), dtype=torch.bool)
    spare[slots.long()] = False
    assert same(to_numpy(new_state[spare]), to_numpy(state_pool[spare]))
    assert same(to_numpy(new_conv[spare]), to_numpy(conv_pool[spare]))


def test_layer_reference_padding_row_is_zero():
    """A padding row (read index -1) gives a partial of exact zeros and leaves the live row's
    result as it is alone."""
    _, norm, attn = build_layer("qwen3_5")
    hidden, conv_pool, state_pool, slots = decode_inputs(S, 1)
    shard = {n: to_torch(x) for n, x in gdn_layer_shards(norm, attn, 2)[1].items()}
    conv_pool, state_pool = split_pools(to_numpy(conv_pool), to_numpy(state_pool), S.nk, 2)[1]
    conv_pool, state_pool = to_torch(conv_pool), to_torch(state_pool)
    read = slots.clone()
    read[1] = -1
    write = read[:, None].clone()
    padded, _, _ = ref_steps(shard, hidden, conv_pool, state_pool, read, write)
    alone, _, _ = ref_steps(shard, hidden[:, :1], conv_pool, state_pool, read[:1], write[:1])
    assert (padded[0, 1] == 0).all() and not (padded[0, 0] == 0).all()
    assert same(to_numpy(padded[:, :1]), to_numpy(alone))


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("model", MODELS)
def test_tp_harness_matches_transformers(model, tp):
    """tp gloo rank processes (one at tp = 1) run the kernel on their shards and pools for STEPS decode steps;
    the all-reduced attention output and the layer output match transformers' at every step."""
    report = run(tp=tp, model=model, steps=STEPS, batch=S.B, seed=0)
    assert len(report["attn_cosine"]) == len(report["layer_cosine"]) == STEPS
    assert min(report["attn_cosine"]) >= LAYER_COSINE, report
    assert min(report["layer_cosine"]) >= LAYER_COSINE, report
    assert report["ok"]
