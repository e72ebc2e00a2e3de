"""kernels.hf_weights against transformers' own GDN modules (Qwen3.5 and Qwen3-Next).

One decode step with a seeded cache runs through transformers (`Qwen3_5GatedDeltaNet`,
`Qwen3NextGatedDeltaNet`, its torch fallbacks: this project's `kernels` is rejected by transformers'
hub probe, see tests/test_package_name.py) and through `nki.simulate(kernels.gdn_block_tkg)` on the
loaded weights and the same states. The kernel's output is compared with the module's gated
RMSNorm output (a forward hook on `module.norm`, i.e. before out_proj). transformers is optional:
without it these tests skip.
"""
import importlib.util

import numpy as np
import pytest
import torch

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed (pip install transformers==5.24.0 beside this project)",
                allow_module_level=True)

from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig  # noqa: E402
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet  # noqa: E402
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet  # noqa: E402
from transformers.utils.import_utils import is_kernels_available  # noqa: E402

import kernels  # noqa: E402
import nki  # noqa: E402
from kernels.accuracy import HF_OUTPUT_SCALE, OUTPUT_COSINE  # noqa: E402
from kernels.hf_weights import gdn_weights  # noqa: E402
from kernels.reference import gdn_block_tkg_verify_ref, to_numpy, to_torch  # noqa: E402
from tests.gdn_testing import (assert_bit_exact, assert_output_close, assert_state_close, cosine,  # noqa: E402
                               f64)

B, H, NK, NV, DK, DV, K = 2, 256, 2, 4, 32, 32, 4
G = NV // NK
CONV_DIM = 2 * NK * DK + NV * DV
MODELS = {"qwen3_5": (Qwen3_5TextConfig, Qwen3_5GatedDeltaNet), "qwen3_next": (Qwen3NextConfig, Qwen3NextGatedDeltaNet)}


def make_module(model, seed=0):
    """A bf16 GDN layer of a small random config; the parameters HF initialises to constants
    (norm weight 1, dt_bias 1) are drawn too, so a wrong mapping of them shows."""
    config_cls, module_cls = MODELS[model]
    config = config_cls(hidden_size=H, linear_num_key_heads=NK, linear_num_value_heads=NV, linear_key_head_dim=DK,
                        linear_value_head_dim=DV, linear_conv_kernel_dim=K, num_hidden_layers=1,
                        layer_types=["linear_attention"], num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                        rms_norm_eps=1e-6, hidden_act="silu")
    torch.manual_seed(seed)
    module = module_cls(config, layer_idx=0)
    with torch.no_grad():
        module.norm.weight.copy_(1 + 0.2 * torch.randn(DV))
        module.dt_bias.copy_(1 + 0.5 * torch.randn(NV))
        module.A_log.copy_(torch.log(torch.empty(NV).uniform_(0.01, 16)))
    return config, module.to(torch.bfloat16).eval()


def hf_decode_step(config, module, hidden, conv_state, recurrent_state):
    """transformers' single-token cached decode: (norm output [B, 1, value_dim], new conv state, new
    recurrent state). The cache is seeded through its public update methods: a first conv update of
    exactly K columns is stored as is (LinearAttentionLayer.update_conv_state)."""
    cache = DynamicCache(config=config)
    cache.update_conv_state(conv_state.clone(), 0, conv_kernel_size=K)
    cache.update_recurrent_state(recurrent_state.clone(), 0)
    captured = []
    hook = module.norm.register_forward_hook(lambda mod, args, out: captured.append(out))
    try:
        with torch.no_grad():
            module(hidden, cache=cache)
    finally:
        hook.remove()
    layer = cache.layers[0]
    return captured[0].reshape(B, 1, NV * DV), layer.conv_states[0], layer.recurrent_states[0]


def test_transformers_takes_its_fallback_paths():
    assert not is_kernels_available(), "transformers accepted this project's `kernels` as the hub package"


def decode_inputs(seed=1):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, 1, H, generator=gen).to(torch.bfloat16)
    conv_state = torch.randn(B, CONV_DIM, K, generator=gen).to(torch.bfloat16)
    recurrent_state = 0.1 * torch.randn(B, NV, DK, DV, generator=gen)
    return hidden, conv_state, recurrent_state


