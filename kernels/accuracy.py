"""The project's accuracy rules, in one place: how a kernel's result is compared with the reference.

NumPy only (host code, never called inside a kernel). Tests, notebooks, the sweep and the trn
runner all judge outputs with `compare` / `assert_close`:

  output      atol = rtol = 1e-2 elementwise and cosine similarity >= 0.999, all values finite
  state       atol = rtol = 5e-3 elementwise (the fp32 recurrent state), all values finite
  exact       bit-exact (copies: the conv window a stage kernel shifts, GQA's q, k, v)
  conv_state  the new conv window of a whole decode step: its K - 1 shifted columns bit-exact, its
              new column (the in_proj output, which may round to the other bf16 neighbour when the
              kernel sums in another order than torch) held to the output rule
"""
import numpy as np

OUTPUT, STATE, EXACT, CONV_STATE = "output", "state", "exact", "conv_state"
RULES = (OUTPUT, STATE, EXACT, CONV_STATE)
OUTPUT_TOL = 1e-2          # atol = rtol
OUTPUT_COSINE = 0.999
STATE_TOL = 5e-3           # atol = rtol
# A kernel's output against transformers' CPU fallback, which rounds to bf16 at more points than
# the reference: cosine >= OUTPUT_COSINE and max |kernel - HF| <= HF_OUTPUT_SCALE * max |HF|
# (tests/test_hf_weights.py set it above the worst of 16 seeds); the states keep their rules.
HF_OUTPUT_SCALE = 0.06
# A whole tensor-parallel GDN layer (benchmarks/tp_layer.py: the ranks' all-reduced out_proj
# output, and it plus the residual) against transformers' layer in fp32 on the same bf16
# parameters: cosine at least this at every decode step.
LAYER_COSINE = 0.9999
TOLERANCES = {
    OUTPUT: f"atol = rtol = {OUTPUT_TOL:g} and cosine >= {OUTPUT_COSINE}",
    STATE: f"atol = rtol = {STATE_TOL:g}",
    EXACT: "bit-exact",
    CONV_STATE: f"shifted columns bit-exact, new column atol = rtol = {OUTPUT_TOL:g} "
                f"and cosine >= {OUTPUT_COSINE}",
}


def f64(x):
    return np.asarray(x, dtype=np.float64)


def cosine(a, b):
    """Cosine similarity of two arrays taken as vectors; 1 when both are zero."""
    a, b = f64(a).ravel(), f64(b).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def _bits_equal(got, want):
    return np.array_equal(np.ascontiguousarray(got).view(np.uint8),
                          np.ascontiguousarray(want).view(np.uint8))


def _close(g, w, tol):
    """(ok, problem) of an elementwise atol = rtol = tol comparison of finite float64 arrays."""
    if not np.isfinite(g).all():
        return False, f"{int((~np.isfinite(g)).sum())} non-finite values"
    bad = np.abs(g - w) > tol + tol * np.abs(w)
    if bad.any():
        return False, f"{int(bad.sum())} elements outside atol = rtol = {tol:g}"
    return True, None


def _output_rule(g, w):
    ok, problem = _close(g, w, OUTPUT_TOL)
    c = cosine(g, w)
    if ok and c < OUTPUT_COSINE:
        ok, problem = False, f"cosine {c:.6f} < {OUTPUT_COSINE}"
    return ok, problem


def compare(got, want, rule, name="output"):
    """Judge `got` against `want` under `rule`; a JSON-ready dict with the errors and the verdict.

    Keys: output, rule, tolerance, shape, dtype, max_abs_err, cosine, ok, problem (None when ok).
    """
    if rule not in TOLERANCES:
        raise ValueError(f"rule: expected one of {', '.join(RULES)}, got {rule!r}")
    got, want = np.asarray(got), np.asarray(want)
    row = {"output": name, "rule": rule, "tolerance": TOLERANCES[rule], "shape": list(want.shape),
           "dtype": str(want.dtype), "max_abs_err": None, "cosine": None, "ok": False,
           "problem": None}
    if got.shape != want.shape or got.dtype != want.dtype:
        row["problem"] = (f"got shape {list(got.shape)} {got.dtype}, "
                          f"expected {list(want.shape)} {want.dtype}")
        return row
    g, w = f64(got), f64(want)
    row["max_abs_err"] = float(np.max(np.abs(g - w))) if g.size else 0.0
    row["cosine"] = cosine(g, w)
    if rule == EXACT:
        ok = _bits_equal(got, want)
        problem = None if ok else f"not bit-exact ({int(np.sum(g != w))} elements differ)"
    elif rule == CONV_STATE:
        ok, problem = _bits_equal(got[..., :-1], want[..., :-1]), None
        if not ok:
            differ = int(np.sum(g[..., :-1] != w[..., :-1]))
            problem = f"shifted columns not bit-exact ({differ} elements differ)"
        else:
            ok, problem = _output_rule(g[..., -1], w[..., -1])
            problem = problem and f"new column: {problem}"
    elif rule == OUTPUT:
        ok, problem = _output_rule(g, w)
    else:
        ok, problem = _close(g, w, STATE_TOL)
    row.update(ok=bool(ok), problem=problem)
    return row


def assert_close(got, want, rule, name="output"):
    """`compare`, raising AssertionError naming the output and what failed; returns the dict."""
    row = compare(got, want, rule, name)
    assert row["ok"], f"{name} ({rule}: {row['tolerance']}): {row['problem']}"
    return row
