"""An independent float64 NumPy model of the GDN decode step, for the tests.

Written from the book's GDN chapter (book/gdn/math.md), not from the torch code: float64 math
with explicit per-(batch, head) loops, rounded to bf16 (ml_dtypes, round-to-nearest-even) at the
same points as the reference (projections, conv output, o, final output).
tests/test_reference.py checks the torch reference against it; the composition tests use it for
long chained decodes. Only the model's constants (the eps values, softplus's threshold) come from
kernels.reference.
"""
import math

import ml_dtypes
import numpy as np

from kernels.reference import L2NORM_EPS, RMSNORM_EPS, SOFTPLUS_THRESHOLD

BF16 = ml_dtypes.bfloat16


def f64(x):
    return np.asarray(x).astype(np.float64)


def bf16(x):
    return np.asarray(x, dtype=np.float64).astype(BF16)


def sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -np.asarray(x, np.float64)))   # accurate in both tails


def silu(x):
    return x * sigmoid(x)


def np_in_proj(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b):
    x = f64(hidden)[:, 0, :]
    return tuple(bf16(x @ f64(W)) for W in (W_in_qkv, W_in_z, W_in_a, W_in_b))


def np_conv1d(mixed_qkv, conv_weight, conv_state):
    B, C, K = conv_state.shape
    window = np.empty((B, C, K), BF16)
    window[:, :, :K - 1] = conv_state[:, :, 1:]
    window[:, :, K - 1] = mixed_qkv
    acc = np.zeros((B, C))
    for j in range(K):                                    # w[:, j] meets window column j
        acc += f64(window[:, :, j]) * f64(conv_weight[:, j])
    return bf16(silu(acc)), window


def np_gqa(conv_out, nk, dk, dv):
    B, C = conv_out.shape
    nv = (C - 2 * nk * dk) // dv
    G = nv // nk
    q, k, v = np.empty((B, nv, dk), BF16), np.empty((B, nv, dk), BF16), np.empty((B, nv, dv), BF16)
    for h in range(nv):
        kh = h // G                                       # value head h <- key head h // G
        q[:, h] = conv_out[:, kh * dk:(kh + 1) * dk]
        k[:, h] = conv_out[:, nk * dk + kh * dk:nk * dk + (kh + 1) * dk]
        v[:, h] = conv_out[:, 2 * nk * dk + h * dv:2 * nk * dk + (h + 1) * dv]
    return q, k, v


def softplus(x):
    return x if x > SOFTPLUS_THRESHOLD else math.log1p(math.exp(x))


def np_delta_rule(q, k, v, a, b, A_log, dt_bias, state):
    B, nv, dk, dv = state.shape
    o = np.empty((B, nv, dv))
    new_state = np.empty((B, nv, dk, dv))
    for bi in range(B):
        for h in range(nv):
            qh, kh, vh = f64(q[bi, h]), f64(k[bi, h]), f64(v[bi, h])
            qh = qh / math.sqrt(qh @ qh + L2NORM_EPS) / math.sqrt(dk)
            kh = kh / math.sqrt(kh @ kh + L2NORM_EPS)
            g = -math.exp(float(A_log[h])) * softplus(float(a[bi, h]) + float(dt_bias[h]))
            beta = sigmoid(float(b[bi, h]))
            S = math.exp(g) * f64(state[bi, h])
            delta = (vh - S.T @ kh) * beta
            S = S + np.outer(kh, delta)
            new_state[bi, h] = S
            o[bi, h] = S.T @ qh
    return bf16(o), new_state


def np_rmsnorm_gated(o, z, norm_weight):
    B, nv, dv = o.shape
    out = np.empty((B, 1, nv * dv), BF16)
    for h in range(nv):
        x = f64(o[:, h])
        zh = f64(z[:, h * dv:(h + 1) * dv])
        rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMSNORM_EPS)
        y = x / rms * f64(norm_weight) * silu(zh)
        out[:, 0, h * dv:(h + 1) * dv] = bf16(y)
    return out


def np_block(inp, nk):
    """The block by the NumPy model: every intermediate and the three outputs, by name."""
    r = dict(zip(("mixed_qkv", "z", "a", "b"), np_in_proj(
        inp["hidden"], inp["W_in_qkv"], inp["W_in_z"], inp["W_in_a"], inp["W_in_b"])))
    r["conv_out"], r["new_conv_state"] = np_conv1d(r["mixed_qkv"], inp["conv_weight"],
                                                   inp["conv_state"])
    dk, dv = inp["recurrent_state"].shape[2:]
    r["q"], r["k"], r["v"] = np_gqa(r["conv_out"], nk, dk, dv)
    r["o"], r["new_state"] = np_delta_rule(r["q"], r["k"], r["v"], r["a"], r["b"], inp["A_log"],
                                           inp["dt_bias"], inp["recurrent_state"])
    r["out"] = np_rmsnorm_gated(r["o"], r["z"], inp["norm_weight"])
    return r
