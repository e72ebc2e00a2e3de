"""NkiTensor views and indexing, nl.* helpers, and how kernels run (jit, simulate, imports).

View semantics follow the NkiTensor docstrings of the SDK 2.32 stubs:
on-chip tensors keep the partition dim first (an integer index leaves it as size 1, results are
at least 2-D); HBM integer indices drop the dim (results at least 1-D). Every view is checked by
copying what it addresses out of the kernel and comparing with the same NumPy view.
"""
import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import nkicpu
from nkicpu_testing import F32, assert_bits_equal, load, nisa, nki, nl, rand, store

REPO = pathlib.Path(__file__).resolve().parents[1]


@nki.jit
def view_kernel(x, make_view, on_chip):
    """Copy out exactly what `make_view(t)` addresses, t being `x` in SBUF (on_chip) or in HBM."""
    t = load(x) if on_chip else x
    v = make_view(t)
    out = nl.ndarray(v.shape, v.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=v)
    return out


X = np.arange(8 * 4 * 6, dtype=F32).reshape(8, 4, 6)   # distinct values: a wrong element shows


def check_view(make_view, on_chip, want):
    got = nki.simulate(view_kernel)(X, make_view, on_chip)
    assert got.shape == want.shape
    assert_bits_equal(got, np.ascontiguousarray(want))


# -- indexing ---------------------------------------------------------------------------------

@pytest.mark.parametrize("key,shape", [
    ((3,), (1, 4, 6)),                  # int on the partition dim keeps it, size 1
    ((3, 2), (1, 6)),
    ((3, 2, 5), (1, 1)),                # at least 2-D
    ((slice(None), 2), (8, 6)),         # int on a free dim drops it
    ((slice(None), 2, 5), (8, 1)),      # ... unless the result would be 1-D
    ((Ellipsis, 0), (8, 4)),
    ((-1, slice(-3, None)), (1, 3, 6)),
    ((slice(1, 7, 2), slice(None), slice(None, None, 2)), (3, 4, 3)),
])
def test_on_chip_indexing(key, shape):
    np_view = X[key]
    check_view(lambda t: t[key], True, np_view.reshape(shape))


@pytest.mark.parametrize("key,shape", [((3,), (4, 6)), ((3, 2), (6,)), ((3, 2, 5), (1,)), ((-2, -1), (6,)),
                                       ((slice(None), 1, slice(2, 5)), (8, 3))])
def test_hbm_indexing_drops_integer_dims(key, shape):
    check_view(lambda t: t[key], False, X[key].reshape(shape))


def test_dynamic_slice_is_a_slice():
    check_view(lambda t: t[nl.ds(2, 4), :, nl.ds(1, 3)], True, X[2:6, :, 1:4])
    check_view(lambda t: t[nl.ds(5, 3)], False, X[5:8])


@pytest.mark.parametrize("key", [(8,), (-9,), (slice(None), 4), (slice(0, 9),), (slice(3, 3),)])
def test_out_of_range_and_empty_indices_raise(key):
    with pytest.raises(IndexError):
        nki.simulate(view_kernel)(X, lambda t: t[key], True)


def test_tensor_attributes():
    @nki.jit
    def k(x):
        t = nl.ndarray((8, 4, 6), nl.bfloat16, buffer=nl.sbuf, name="tile")
        v = t[:, 1:3, ::2]
        assert (t.shape, t.ndim, t.size, t.name, t.buffer) == ((8, 4, 6), 3, 192, "tile", nl.sbuf)
        assert t.dtype == nl.bfloat16 and t.strides == (24, 6, 1) and t.offset == 0
        assert v.shape == (8, 2, 3) and v.strides == (24, 6, 2) and v.offset == 6
        assert x.buffer == nl.hbm and nl.is_hbm(x.buffer) and nl.is_on_chip(t.buffer) and nl.is_sbuf(t.buffer)
        return store(load(x))

    nki.simulate(k)(np.zeros((2, 2), F32))


# -- reshaping views --------------------------------------------------------------------------

