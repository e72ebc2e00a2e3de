"""kernels.accuracy: each rule passes what it should and fails, naming why, what it should not."""
import ml_dtypes
import numpy as np
import pytest

from kernels.accuracy import CONV_STATE, EXACT, OUTPUT, STATE, assert_close, compare, cosine

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(0)
X = rng.standard_normal((4, 64)).astype(np.float32)


def test_output_rule_tolerance_and_cosine():
    assert compare(X + 0.009, X, OUTPUT)["ok"]
    bad = compare(X + 0.011 + 0.011 * np.abs(X), X, OUTPUT)
    assert not bad["ok"] and "outside atol = rtol = 0.01" in bad["problem"]
    # within the elementwise tolerance everywhere, but pointing elsewhere: cosine fails
    small = np.full((1000,), 0.005, np.float32)
    noisy = (small * np.where(np.arange(1000) % 2, 1.0, -1.0)).astype(np.float32)
    row = compare(noisy, small, OUTPUT)
    assert not row["ok"] and "cosine" in row["problem"]


def test_state_rule_is_tighter_than_output():
    assert compare(X + 0.004, X, STATE)["ok"]
    assert not compare(X + 0.006, X, STATE)["ok"]
    assert compare(X + 0.006, X, OUTPUT)["ok"]


@pytest.mark.parametrize("rule", [OUTPUT, STATE])
def test_non_finite_fails(rule):
    got = X.copy()
    got[1, 2] = np.nan
    row = compare(got, X, rule)
    assert not row["ok"] and "1 non-finite" in row["problem"]


def test_exact_rule_compares_bits():
    a = X.astype(BF16)
    assert compare(a.copy(), a, EXACT)["ok"]
    b = a.copy()
    b[0, 0] = BF16(float(a[0, 0]) + 1)
    assert not compare(b, a, EXACT)["ok"]


def test_conv_state_rule():
    want = rng.standard_normal((2, 8, 4)).astype(BF16)
    got = want.copy()
    got[:, :, -1] = (want[:, :, -1].astype(np.float32) * (1 + 2 ** -8)).astype(BF16)   # a neighbour
    assert compare(got, want, CONV_STATE)["ok"]
    got[0, 0, 0] = BF16(float(want[0, 0, 0]) * 2 + 1)
    row = compare(got, want, CONV_STATE)
    assert not row["ok"] and "shifted columns" in row["problem"]


def test_shape_and_dtype_mismatch_named():
    row = compare(X[:, :10], X, OUTPUT, "out")
    assert not row["ok"] and "shape [4, 10]" in row["problem"]
    assert not compare(X.astype(np.float64), X, OUTPUT)["ok"]


def test_assert_close_names_output_and_rule():
    with pytest.raises(AssertionError, match=r"z \(state: atol = rtol = 0.005\)"):
        assert_close(X + 1, X, STATE, "z")
    assert assert_close(X, X, OUTPUT)["max_abs_err"] == 0


def test_unknown_rule_rejected():
    with pytest.raises(ValueError, match="rule: expected one of"):
        compare(X, X, "loose")


def test_cosine_of_zeros():
    assert cosine(np.zeros(3), np.zeros(3)) == 1.0
    assert cosine(np.zeros(3), np.ones(3)) == 0.0


def test_conv_state_new_column_needs_the_cosine_too():
    """The new column is held to the whole output rule: within atol = rtol everywhere but pointing
    elsewhere fails."""
    want = np.zeros((1, 1000, 4), np.float32)
    want[0, :, -1] = 0.005
    got = want.copy()
    got[0, ::2, -1] = -0.005
    row = compare(got, want, CONV_STATE)
    assert not row["ok"] and row["problem"].startswith("new column: cosine")
