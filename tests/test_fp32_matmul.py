"""fp32 nc_matmul numerics: the modeled two-pass "bf16x3" mode, and what it does to the state.

nkicpu models an fp32 matmul as TensorE's two passes are read in nkicpu/isa.py (an assumption:
the arithmetic is undocumented): each operand x = hi + lo with hi = bf16(x), lo = bf16(x - hi),
and the products hi*hi + hi*lo + lo*hi, each exact, summed in fp32. So an operand keeps about 16
significant bits and lo*lo is dropped: per product an error of at most about 3 * 2^-16 of
|s| |m|, against 2^-24 for an fp32 multiply. The crafted inputs below have exact results that
tell the two apart; bf16 operands are unchanged (exact products). The last test chains 1000
decode steps of the fused kernel under this mode against the float64 model.
"""
import numpy as np
import pytest

from kernels.configs import GDNShape
from nkicpu import isa
from tests.nkicpu_testing import BF16, F32, assert_bits_equal, load, nisa, nki, nl, rand, run, store
from tests.gdn_testing import assert_output_close
from tests.test_gdn_block_tkg import CHAIN_STATE_RMSE, CHAIN_STEPS, chained_decode

U = 2.0 ** -24                       # fp32 unit roundoff
SPLIT = 3 * 2.0 ** -16 * (1 + 2.0 ** -7)   # bf16x3 per-product error, relative to |s| |m|


def matmul_kernel(s_onezero=False, m_onezero=False):
    @nki.jit
    def k(s, m):
        ps = nl.ndarray((s.shape[1], m.shape[1]), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=load(s), moving=load(m),
                       is_stationary_onezero=s_onezero, is_moving_onezero=m_onezero)
        out = nl.ndarray(ps.shape, nl.float32)
        nisa.tensor_copy(dst=out, src=ps)
        return store(out)
    return k


def column(*values):
    """A [K, 1] fp32 operand."""
    return np.array(values, F32).reshape(-1, 1)


def test_default_mode_is_bf16x3():
    assert isa._fp32_matmul["mode"] == "bf16x3" == isa.FP32_MATMUL_MODES[0]


def test_an_operand_keeps_16_significant_bits():
    """x = 1 + 2^-9 + 2^-20: hi = 1, lo = bf16(2^-9 + 2^-20) = 2^-9, so 2^-20 is lost."""
    x, one = column(1 + 2.0 ** -9 + 2.0 ** -20), column(1.0)
    want = np.float32(1 + 2.0 ** -9)
    assert run(matmul_kernel(), x, one)[0, 0] == want        # x as the stationary
    assert run(matmul_kernel(), one, x)[0, 0] == want        # and as the moving
    with isa.fp32_matmul_numerics("exact"):
        assert run(matmul_kernel(), x, one)[0, 0] == x[0, 0]


def test_the_lo_times_lo_product_is_dropped():
    """(1 + 2^-9)^2 = 1 + 2^-8 + 2^-18, exact in fp32; bf16x3 misses the lo * lo = 2^-18 term."""
    x = column(1 + 2.0 ** -9)
    assert run(matmul_kernel(), x, x)[0, 0] == np.float32(1 + 2.0 ** -8)
    with isa.fp32_matmul_numerics("exact"):
        assert run(matmul_kernel(), x, x)[0, 0] == np.float32(1 + 2.0 ** -8 + 2.0 ** -18)


def test_random_fp32_error_is_16_bit_not_24_bit():
    """Within the bf16x3 bound per element, and well above what exact fp32 products give."""
    s, m = rand((128, 64), seed=1), rand((128, 256), seed=2)
    ref = s.astype(np.float64).T @ m.astype(np.float64)
    scale = np.abs(s.astype(np.float64)).T @ np.abs(m.astype(np.float64))
    err = np.abs(run(matmul_kernel(), s, m) - ref)
    assert np.all(err <= (SPLIT + (s.shape[0] + 2) * U) * scale)
    with isa.fp32_matmul_numerics("exact"):
        exact_err = np.abs(run(matmul_kernel(), s, m) - ref)
    assert np.all(exact_err <= (s.shape[0] + 1) * U * scale)
    assert np.sqrt(np.mean((err / scale) ** 2)) > 8 * np.sqrt(np.mean((exact_err / scale) ** 2))


def test_a_onezero_hint_drops_the_hinted_operands_low_part():
    """On 0/1 data the hint changes nothing; on other data the hinted operand enters as bf16(x)."""
    s01 = (rand((64, 32), seed=3) > 0).astype(F32)
    m = rand((64, 100), seed=4)
    assert_bits_equal(run(matmul_kernel(s_onezero=True), s01, m), run(matmul_kernel(), s01, m))
    assert_bits_equal(run(matmul_kernel(m_onezero=True), m, s01), run(matmul_kernel(), m, s01))
    x, one = column(1 + 2.0 ** -9), column(1.0)
    assert run(matmul_kernel(s_onezero=True), x, one)[0, 0] == 1.0
    assert run(matmul_kernel(m_onezero=True), one, x)[0, 0] == 1.0


def test_bf16_operands_keep_exact_products_in_every_mode():
    s, m = rand((128, 48), BF16, seed=5), rand((128, 96), BF16, seed=6)
    got = run(matmul_kernel(), s, m)
    with isa.fp32_matmul_numerics("exact"):
        assert_bits_equal(got, run(matmul_kernel(), s, m))
    ref = s.astype(np.float64).T @ m.astype(np.float64)
    scale = np.abs(s.astype(np.float64)).T @ np.abs(m.astype(np.float64))
    assert np.all(np.abs(got - ref) <= (s.shape[0] + 1) * U * scale)


def test_mode_restored_after_the_block_and_unknown_mode_rejected():
    with isa.fp32_matmul_numerics("exact"):
        assert isa._fp32_matmul["mode"] == "exact"
    assert isa._fp32_matmul["mode"] == "bf16x3"
    expected = r"mode: expected one of \('bf16x3', 'exact'\), got 'tf32'"
    with pytest.raises(ValueError, match=expected):
        with isa.fp32_matmul_numerics("tf32"):
            pass


# A realistic head size (dk = dv = 128: every Qwen3-Next / Qwen3.5 GDN layer) with long memories:
# exp(A_log) = 0.01 and 0.1, the low end of make_inputs' range U(0.01, 16), decay ~0.987 and ~0.88
# a step, so a rounding error stays in the state for tens of steps instead of vanishing in one.
DRIFT_SHAPE = GDNShape(B=1, H=128, nk=1, nv=2, dk=128, dv=128, name="drift")
DRIFT_A_LOG = np.log([0.01, 0.1])


def test_state_drift_over_1000_steps_under_bf16x3():
    """The state's relative RMSE against the float64 model stays within the project's 1e-3 at
    every step, and every step's out meets the output tolerance."""
    steps = chained_decode(DRIFT_SHAPE, CHAIN_STEPS, A_log=DRIFT_A_LOG)
    for step, (state_err, out, want) in enumerate(steps):
        assert state_err <= CHAIN_STATE_RMSE, f"state rel-RMSE {state_err:.2e} at step {step}"
        assert_output_close(out, want, f"out at step {step}")