@pytest.mark.parametrize("on_chip", [True, False], ids=["sbuf", "hbm"])
def test_reshape_of_contiguous_layout(on_chip):
    check_view(lambda t: t.reshape((8, 24)), on_chip, X.reshape(8, 24))
    check_view(lambda t: t.reshape((8, 2, -1)), on_chip, X.reshape(8, 2, 12))
    check_view(lambda t: t[:, 1:3, :].reshape((8, 12)), on_chip, X[:, 1:3, :].reshape(8, 12))  # rows stay contiguous


def test_hbm_reshape_may_move_the_first_dim():
    check_view(lambda t: t.reshape((32, 6)), False, X.reshape(32, 6))
    check_view(lambda t: t.reshape((-1,)), False, X.reshape(-1))


@pytest.mark.parametrize("on_chip", [True, False], ids=["sbuf", "hbm"])
def test_reshape_of_non_contiguous_layout_is_rejected(on_chip):
    with pytest.raises(ValueError, match="not contiguous enough for shape"):
        nki.simulate(view_kernel)(X, lambda t: t[:, :, 0:3].reshape((8, 12)), on_chip)
    with pytest.raises(ValueError, match="not contiguous enough for shape"):
        nki.simulate(view_kernel)(X, lambda t: t.permute((0, 2, 1)).reshape((8, 24)), on_chip)
    with pytest.raises(ValueError, match="cannot reshape 192 elements"):
        nki.simulate(view_kernel)(X, lambda t: t.reshape((8, 25)), on_chip)


def test_on_chip_views_keep_the_partition_dim():
    for bad, words in [(lambda t: t.reshape((32, 6)), "keep partition dim 8"),
                       (lambda t: t.permute((1, 0, 2)), "keep the partition dim first"),
                       (lambda t: t.expand_dim(0), "partition dim"),
                       (lambda t: t[0:1].squeeze_dim(0), "partition dim"),
                       (lambda t: t[0:1].broadcast(0, 4), "partition dim"),
                       (lambda t: t.reshape_dim(0, (2, 4)), "cannot be split"),
                       (lambda t: t.flatten_dims(0, 1), "start_dim must be > 0"),
                       (lambda t: t[0:1].broadcast(-3, 4), "partition dim"),      # negative dims count from the end
                       (lambda t: t.expand_dim(-4), "partition dim"),
                       (lambda t: t.flatten_dims(-3, -2), "start_dim must be > 0")]:
        with pytest.raises(ValueError, match=words):
            nki.simulate(view_kernel)(X, bad, True)


@pytest.mark.parametrize("on_chip", [True, False], ids=["sbuf", "hbm"])
def test_view_methods(on_chip):
    check_view(lambda t: t.permute((0, 2, 1)), on_chip, X.transpose(0, 2, 1))
    check_view(lambda t: t[:, 0:1, :].broadcast(1, 5), on_chip, np.broadcast_to(X[:, 0:1, :], (8, 5, 6)))
    check_view(lambda t: t.expand_dim(1), on_chip, X[:, None])
    check_view(lambda t: t[:, 0:1, :].squeeze_dim(1), on_chip, X[:, 0, :])
    check_view(lambda t: t.reshape_dim(2, (3, -1)), on_chip, X.reshape(8, 4, 3, 2))
    check_view(lambda t: t.reshape_dim(0, (8,)), on_chip, X)                       # trivial split of dim 0
    check_view(lambda t: t.flatten_dims(1, 2), on_chip, X.reshape(8, 24))
    check_view(lambda t: t.slice(2, 1, 6, 2), on_chip, X[:, :, 1:6:2])
    check_view(lambda t: t.select(1, 3), on_chip, X[:, 3, :])
    check_view(lambda t: t.expand_dim(-1), on_chip, X[..., None])
    check_view(lambda t: t[:, :, 0:1].broadcast(-1, 2), on_chip, np.broadcast_to(X[:, :, 0:1], (8, 4, 2)))
    check_view(lambda t: t.flatten_dims(-2, -1), on_chip, X.reshape(8, 24))
    with pytest.raises(ValueError, match="contiguous enough"):
        nki.simulate(view_kernel)(X, lambda t: t.permute((0, 2, 1)).flatten_dims(1, 2), on_chip)
    with pytest.raises(ValueError, match="must have size 1"):
        nki.simulate(view_kernel)(X, lambda t: t.broadcast(1, 5), on_chip)


