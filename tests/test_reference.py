"""Tests of kernels/reference.py against an independent float64 NumPy model of the same equations.

The NumPy model below is written from the book's GDN chapter (book/gdn/math.md), not from the
torch code: float64 math with explicit per-(batch, head) loops, rounded to bf16 (ml_dtypes,
round-to-nearest-even) at the same points as the reference (projections, conv output, o, final
output).

Tolerances, and why:
- bf16 results of one stage fed identical inputs: at most 1 bf16 ulp apart and bit-equal on at
  least 99 % of elements. The reference accumulates in fp32 and the model in float64; the two
  round to different bf16 neighbours only when the exact value lies within fp32 error of a
  rounding boundary (rare). The 99 % rule catches a systematic rounding error (e.g. truncation)
  that a 1-ulp bound alone would let through.
- fp32 recurrent state of the stage: rtol = atol = 1e-5 (fp32 vs float64 over a dk-long sum of
  O(1) terms: a few fp32 ulps).
- The whole block, end to end: a rare 1-ulp difference in an intermediate bf16 tensor (mixed_qkv,
  conv_out, o) propagates through a whole head (a flipped k element moves every state entry of
  its G value heads by up to |delta| * 2**-7), so bit-equality and elementwise ulp bounds do not
  hold. out and the new recurrent state must instead have rel-RMSE <= 2**-8 (one bf16 rounding;
  measured <= 3e-5) and max |error| <= 2**-5 * max |model| (catches a local blunder that RMS
  would hide). Any wiring error between stages gives O(1) errors. The shifted conv-state columns
  are bit-exact and the new column obeys the stage rule above.
"""
import functools
import math

import numpy as np
import pytest
import torch

from kernels import gated_delta_rule, reference, rmsnorm_gated
from kernels.configs import TEST_SHARDS, GDNShape
from kernels.registry import BLOCK_ARGS
from kernels.gdn_block_checks import MAX_TOKENS
from kernels.reference import (conv1d_decode_ref, gated_delta_rule_ref, gdn_block_tkg_ref,
                               gdn_block_tkg_verify_ref, gqa_repeat_ref, in_proj_ref, make_inputs,
                               rmsnorm_gated_ref, to_numpy, to_torch, token_inputs)

from tests.gdn_float64 import BF16, bf16, f64, np_block, np_delta_rule, silu
from tests.gdn_testing import assert_output_close


# --- comparisons -------------------------------------------------------------------------------

def ulps(actual, expected):
    """|actual - expected| in bf16 ulps of the larger magnitude of the two (both bf16-valued)."""
    a, e = f64(actual), f64(expected)
    mag = np.maximum(np.abs(a), np.abs(e))
    ulp = np.exp2(np.floor(np.log2(np.maximum(mag, 2.0 ** -133))) - 7)
    return np.abs(a - e) / ulp


def assert_bf16_close(actual, expected, min_equal=0.99):
    """torch bf16 `actual` within 1 ulp of NumPy bf16 `expected`, bit-equal on >= min_equal."""
    assert actual.dtype == torch.bfloat16
    actual = to_numpy(actual)
    assert actual.shape == expected.shape and expected.dtype == BF16
    assert np.isfinite(f64(actual)).all()
    assert ulps(actual, expected).max() <= 1
    unequal = np.count_nonzero(f64(actual) != f64(expected))
    assert unequal <= max(1, (1 - min_equal) * actual.size), f"{unequal} of {actual.size} differ"


def assert_block_close(actual, expected):
    """End-to-end rule: rel-RMSE <= 2**-8 and max |error| <= 2**-5 * max |expected|."""
    a, e = f64(to_numpy(actual)), f64(expected)
    assert a.shape == e.shape and np.isfinite(a).all()
    err = np.abs(a - e)
    assert math.sqrt(np.sum(err ** 2)) <= 2 ** -8 * math.sqrt(np.sum(e ** 2))
    assert err.max() <= 2 ** -5 * np.abs(e).max()


def torch_inputs(inp):
    return {name: to_torch(x) for name, x in inp.items()}


# --- shapes ------------------------------------------------------------------------------------

