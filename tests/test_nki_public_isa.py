"""Public NKI kernels that use the nisa instructions of nkicpu's isa_* modules and indirect DMA
(tests/nki_public: cumsum, router_top8, indirect_gather) run unmodified under nkicpu and match
NumPy references written here."""
import numpy as np
import pytest

import kernels  # noqa: F401  registers nkicpu as `nki` before the fixtures import it
from gdn_testing import run_unmodified
from nki_public.cumsum import cumsum
from nki_public.indirect_gather import gather_rows
from nki_public.router_top8 import router_top8
from nkicpu_testing import BF16, F32, assert_bits_equal, nki, rand


def simulate(kernel, *args):
    """nki.simulate on NumPy arguments, which must come back unmodified."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    return run_unmodified(lambda *_: nki.simulate(kernel)(*args), *arrays)


@pytest.mark.parametrize("shape", [(5, 40), (130, 9), (2, 3, 2100)])
def test_cumsum_fp32(shape):
    x = rand(shape, seed=len(shape))
    np.testing.assert_allclose(simulate(cumsum, x), np.cumsum(x.astype(np.float64), axis=-1), rtol=1e-5, atol=1e-4)


def test_cumsum_bf16_rounds_each_output_once():
    """One free tile: the scan's fp32 running sum, each output rounded once to bf16."""
    x = rand((16, 300), BF16)
    assert_bits_equal(simulate(cumsum, x), np.cumsum(x.astype(F32), axis=-1, dtype=F32).astype(BF16))


@pytest.mark.parametrize("T,E,k", [(4, 16, 2), (256, 64, 8)])
def test_router_top8(T, E, k):
    logits = np.stack([np.random.default_rng(t).permutation(E) for t in range(T)]).astype(F32) / 7
    values, indices = simulate(router_top8, logits, k)
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    assert_bits_equal(values, np.take_along_axis(logits, order, axis=1))
    assert_bits_equal(indices, order.astype(F32))


@pytest.mark.parametrize("V,F,N", [(50, 12, 16), (300, 8, 200)])
def test_gather_rows(V, F, N):
    table = rand((V, F), BF16)
    indices = np.random.default_rng(N).integers(0, V, (N, 1)).astype(np.uint32)
    assert_bits_equal(simulate(gather_rows, table, indices), table[indices[:, 0]])