def test_hbm_views_may_move_dim_0():
    check_view(lambda t: t.permute((2, 0, 1)), False, X.transpose(2, 0, 1))
    check_view(lambda t: t.select(0, 5), False, X[5])
    check_view(lambda t: t.flatten_dims(0, 1), False, X.reshape(32, 6))


# -- access patterns --------------------------------------------------------------------------

def test_ap_on_chip():
    row = 4 * 6
    check_view(lambda t: t.ap([[row, 8], [1, row]]), True, X.reshape(8, row))
    check_view(lambda t: t.ap([[row, 8], [0, 3], [6, 4]], offset=1), True,
               np.broadcast_to(X[:, None, :, 1], (8, 3, 4)))            # stride 0: a broadcast operand
    check_view(lambda t: t[2:5].ap([[row, 3], [1, 6]]), True, X[2:5, 0, :])  # offset=None inherits the view's base
    check_view(lambda t: t[2:5].ap([[row, 3], [1, 6]], offset=6), True, X[2:5, 1, :])


def test_ap_on_chip_partition_rules():
    for pattern, offset, words in [([[12, 8], [1, 12]], None, "partition\\) step must be the allocation's 24"),
                                   ([[24, 8], [1, 25]], None, "a partition holds 24"),
                                   ([[24, 8], [1, 6]], 20, "a partition holds 24")]:
        with pytest.raises(ValueError, match=words):
            nki.simulate(view_kernel)(X, lambda t: t.ap(pattern, offset=offset), True)
    with pytest.raises(IndexError, match="leaves the allocation"):
        nki.simulate(view_kernel)(X, lambda t: t.ap([[24, 8], [1, 24]], offset=24), True)


def test_ap_on_hbm_is_any_pattern_over_flat_storage():
    flat = X.ravel()
    check_view(lambda t: t.ap([[1, 5], [1, 3]], offset=7), False, flat[7 + np.arange(5)[:, None] + np.arange(3)])  # im2col
    check_view(lambda t: t.ap([[0, 4], [1, 6]], offset=6), False, np.broadcast_to(flat[6:12], (4, 6)))