def kernel_decode_step(w, hidden, conv_state, recurrent_state):
    return nki.simulate(kernels.gdn_block_tkg)(
        to_numpy(hidden), w["W_in_qkv"], w["W_in_z"], w["W_in_a"], w["W_in_b"], w["conv_weight"],
        to_numpy(conv_state), w["A_log"], w["dt_bias"], w["norm_weight"], to_numpy(recurrent_state))


# estimate: transformers' bf16 fallbacks round at more points than the kernel (conv sum and SiLU
# each rounded to bf16, beta = sigmoid(b) in bf16, the normalised x rounded before the weight:
# book/gdn/math.md, "Dtypes at each point"), so a few outputs differ by more than the 1e-2
# atol/rtol of assert_output_close.
# Over seeds 0..15 per model the worst |kernel - HF| was 0.052 * max|HF out|, the lowest cosine
# 0.99967; a swapped a/b mapping gave cosines down to 0.94 and recurrent-state errors 13-66x the
# 5e-3 tolerance, which the state check (at the project's tolerance) catches.
OUT_SCALE_TOL = HF_OUTPUT_SCALE   # its home: kernels.accuracy


@pytest.mark.parametrize("model", MODELS)
def test_decode_step_matches_transformers(model):
    config, module = make_module(model)
    hidden, conv_state, recurrent_state = decode_inputs()
    want_out, want_conv, want_state = hf_decode_step(config, module, hidden, conv_state, recurrent_state)
    out, new_conv, new_state = kernel_decode_step(gdn_weights(module), hidden, conv_state, recurrent_state)

    assert want_state.dtype == torch.float32 and want_conv.dtype == torch.bfloat16
    assert_state_close(new_state, to_numpy(want_state))
    want_out = to_numpy(want_out)
    assert out.shape == want_out.shape and out.dtype == want_out.dtype
    assert cosine(out, want_out) >= OUTPUT_COSINE
    assert np.abs(f64(out) - f64(want_out)).max() <= OUT_SCALE_TOL * np.abs(f64(want_out)).max()
    want_conv = to_numpy(want_conv)
    assert_bit_exact(np.ascontiguousarray(new_conv[..., :-1]), np.ascontiguousarray(want_conv[..., :-1]),
                     "conv_state shifted columns")
    # The new column is bf16(hidden @ W_in_qkv): fp32 sums in another order may round to the next bf16.
    assert_output_close(np.ascontiguousarray(new_conv[..., -1]), np.ascontiguousarray(want_conv[..., -1]),
                        "conv_state new column")