TINY = [  # G = 1, 2, 3, 4; K = 2, 3, 4; dk != dv both ways; B = 1, 2, 3
    GDNShape(B=1, H=128, nk=1, nv=1, dk=16, dv=16, K=2, name="G1-K2"),
    GDNShape(B=2, H=128, nk=2, nv=4, dk=32, dv=16, K=3, name="G2-K3-dk>dv"),
    GDNShape(B=3, H=128, nk=2, nv=6, dk=16, dv=32, K=4, name="G3-K4-dk<dv"),
    GDNShape(B=2, H=256, nk=1, nv=4, dk=32, dv=32, K=4, name="G4-K4"),
    GDNShape(B=3, H=128, nk=2, nv=8, dk=16, dv=24, K=2, name="G4-K2-B3"),
]
SHAPES = TINY + TEST_SHARDS   # the real shards at B = 1
ids = [s.name for s in SHAPES]

DELTA_RULE_ARGS = ("q", "k", "v", "a", "b", "A_log", "dt_bias", "recurrent_state")


@functools.lru_cache(maxsize=None)
def _model(shape):
    inp = make_inputs(shape)
    return inp, np_block(inp, shape.nk)


def stage_inputs(shape, **overrides):
    """Block inputs (seed 0) plus every intermediate and output of the NumPy model, by name.

    Each stage test feeds the model's bf16 intermediates to the reference stage, so the stages
    are compared on identical inputs. Without overrides the result is cached per shape (the real
    shards are costly to draw); callers get a new dict and must not write into its arrays.
    """
    if overrides:
        inp = make_inputs(shape, **overrides)
        return dict(inp, **np_block(inp, shape.nk))
    inp, model = _model(shape)
    return dict(inp, **model)