def test_is_contiguous_and_get_pattern():
    item = X.itemsize
    views = []   # (view, NumPy view, on chip) made by the kernel, checked by the host code below

    @nki.jit
    def k(x):
        t = load(x)
        views.extend([(t, X, True), (t[:, 1:3, :], X[:, 1:3, :], True),
                      (t[:, :, ::2], X[:, :, ::2], True), (t[1:7:2], X[1:7:2], True),
                      (x[1:3], X[1:3], False), (x[1:7:2], X[1:7:2], False),
                      (x[:, :, 0:3], X[:, :, 0:3], False),
                      (t[:, 0:1].broadcast(1, 3), np.broadcast_to(X[:, 0:1], (8, 3, 6)), True)])
        assert t[1:7:2].is_contiguous() and not x[1:7:2].is_contiguous()   # the partition step does not count
        return store(t)

    nki.simulate(k)(X)
    assert len(views) == 8
    for view, np_view, on_chip in views:
        assert view.get_pattern() == [[s // item, n] for s, n in zip(np_view.strides, np_view.shape)]
        # Contiguous per partition on chip (the partition stride is not a memory stride); row-major in HBM.
        free = np_view[0] if on_chip else np_view
        want = all(s == free.itemsize * int(np.prod(free.shape[d + 1:])) or n == 1
                   for d, (s, n) in enumerate(zip(free.strides, free.shape)))
        assert view.is_contiguous() == want, (view, want)


def test_get_pattern_round_trips_through_ap():
    check_view(lambda t: t[:, 1:3, ::2].ap(t[:, 1:3, ::2].get_pattern()), True, X[:, 1:3, ::2])


# -- nl constants, SPMD queries, loops --------------------------------------------------------

def test_tile_size_values():
    ts = nl.tile_size
    assert (ts.pmax, ts.gemm_stationary_fmax, ts.gemm_moving_fmax) == (128, 128, 512)        # TensorE limits
    assert ts.psum_bank_fmax == ts.psum_fmax == 512 and ts.psum_bank_fmax_bytes == ts.psum_bank_fmax * 4
    assert ts.psum_num_banks * ts.psum_bank_fmax_bytes == 16 * 1024                          # PSUM per partition
    assert ts.sbuf_fmax_bytes == 224 * 1024                                                  # trn2 SBUF per partition
    assert ts.total_available_sbuf_size == 224 * 1024 - 16384 - 8                             # less the runtime's region
    assert ts.sbuf_size_bytes == ts.pmax * ts.sbuf_fmax_bytes == 28 * 2**20
    assert ts.sbuf_fmax == ts.sbuf_fmax_bytes // 4 and ts.bn_stats_fmax == 512


def test_spmd_queries_without_a_grid():
    @nki.jit
    def k(x):
        assert (nl.program_id(0), nl.program_id(axis=0), nl.num_programs(), nl.num_programs(axes=0),
                nl.program_ndim()) == (0, 0, 1, 1, 0)
        return store(load(x))

    nki.simulate(k)(np.zeros((1, 1), F32))


@pytest.mark.parametrize("args", [(5,), (2, 9), (1, 10, 3), (0,)])
def test_loop_ranges_are_python_ranges(args):
    for r in (nl.affine_range, nl.sequential_range, nl.static_range):
        assert list(r(*args)) == list(range(*args))


# -- running kernels --------------------------------------------------------------------------

@nki.jit
def scale_block(x, factor):
    """A jit kernel that a bigger kernel calls: it is inlined into the caller's run."""
    y = nl.ndarray(x.shape, nl.float32)
    nisa.tensor_scalar(dst=y, data=load(x), op0=nl.multiply, operand0=factor)
    return y


def test_jit_kernel_called_from_a_kernel_is_inlined():
    @nki.jit
    def outer(x):
        a = scale_block(x, 2.0)            # returns an SBUF tile, as a building block does
        b = nl.ndarray(x.shape, nl.float32)
        nisa.tensor_tensor(dst=b, data1=a, data2=load(x), op=nl.add)
        return store(b)

    x = rand((8, 16), F32)
    c = nkicpu.capture(outer)(x)
    assert_bits_equal(c.outputs, x * F32(2) + x)
    assert [i.opcode for i in c.instructions] == ["dma_copy", "tensor_scalar", "dma_copy", "tensor_tensor", "dma_copy"]


@nki.jit
def copy_kernel(x):
    return store(load(x))


def test_simulating_a_kernel_inside_a_running_kernel_fails_and_leaves_no_run_behind():
    @nki.jit
    def outer(x):
        return nki.simulate(scale_block)(x)

    x = rand((8, 16), F32)
    with pytest.raises(RuntimeError, match=r"a kernel is already running; a nested @nki.jit call is inlined"):
        nki.simulate(outer)(x)
    with pytest.raises(RuntimeError, match=r"nl.ndarray is only valid inside a running kernel"):
        nl.ndarray((8, 16), nl.float32)
    assert_bits_equal(nki.simulate(copy_kernel)(x), x)   # the failed run is over: the next one runs


def test_every_run_numbers_its_allocations_from_1():
    """Two runs of one kernel name the same allocations with the same ids: nothing carries over."""
    @nki.jit
    def twice(x):
        return store(load(x)), store(load(x))

    x = rand((4, 8), F32)
    a, b = nkicpu.capture(twice)(x), nkicpu.capture(twice)(x)
    ids = [a.arguments[0]] + list(a.allocations)
    assert ids == list(range(1, len(ids) + 1))        # the argument first, then in allocation order
    assert (a.arguments, a.allocations) == (b.arguments, b.allocations)
    assert [(i.reads, i.writes) for i in a.instructions] == [(i.reads, i.writes) for i in b.instructions]


def test_runs_in_two_threads_at_once_are_independent():
    """The running kernel is per thread: two threads simulate at the same time, each in its own run."""
    both_running = threading.Barrier(2, timeout=10)

    @nki.jit
    def copy(x):
        t = load(x)
        both_running.wait()                   # both threads are inside their runs here
        return store(t)

    xs = [rand((4, 8), F32, seed=s) for s in (1, 2)]
    results = [None, None]

    def simulate(k):
        results[k] = nkicpu.capture(copy)(xs[k])

    threads = [threading.Thread(target=simulate, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, c in zip(xs, results):
        assert_bits_equal(c.outputs, x)
        assert len(c.instructions) == 2 and c.arguments == {0: 1}


def test_simulate_returns_one_array_or_a_tuple():
    @nki.jit
    def one(x):
        return store(load(x))

    @nki.jit
    def two(x):
        return store(load(x)), store(load(x[0:1]))

    x = rand((4, 4), F32)
    got = nki.simulate(one)(x)
    assert isinstance(got, np.ndarray)
    a, b = nki.simulate(two)(x)
    assert_bits_equal(a, x) and assert_bits_equal(b, x[0:1])
    assert isinstance(nki.simulate(two)(x), tuple)
    assert_bits_equal(one(x), x)          # a jit kernel called with NumPy arrays outside a kernel runs on nkicpu


def test_kernel_writing_its_input_updates_the_callers_array():
    @nki.jit
    def bump(state):
        s = load(state)
        nisa.tensor_scalar(dst=s, data=s, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=state, src=s)            # in place, as the SDK simulator allows
        return store(s)

    state = rand((4, 8), F32)
    before = state.copy()
    out = nki.simulate(bump)(state)
    assert_bits_equal(state, before + F32(1))
    assert_bits_equal(out, state)


def test_kernel_not_writing_its_input_leaves_it_bit_identical():
    @nki.jit
    def read_only(x):
        return store(load(x))

    x = rand((4, 8), F32)
    x.ravel()[:3] = [np.nan, -0.0, np.inf]
    x.view(np.uint32).ravel()[0] |= 0x123                 # a NaN payload
    x.flags.writeable = True
    before = x.tobytes()
    nki.simulate(read_only)(x)
    assert x.tobytes() == before


def test_zero_written_over_negative_zero_reaches_the_caller():
    """Write-back compares bits: storing +0.0 over -0.0 is a write, though -0.0 == 0.0."""
    @nki.jit
    def zero(x):
        z = nl.ndarray(x.shape, x.dtype)
        nisa.memset(dst=z, value=0.0)
        nisa.dma_copy(dst=x, src=z)
        return store(z)

    x = np.full((2, 2), -0.0, F32)
    nki.simulate(zero)(x)
    assert not np.any(np.signbit(x))


# -- import kernels, nki ----------------------------------------------------------------------

def _import_nki(sdk_dir, force):
    """`import kernels, nki` in a fresh interpreter, with a stand-in Neuron SDK on the path if sdk_dir."""
    env = {k: v for k, v in os.environ.items() if k != "NKICPU"}
    env["PYTHONPATH"] = os.pathsep.join(([str(sdk_dir)] if sdk_dir else []) + [str(REPO)])
    if force:
        env["NKICPU"] = "1"
    code = textwrap.dedent("""
        import kernels, nki
        import nki.language as nl, nki.isa as nisa
        print(kernels.NKI_BACKEND, nki.__name__, getattr(nki, "FAKE_NEURON_SDK", False), nl.__name__)
    """)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_import_kernels_makes_nki_the_cpu_model_without_the_sdk():
    import kernels
    if kernels.NKI_BACKEND != "nkicpu":
        pytest.skip("the Neuron SDK is installed here")
    assert sys.modules["nki"] is nkicpu and nki is nkicpu
    assert sys.modules["nki.language"] is nkicpu.language and sys.modules["nki.isa"] is nkicpu.isa


def test_import_kernels_prefers_the_sdk_and_nkicpu_1_forces_the_model(tmp_path):
    pkg = tmp_path / "nki"                     # stands in for the Neuron SDK's nki package
    pkg.mkdir()
    # `import kernels` imports the fused kernel, whose module applies @nki.jit at import time
    (pkg / "__init__.py").write_text("FAKE_NEURON_SDK = True\n\ndef jit(fn=None, **kwargs):\n    return fn\n")
    # kernel modules read documented tile sizes and define NKIObject classes at import time
    (pkg / "language.py").write_text("class tile_size:\n    pmax = 128\n    psum_bank_fmax = 512\n\n\n"
                                     "class NKIObject:\n    pass\n")
    (pkg / "isa.py").write_text("")
    assert _import_nki(tmp_path, force=False) == ["neuron-sdk", "nki", "True", "nki.language"]
    assert _import_nki(tmp_path, force=True) == ["nkicpu", "nkicpu", "False", "nkicpu.language"]


# -- the instruction record and the experimental creators -------------------------------------

def test_instruction_record_names_the_memory_each_operand_touches():
    x = rand((8, 16), F32)

    @nki.jit
    def k(x):
        out = nl.ndarray((8, 32), nl.float32, buffer=nl.shared_hbm)
        a = load(x)
        first = nisa.dma_copy(dst=out[:, 0::2], src=a)
        second = nisa.dma_copy(dst=out[:, 1::2], src=a)
        third = nisa.dma_copy(dst=out[:, 4:12], src=a[:, 0:8])
        third.depends_on(first, second)                   # an explicit scheduling edge
        return out

    c = nkicpu.capture(k)(x)
    load_ins, even, odd, window = c.instructions
    assert (load_ins.reads[0].buffer, load_ins.writes[0].buffer) == ("private_hbm", "sbuf")
    w_even, w_odd, w_win = even.writes[0], odd.writes[0], window.writes[0]
    assert (w_even.offset, w_even.pattern) == (0, ((32, 8), (2, 16))) and w_odd.offset == 1
    assert w_even.nbytes == w_odd.nbytes == x.nbytes and w_win.elements == 64
    elements = {a: set(a.indices().tolist()) for a in (w_even, w_odd, w_win)}
    assert elements[w_even].isdisjoint(elements[w_odd])   # interleaved columns share no element
    assert elements[w_win] & elements[w_even] and elements[w_win] & elements[w_odd]
    tile, part = even.reads[0], window.reads[0]             # both read the SBUF tile
    assert tile.alloc == part.alloc and set(part.indices().tolist()) <= set(tile.indices().tolist())
    assert even.reads[0].partitions == 8 and even.reads[0].free_elements == 16 and even.partitions == 8
    assert window.depends_on == [even.index, odd.index]
    info = c.allocations[w_even.alloc]
    assert (info.buffer, info.dtype, info.shape) == ("shared_hbm", "float32", (8, 32))
    assert load_ins.reads[0].alloc == c.arguments[0]       # the load reads the argument's copy


def test_zeros_ones_full_and_device_print(capsys):
    @nki.jit
    def k(x):
        z = nl.zeros((4, 3), nl.float32)
        o = nl.ones((4, 3), nl.bfloat16)
        f = nl.full((4, 3), 7, nl.int32)
        nl.device_print("z=", z)
        return store(z), store(o), store(f)

    z, o, f = nki.simulate(k)(np.zeros(1, F32))
    assert_bits_equal(z, np.zeros((4, 3), F32))
    assert_bits_equal(o, np.ones((4, 3), F32).astype(o.dtype))
    assert_bits_equal(f, np.full((4, 3), 7, np.int32))
    assert "z=" in capsys.readouterr().out