@pytest.mark.parametrize("model", MODELS)
def test_verify_reference_matches_transformers_token_by_token(model):
    """The torch reference's T-token step against transformers' module run one cached token at a
    time, each token's states fed to the next: every token's output and states."""
    T = 4
    config, module = make_module(model)
    _, conv_state, recurrent_state = decode_inputs()
    hidden = torch.randn(B, T, H, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    w = {name: to_torch(x) for name, x in gdn_weights(module).items()}
    out, conv_states, states = gdn_block_tkg_verify_ref(
        hidden, w["W_in_qkv"], w["W_in_z"], w["W_in_a"], w["W_in_b"], w["conv_weight"], conv_state,
        w["A_log"], w["dt_bias"], w["norm_weight"], recurrent_state)
    conv, state = conv_state, recurrent_state
    for t in range(T):
        want_out, conv, state = hf_decode_step(config, module, hidden[:, t:t + 1], conv, state)
        got, want = to_numpy(out[:, t]), to_numpy(want_out[:, 0])
        assert cosine(got, want) >= OUTPUT_COSINE
        assert np.abs(f64(got) - f64(want)).max() <= OUT_SCALE_TOL * np.abs(f64(want)).max()
        assert_state_close(to_numpy(states[:, t]), to_numpy(state), f"recurrent state, token {t}")
        assert_output_close(to_numpy(conv_states[:, t]), to_numpy(conv), f"conv window, token {t}")


def naive_qwen3_next_split(module):
    """Qwen3-Next's fused rows cut as if they were Qwen3.5's (no de-interleave): the mistake the
    loader exists to avoid."""
    qkvz, ba = module.in_proj_qkvz.weight.detach(), module.in_proj_ba.weight.detach()
    w = gdn_weights(module)
    for name, rows in (("W_in_qkv", qkvz[:CONV_DIM]), ("W_in_z", qkvz[CONV_DIM:]), ("W_in_b", ba[:NV]),
                       ("W_in_a", ba[NV:])):
        w[name] = to_numpy(rows.t().contiguous())
    return w


@pytest.mark.parametrize("mistake", ["a and b swapped", "qwen3_next not de-interleaved"])
def test_wrong_mapping_fails_the_comparison(mistake):
    """The comparison above is sharp enough to catch a wrong weight mapping."""
    model = "qwen3_next" if "qwen3_next" in mistake else "qwen3_5"
    config, module = make_module(model)
    if mistake == "a and b swapped":
        w = gdn_weights(module)
        w["W_in_a"], w["W_in_b"] = w["W_in_b"], w["W_in_a"]
    else:
        w = naive_qwen3_next_split(module)
    hidden, conv_state, recurrent_state = decode_inputs()
    _, _, want_state = hf_decode_step(config, module, hidden, conv_state, recurrent_state)
    _, _, new_state = kernel_decode_step(w, hidden, conv_state, recurrent_state)
    with pytest.raises(AssertionError):
        assert_state_close(new_state, to_numpy(want_state))


def test_qwen3_next_deinterleave_order():
    """Label every row of in_proj_qkvz / in_proj_ba with its index and check where each lands,
    row by row from book/gdn/math.md ("1. in_proj"): group g holds
    [q_g (dk) | k_g (dk) | v_g (G*dv) | z_g (G*dv)] and [b_g (G) | a_g (G)]; value head
    h = g * G + j."""
    _, module = make_module("qwen3_next")
    per_group = 2 * DK + 2 * G * DV
    with torch.no_grad():   # row index r as (r // 16, r % 16): both exact in bf16
        for w in (module.in_proj_qkvz.weight, module.in_proj_ba.weight):
            rows = torch.arange(w.shape[0])
            w.zero_()
            w[:, 0], w[:, 1] = rows // 16, rows % 16
    wts = gdn_weights(module)

    def source_rows(W):   # kernel layout [H, n] -> the in_proj row each column came from
        W = W.astype(np.float32)
        return (W[0] * 16 + W[1]).astype(int).tolist()

    q = [i * per_group + d for i in range(NK) for d in range(DK)]
    k = [i * per_group + DK + d for i in range(NK) for d in range(DK)]
    v = [g * per_group + 2 * DK + j * DV + e for g in range(NK) for j in range(G) for e in range(DV)]
    z = [g * per_group + 2 * DK + G * DV + j * DV + e for g in range(NK) for j in range(G) for e in range(DV)]
    assert source_rows(wts["W_in_qkv"]) == q + k + v
    assert source_rows(wts["W_in_z"]) == z
    assert source_rows(wts["W_in_b"]) == [g * 2 * G + j for g in range(NK) for j in range(G)]
    assert source_rows(wts["W_in_a"]) == [g * 2 * G + G + j for g in range(NK) for j in range(G)]


@pytest.mark.parametrize("model", MODELS)
def test_dtypes_and_shapes(model):
    _, module = make_module(model)
    wts = gdn_weights(module)
    want = {"W_in_qkv": ((H, CONV_DIM), "bfloat16"), "W_in_z": ((H, NV * DV), "bfloat16"),
            "W_in_a": ((H, NV), "bfloat16"), "W_in_b": ((H, NV), "bfloat16"), "conv_weight": ((CONV_DIM, K), "float32"),
            "A_log": ((NV,), "float32"), "dt_bias": ((NV,), "float32"), "norm_weight": ((DV,), "float32")}
    assert {n: (a.shape, a.dtype.name) for n, a in wts.items()} == want
    assert np.array_equal(wts["conv_weight"], module.conv1d.weight.detach().float().squeeze(1).numpy())


def test_missing_projection_is_named():
    _, module = make_module("qwen3_5")
    del module.in_proj_z
    with pytest.raises(ValueError, match="in_proj_qkv, in_proj_z, in_proj_a, in_proj_b or .*, found in_proj_a, "
                                         "in_proj_b, in_proj_qkv$"):
        gdn_weights(module)


def test_not_a_gdn_module_is_named():
    with pytest.raises(ValueError, match="Linear: not a GDN module, missing conv1d.weight, A_log"):
        gdn_weights(torch.nn.Linear(4, 4))