# --- each stage --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_in_proj(shape):
    s = stage_inputs(shape)
    names = ("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b")
    got = in_proj_ref(*(to_torch(s[n]) for n in names))
    for g, name in zip(got, ("mixed_qkv", "z", "a", "b")):
        assert_bf16_close(g, s[name])


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_conv1d_decode(shape):
    s = stage_inputs(shape)
    conv_out, state = conv1d_decode_ref(*(to_torch(s[n]) for n in ("mixed_qkv", "conv_weight",
                                                                 "conv_state")))
    assert_bf16_close(conv_out, s["conv_out"])
    assert state.dtype == torch.bfloat16
    np.testing.assert_array_equal(to_numpy(state), s["new_conv_state"])


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_gqa_repeat(shape):
    s = stage_inputs(shape)
    got = gqa_repeat_ref(to_torch(s["conv_out"]), shape.nk, shape.dk, shape.dv)
    for g, e in zip(got, (s["q"], s["k"], s["v"])):       # pure data movement: bit-exact
        assert g.dtype == torch.bfloat16
        np.testing.assert_array_equal(to_numpy(g), e)


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_gated_delta_rule(shape):
    s = stage_inputs(shape)
    o, state = gated_delta_rule_ref(*(to_torch(s[n]) for n in DELTA_RULE_ARGS))
    assert_bf16_close(o, s["o"])
    assert state.dtype == torch.float32
    np.testing.assert_allclose(to_numpy(state), s["new_state"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_rmsnorm_gated(shape):
    s = stage_inputs(shape)
    out = rmsnorm_gated_ref(to_torch(s["o"]), to_torch(s["z"]), to_torch(s["norm_weight"]))
    assert_bf16_close(out, s["out"])


# --- the block ---------------------------------------------------------------------------------

def check_block(shape, inp, model=None):
    """Run the reference block on `inp` and compare it with the NumPy model (see module doc)."""
    out, conv_state, state = gdn_block_tkg_ref(**torch_inputs(inp))
    want = model or np_block(inp, shape.nk)
    assert (out.dtype, conv_state.dtype, state.dtype) == (torch.bfloat16, torch.bfloat16,
                                                          torch.float32)
    assert_block_close(out, want["out"])
    np.testing.assert_array_equal(to_numpy(conv_state)[..., :-1], inp["conv_state"][..., 1:])
    assert_bf16_close(conv_state[..., -1], want["new_conv_state"][..., -1])
    assert_block_close(state, want["new_state"])
    return out, conv_state, state


@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_block(shape):
    check_block(shape, *_model(shape))


# --- edge cases (book/gdn/math.md) -----------------------------------------------------------

def test_zero_hidden_and_states_give_exact_zeros():
    shape = TINY[2]
    inp = make_inputs(shape, hidden=0, conv_state=0, recurrent_state=0)
    out, conv_state, state = gdn_block_tkg_ref(**torch_inputs(inp))
    for t in (out, conv_state, state):
        assert torch.equal(t, torch.zeros_like(t))       # l2norm(0) = 0, rmsnorm(0) = 0, no NaN


@pytest.mark.parametrize("shape", [TINY[2], TEST_SHARDS[2]], ids=["tiny", "shard"])
def test_zero_states_fresh_sequence(shape):
    out, _, _ = check_block(shape, make_inputs(shape, conv_state=0, recurrent_state=0))
    assert out.abs().max() > 0


SOFTPLUS_X = np.array([-100, -20, 0, 19.9, 20, 20.1, 30, 100], np.float32)


@pytest.mark.parametrize("A_log", [None, math.log(16.0), 5.0, 20.0])
def test_softplus_extremes_and_large_A(A_log):
    """a + dt_bias hits both sides of the softplus threshold 20; large A makes exp(g) underflow."""
    shape = GDNShape(B=2, H=128, nk=2, nv=len(SOFTPLUS_X), dk=16, dv=32, K=4)
    over = dict(dt_bias=SOFTPLUS_X) if A_log is None else dict(dt_bias=SOFTPLUS_X, A_log=A_log)
    s = stage_inputs(shape, **over)
    s["a"] = np.zeros_like(s["a"])                       # a + dt_bias == dt_bias exactly
    o, state = gated_delta_rule_ref(*(to_torch(s[n]) for n in DELTA_RULE_ARGS))
    want_o, want_state = np_delta_rule(*(s[n] for n in DELTA_RULE_ARGS))  # a changed: recompute
    assert torch.isfinite(state).all()
    assert_bf16_close(o, want_o)
    np.testing.assert_allclose(to_numpy(state), want_state, rtol=1e-5, atol=1e-5)
    check_block(shape, make_inputs(shape, **over))       # and through the whole block


def test_kernels_use_the_reference_eps():
    """The reference states the model's eps values apart from the kernels it checks (so that it
    stays independent of them); the kernels' copies must be the same numbers."""
    assert rmsnorm_gated.RMSNORM_EPS == reference.RMSNORM_EPS
    assert gated_delta_rule.L2NORM_EPS == reference.L2NORM_EPS


def test_l2norm_eps_inside_sqrt_for_small_q_k():
    """|q|, |k| ~ 1e-3: x * rsqrt(sum x^2 + 1e-6) differs by percents from x / max(|x|, eps)."""
    shape = TINY[2]
    s = stage_inputs(shape)
    s["q"], s["k"] = bf16(f64(s["q"]) * 1e-3), bf16(f64(s["k"]) * 1e-3)
    o, state = gated_delta_rule_ref(*(to_torch(s[n]) for n in DELTA_RULE_ARGS))
    want_o, want_state = np_delta_rule(*(s[n] for n in DELTA_RULE_ARGS))
    assert_bf16_close(o, want_o)
    np.testing.assert_allclose(to_numpy(state), want_state, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b_value", [-20.0, 20.0])
def test_beta_extremes(b_value):
    """beta -> 0: the state only decays; beta -> 1: the new state maps k exactly to v."""
    shape = TINY[2]
    s = stage_inputs(shape)
    s["b"] = np.full_like(s["b"], b_value)
    o, state = gated_delta_rule_ref(*(to_torch(s[n]) for n in DELTA_RULE_ARGS))
    want_o, want_state = np_delta_rule(*(s[n] for n in DELTA_RULE_ARGS))
    assert_bf16_close(o, want_o)
    np.testing.assert_allclose(to_numpy(state), want_state, rtol=1e-5, atol=1e-5)

    state = f64(to_numpy(state))
    if b_value < 0:
        sp = np.logaddexp(0.0, f64(s["a"]) + f64(s["dt_bias"]))
        decay = np.exp(-np.exp(f64(s["A_log"])) * sp)
        np.testing.assert_allclose(state, decay[..., None, None] * f64(s["recurrent_state"]),
                                   rtol=1e-5, atol=1e-6)
    else:
        k = f64(s["k"])
        k /= np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        np.testing.assert_allclose(np.einsum("bhij,bhi->bhj", state, k), f64(s["v"]),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("K", [2, 3, 4])
def test_conv_window_orientation(K):
    """One-hot weights pick one window column: w[:, K-1] the new token, w[:, j] state column j+1."""
    B, C = 2, 8
    rng = np.random.default_rng(0)
    columns = np.arange(1, K + 1, dtype=np.float32)      # distinct constants per state column
    conv_state = bf16(np.broadcast_to(columns, (B, C, K)))
    mixed = bf16(rng.standard_normal((B, C)) - 5)         # distinct from every state column
    for hot in range(K):
        weight = np.zeros((C, K), np.float32)
        weight[:, hot] = 1.0
        out, new_state = conv1d_decode_ref(to_torch(mixed), to_torch(weight), to_torch(conv_state))
        picked = mixed if hot == K - 1 else conv_state[:, :, hot + 1]
        np.testing.assert_array_equal(to_numpy(out), bf16(silu(f64(picked))))
        # column 0 of the incoming state never reaches the output
        dropped = conv_state.copy()
        dropped[:, :, 0] = bf16(1e3)
        out2, _ = conv1d_decode_ref(to_torch(mixed), to_torch(weight), to_torch(dropped))
        assert torch.equal(out, out2)
    np.testing.assert_array_equal(to_numpy(new_state)[:, :, :K - 1], conv_state[:, :, 1:])
    np.testing.assert_array_equal(to_numpy(new_state)[:, :, K - 1], mixed)


@pytest.mark.parametrize("nk,G", [(2, 2), (2, 3), (3, 4)])
def test_gqa_is_repeat_interleave_not_tile(nk, G):
    B, dk, dv = 2, 16, 8
    nv = nk * G
    # every key head holds its own constant (q: 1, 2, ..; k: -1, -2, ..), every value head too
    q_part = np.repeat(np.arange(1, nk + 1, dtype=np.float32), dk)
    v_part = np.repeat(np.arange(1, nv + 1, dtype=np.float32), dv) * 10
    row = np.concatenate([q_part, -q_part, v_part])
    conv_out = bf16(np.broadcast_to(row, (B, row.size)))
    q, k, v = (to_numpy(t) for t in gqa_repeat_ref(to_torch(conv_out), nk, dk, dv))
    for h in range(nv):
        assert (f64(q[:, h]) == h // G + 1).all() and (f64(k[:, h]) == -(h // G + 1)).all()
        assert (f64(v[:, h]) == 10 * (h + 1)).all()
    tiled = np.tile(f64(q[:, ::G]), (1, G, 1))           # what `repeat` (tile) would give
    assert not np.array_equal(f64(q), tiled)


@pytest.mark.parametrize("scale", [1e2, 1e4])
def test_large_magnitudes(scale):
    shape = TINY[1]
    inp = make_inputs(shape, seed=3)
    inp["hidden"] = bf16(f64(inp["hidden"]) * scale)
    out, _, state = check_block(shape, inp)
    assert torch.isfinite(out.float()).all() and torch.isfinite(state).all()


# --- several tokens per sequence (the verify step) ----------------------------------------------

TOKENS = [1, 2, 3, 4, 8]


def torch_token_inputs(shape, T):
    """Torch block inputs of `shape` with hidden [B, T, H] (`kernels.reference.token_inputs`)."""
    return torch_inputs(token_inputs(shape, T))


def chained(step, x):
    """`step` (one token: (out, conv_state, state) from a dict of block inputs) over x's T tokens,
    each token's states fed to the next; returns each token's (out [B, value_dim], conv_state,
    state)."""
    conv, state, steps = x["conv_state"], x["recurrent_state"], []
    for t in range(x["hidden"].shape[1]):
        out, conv, state = step(dict(x, hidden=x["hidden"][:, t:t + 1], conv_state=conv,
                                     recurrent_state=state))
        steps.append((out[:, 0], conv, state))
    return steps


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_tokens_match_chained_single_steps(shape, T):
    """T tokens at once equal T one-token steps chained; the two compute stages 1 and 2 in
    different shapes (one GEMM over B * T rows, windows cut from one sequence), so a bf16 result
    may round to another bf16 value (accumulation order): the block's tolerances, and the output
    rule (kernels.accuracy) for the conv windows; bit-exact where no sum is involved."""
    x = torch_token_inputs(shape, T)
    out, conv_states, states = gdn_block_tkg_verify_ref(**x)
    conv_dim = 2 * shape.nk * shape.dk + shape.nv * shape.dv
    assert out.shape == (shape.B, T, shape.nv * shape.dv) and out.dtype == torch.bfloat16
    assert conv_states.shape == (shape.B, T, conv_dim, shape.K)
    assert states.shape == (shape.B, T, shape.nv, shape.dk, shape.dv)
    previous = x["conv_state"]
    for t, (o, conv, state) in enumerate(chained(lambda y: gdn_block_tkg_ref(**y), x)):
        assert_block_close(out[:, t], to_numpy(o))
        assert_block_close(states[:, t], to_numpy(state))
        assert_output_close(to_numpy(conv_states[:, t]), to_numpy(conv), "conv_states")
        # the window slides one column per token: bit for bit
        assert torch.equal(conv_states[:, t, :, :-1], previous[..., 1:])
        previous = conv_states[:, t]
    last = gdn_block_tkg_ref(**x)
    assert torch.equal(last[0], out)
    assert torch.equal(last[1], conv_states[:, -1]) and torch.equal(last[2], states[:, -1])


@pytest.mark.parametrize("T", [2, MAX_TOKENS])
@pytest.mark.parametrize("shape", TINY, ids=[s.name for s in TINY])
def test_tokens_match_the_float64_model(shape, T):
    """Against the NumPy model's one-token step chained T times (its own states fed forward)."""
    x = torch_token_inputs(shape, T)
    out, _, states = gdn_block_tkg_verify_ref(**x)

    def model_step(y):
        r = np_block({name: to_numpy(v) for name, v in y.items()}, shape.nk)
        return r["out"], r["new_conv_state"], r["new_state"]

    conv, state = to_numpy(x["conv_state"]), to_numpy(x["recurrent_state"])
    for t in range(T):
        y = dict(x, hidden=x["hidden"][:, t:t + 1], conv_state=to_torch(conv),
                 recurrent_state=to_torch(state))
        want, conv, state = model_step(y)
        state = state.astype(np.float32)
        assert_block_close(out[:, t], want[:, 0])
        assert_block_close(states[:, t], state)


# --- contract: inputs untouched, bad inputs rejected -------------------------------------------

def _stage_calls(shape):
    s = {n: to_torch(x) for n, x in stage_inputs(shape).items()}
    pick = lambda *names: [s[n] for n in names]  # noqa: E731
    return [
        (in_proj_ref, pick("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b")),
        (conv1d_decode_ref, pick("mixed_qkv", "conv_weight", "conv_state")),
        (gqa_repeat_ref, pick("conv_out") + [shape.nk, shape.dk, shape.dv]),
        (gated_delta_rule_ref, pick(*DELTA_RULE_ARGS)),
        (rmsnorm_gated_ref, pick("o", "z", "norm_weight")),
        (gdn_block_tkg_ref, pick(*BLOCK_ARGS)),
        (gdn_block_tkg_verify_ref, [torch_token_inputs(shape, 3)[name] for name in BLOCK_ARGS]),
    ]


@pytest.mark.parametrize("index", range(7))
def test_inputs_not_modified(index):
    fn, args = _stage_calls(TINY[2])[index]
    before = [a.clone() if torch.is_tensor(a) else a for a in args]
    outs = fn(*args)
    for a, b in zip(args, before):
        assert not torch.is_tensor(a) or torch.equal(a, b)
    for out in outs:                                      # outputs do not alias inputs either
        out.zero_()
    for a, b in zip(args, before):
        assert not torch.is_tensor(a) or torch.equal(a, b)


BASE = GDNShape(B=2, H=128, nk=2, nv=4, dk=16, dv=16, K=4)


def _with(name, delta_rows=0, delta_cols=0):
    """Block inputs of BASE with one argument grown (> 0) or cut (< 0) by rows / columns."""
    inp = make_inputs(BASE)
    x = inp[name]
    if delta_rows:
        x = np.concatenate([x, x[:delta_rows]], axis=0) if delta_rows > 0 else x[:delta_rows]
    if delta_cols:
        x = np.concatenate([x, x[:, :delta_cols]], axis=1) if delta_cols > 0 else x[:, :delta_cols]
    inp[name] = x
    return inp


def _tokens(T):
    """Block inputs of BASE with hidden [B, T, H]."""
    inp = make_inputs(BASE)
    inp["hidden"] = np.repeat(inp["hidden"], T, axis=1)
    return inp


BAD_BLOCK_INPUTS = {
    "conv_weight rows not conv_dim": ("conv_weight", lambda: _with("conv_weight", delta_rows=-1)),
    "W_in_qkv conv_dim mismatch": ("W_in_qkv", lambda: _with("W_in_qkv", delta_cols=1)),
    "conv_state conv_dim mismatch": ("conv_state", lambda: _with("conv_state", delta_cols=1)),
    "nv not divisible by nk": ("W_in_qkv", lambda: make_inputs(GDNShape(B=1, H=128, nk=2, nv=3,
                                                                     dk=16, dv=16, K=4))),
    "H not a multiple of 128": ("hidden", lambda: make_inputs(GDNShape(B=1, H=96, nk=2, nv=4,
                                                                       dk=16, dv=16, K=4))),
    "no token": ("hidden", lambda: _with("hidden", delta_cols=-1)),
    "more tokens than a verify step takes": ("hidden", lambda: _tokens(MAX_TOKENS + 1)),
    "state batch mismatch": ("recurrent_state", lambda: _with("recurrent_state", delta_rows=1)),
    "W_in_z value_dim mismatch": ("W_in_z", lambda: _with("W_in_z", delta_cols=-1)),
    "norm_weight not dv": ("norm_weight", lambda: _with("norm_weight", delta_rows=1)),
}


@pytest.mark.parametrize("case", BAD_BLOCK_INPUTS)
def test_block_rejects_bad_input(case):
    arg, build = BAD_BLOCK_INPUTS[case]
    with pytest.raises(ValueError, match=rf"^{arg}: expected .+, got .+"):
        gdn_block_tkg_ref(**torch_inputs(build()))


def test_stages_reject_bad_shapes():
    s = {n: to_torch(x) for n, x in stage_inputs(BASE).items()}
    with pytest.raises(ValueError, match=r"^hidden: expected .*\[B, 1, H\]"):
        in_proj_ref(s["hidden"][:, 0], s["W_in_qkv"], s["W_in_z"], s["W_in_a"], s["W_in_b"])
    with pytest.raises(ValueError, match=r"^W_in_z: expected"):
        in_proj_ref(s["hidden"], s["W_in_qkv"], s["W_in_z"][1:], s["W_in_a"], s["W_in_b"])
    with pytest.raises(ValueError, match=r"^conv_state: expected"):
        conv1d_decode_ref(s["mixed_qkv"], s["conv_weight"], s["conv_state"][:, :, 1:])
    with pytest.raises(ValueError, match=r"^conv_out: expected"):
        gqa_repeat_ref(s["conv_out"], 3, BASE.dk, BASE.dv)           # nv = 2 not a multiple of 3
    with pytest.raises(ValueError, match=r"^recurrent_state: expected"):
        gated_delta_rule_ref(s["q"], s["k"], s["v"], s["a"], s["b"], s["A_log"], s["dt_bias"],
                             s["recurrent_state"].transpose(-1, -2)[..., :8])
    with pytest.raises(ValueError, match=r"^z: expected"):
        rmsnorm_gated_ref(s["o"], s["z"][:, 1:], s["norm_weight"])


# --- helpers -----------------------------------------------------------------------------------

def test_to_torch_to_numpy_bf16_bit_exact():
    bits = np.arange(2 ** 16, dtype=np.uint16)           # every bf16 pattern, NaN and inf too
    x = bits.view(BF16).reshape(256, 256)
    t = to_torch(x)
    assert t.dtype == torch.bfloat16 and t.shape == (256, 256)
    np.testing.assert_array_equal(t.view(torch.uint16).numpy().ravel(), bits)
    back = to_numpy(t)
    assert back.dtype == BF16
    np.testing.assert_array_equal(back.view(np.uint16).ravel(), bits)
    finite = np.isfinite(x.astype(np.float32))
    np.testing.assert_array_equal(t.float().numpy()[finite], x.astype(np.float32)[finite])


@pytest.mark.parametrize("dtype,torch_dtype", [(np.float32, torch.float32),
                                               (np.float64, torch.float64),
                                               (np.int32, torch.int32)])
def test_to_torch_to_numpy_other_dtypes(dtype, torch_dtype):
    x = (np.random.default_rng(0).standard_normal((3, 5)) * 100).astype(dtype)
    t = to_torch(x)
    assert t.dtype == torch_dtype
    back = to_numpy(t)
    assert back.dtype == dtype
    np.testing.assert_array_equal(back, x)
    t.add_(1)                                             # no memory shared with the input
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(x, to_numpy(t) - 1)


def test_make_inputs_shapes_dtypes_determinism():
    shape = TINY[2]
    s = shape
    want = {
        "hidden": ((s.B, 1, s.H), BF16), "W_in_qkv": ((s.H, s.conv_dim), BF16),
        "W_in_z": ((s.H, s.value_dim), BF16), "W_in_a": ((s.H, s.nv), BF16),
        "W_in_b": ((s.H, s.nv), BF16), "conv_weight": ((s.conv_dim, s.K), np.float32),
        "conv_state": ((s.B, s.conv_dim, s.K), BF16), "A_log": ((s.nv,), np.float32),
        "dt_bias": ((s.nv,), np.float32), "norm_weight": ((s.dv,), np.float32),
        "recurrent_state": ((s.B, s.nv, s.dk, s.dv), np.float32),
    }
    a, b, c = make_inputs(shape, seed=7), make_inputs(shape, seed=7), make_inputs(shape, seed=8)
    assert list(a) == list(want)                          # the block's signature order
    for name, (dims, dtype) in want.items():
        assert a[name].shape == dims and a[name].dtype == dtype, name
        np.testing.assert_array_equal(a[name], b[name])
        assert not np.array_equal(a[name], c[name]), name
    assert (np.exp(a["A_log"]) >= 0.01 - 1e-6).all() and (np.exp(a["A_log"]) <= 16 + 1e-5).all()


def test_make_inputs_magnitudes():
    inp, _ = _model(TEST_SHARDS[0])
    mixed, z, a, b = in_proj_ref(*(to_torch(inp[n]) for n in ("hidden", "W_in_qkv", "W_in_z",
                                                             "W_in_a", "W_in_b")))
    for t in (mixed, z):                                  # projection outputs are O(1)
        assert 0.8 < t.float().std().item() < 1.25
    assert 0.09 < inp["recurrent_state"].std() < 0.11
    assert abs(inp["dt_bias"].mean() - 1) < 0.1 and abs(inp["norm_weight"].mean() - 1) < 0.1


def test_make_inputs_overrides():
    shape = TINY[0]
    state = np.arange(shape.B * shape.conv_dim * shape.K, dtype=np.float64).reshape(
        shape.B, shape.conv_dim, shape.K)
    inp = make_inputs(shape, hidden=0.5, conv_state=state)
    assert inp["hidden"].dtype == BF16 and (f64(inp["hidden"]) == 0.5).all()
    assert inp["conv_state"].dtype == BF16
    np.testing.assert_array_equal(inp["conv_state"], bf16(state))
    base = make_inputs(shape)
    np.testing.assert_array_equal(inp["W_in_qkv"], base["W_in_qkv"])   # others unchanged
    with pytest.raises(ValueError, match="^overrides: expected"):
        make_inputs(shape, hiden=0)
