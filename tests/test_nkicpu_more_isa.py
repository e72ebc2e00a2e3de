"""nkicpu instructions added for the public NKI kernels (tests/nki_public), against NumPy.

bn_stats / bn_aggr (SDK isa stub): per partition, bn_stats gives (count, mean, variance * count) of
the even- and of the odd-indexed free elements, at most 512 of them (nl.tile_size.bn_stats_fmax);
bn_aggr combines any number of such triples into the mean and the (population) variance; both in
fp32, rounded to dst.dtype.
"""
import numpy as np
import pytest

import nkicpu
from nkicpu_testing import BF16, DTYPE_IDS, F32, FLOAT_DTYPES, NkiValidationError, load, nisa, nki, nl, rand, run, store


def stats_of(x):
    """(count, mean, variance * count) of x's rows, in float64."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=1)
    return np.stack([np.full_like(mean, x.shape[1]), mean, ((x - mean[:, None]) ** 2).sum(axis=1)], axis=1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(16, 5), (128, 512), (8, 3, 7)], ids=["odd-free-size", "bn_stats_fmax", "3d"])
def test_bn_stats_even_and_odd_elements(shape, dtype):
    """The free dims are flattened in view order; even and odd positions of that order form the two groups."""
    x = rand(shape, dtype, -3, 5)

    @nki.jit
    def k(x):
        stats = nl.ndarray((shape[0], 6), nl.float32)
        nisa.bn_stats(dst=stats, data=load(x))
        return store(stats)

    flat = x.astype(np.float64).reshape(shape[0], -1)
    want = np.concatenate([stats_of(flat[:, 0::2]), stats_of(flat[:, 1::2])], axis=1)
    np.testing.assert_allclose(run(k, x), want, rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_bn_stats_per_512_tile_then_one_bn_aggr(dtype):
    """The SDK's recipe for a row longer than 512: bn_stats per 512-element tile into columns of one
    stats tile, then one bn_aggr (here also over a partial last tile, and on 64 of 128 partitions)."""
    x = rand((128, 1300), dtype, 0, 100)
    fmax = nl.tile_size.bn_stats_fmax
    n = -(-1300 // fmax)

    @nki.jit
    def k(x):
        xs = load(x)
        stats = nl.ndarray((128, 6 * n), nl.float32)
        for i in range(n):
            nisa.bn_stats(dst=stats[:, nl.ds(6 * i, 6)], data=xs[:, nl.ds(i * fmax, min(fmax, 1300 - i * fmax))])
        mean_var = nl.ndarray((128, 2), nl.float32)
        nisa.bn_aggr(dst=mean_var, data=stats)
        half = nl.ndarray((64, 2), nl.bfloat16)
        nisa.bn_aggr(dst=half, data=stats[0:64, :])
        return store(mean_var), store(half)

    mean_var, half = run(k, x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean_var[:, 0], x64.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(mean_var[:, 1], x64.var(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(half, mean_var[:64].astype(BF16))   # fp32 result rounded once to dst.dtype


def test_bn_stats_one_element_rows_and_bn_aggr_of_empty_odd_groups():
    """A one-element row has no odd elements: that group counts 0 and bn_aggr ignores it."""
    x = rand((4, 1), F32)

    @nki.jit
    def k(x):
        stats = nl.ndarray((4, 6), nl.float32)
        nisa.bn_stats(dst=stats, data=load(x))
        mean_var = nl.ndarray((4, 2), nl.float32)
        nisa.bn_aggr(dst=mean_var, data=stats)
        return store(stats), store(mean_var)

    stats, mean_var = run(k, x)
    np.testing.assert_array_equal(stats[:, 0:3], np.concatenate([np.ones((4, 1)), x, np.zeros((4, 1))], axis=1))
    np.testing.assert_array_equal(stats[:, 3], 0)
    np.testing.assert_array_equal(mean_var, np.concatenate([x, np.zeros((4, 1))], axis=1))


def test_bn_stats_and_bn_aggr_are_recorded_on_vector_engine():
    x = rand((32, 64), BF16)

    @nki.jit
    def k(x):
        stats = nl.ndarray((32, 6), nl.float32)
        nisa.bn_stats(dst=stats, data=load(x))
        mean_var = nl.ndarray((32, 2), nl.float32)
        nisa.bn_aggr(dst=mean_var, data=stats)
        return store(mean_var)

    ins = nkicpu.capture(k)(x).instructions
    assert [(i.opcode, i.engine) for i in ins if i.engine != "dma"] == [("bn_stats", "vector"), ("bn_aggr", "vector")]


BAD_SHAPES = {
    "bn_stats data over 512": (lambda: nisa.bn_stats(dst=sb(8, 6), data=sb(8, 513)), "at most 512"),
    "bn_stats dst not 6": (lambda: nisa.bn_stats(dst=sb(8, 2), data=sb(8, 64)), r"\[8, 6\]"),
    "bn_stats dst partitions": (lambda: nisa.bn_stats(dst=sb(4, 6), data=sb(8, 64)), r"\[8, 6\]"),
    "bn_aggr data not triples": (lambda: nisa.bn_aggr(dst=sb(8, 2), data=sb(8, 7)), "multiple of 3"),
    "bn_aggr dst not 2": (lambda: nisa.bn_aggr(dst=sb(8, 6), data=sb(8, 6)), r"\[8, 2\]"),
}


def sb(*shape):
    t = nl.ndarray(shape, nl.float32)
    nisa.memset(t, 1.0)
    return t


@pytest.mark.parametrize("case", list(BAD_SHAPES))
def test_bn_stats_and_bn_aggr_reject_bad_shapes(case):
    breaks, words = BAD_SHAPES[case]

    @nki.jit
    def k(x):
        breaks()
        return store(load(x))

    with pytest.raises(NkiValidationError, match=r"\[operand-shape\] nisa\.bn_(stats|aggr): .*" + words):
        run(k, np.zeros((2, 2), F32))
