"""The experimental `nl.*` wrappers over nisa (nkicpu/language_wrappers.py), against NumPy, and the
instructions each records for the cost model.

nl.load / nl.store are one dma_copy; nl.copy a VectorE tensor_copy; nl.sum / max / min a VectorE
tensor_reduce; nl.broadcast_to a tensor_copy (free dims) or a dma_copy (partition dim) from a
stride-0 view; nl.shared_identity_matrix a dma_copy from a shared constant; nl.add(x, y), ... a
VectorE tensor_tensor (two tiles) or tensor_scalar (a tile and a number). Float math is fp32,
rounded once to the result dtype.
"""
import numpy as np
import pytest

import nkicpu
from nkicpu_testing import BF16, F32, NkiValidationError, assert_bits_equal, load, nisa, nki, nl, rand, run, store


def opcodes(kernel, *args):
    """The outputs of a run and its (engine, opcode) list."""
    c = nkicpu.capture(kernel)(*args)
    return c.outputs, [(i.engine, i.opcode) for i in c.instructions]


# -- nl.load / nl.store ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [None, BF16], ids=["same-dtype", "to-bf16"])
def test_load_then_store_is_one_dma_each(dtype):
    x = rand((8, 12), F32, seed=1)
    nl_dtype = None if dtype is None else nl.bfloat16

    @nki.jit
    def k(x):
        t = nl.load(x[2:6, :], dtype=nl_dtype)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    got, ops = opcodes(k, x)
    want = x[2:6] if dtype is None else x[2:6].astype(BF16)
    assert_bits_equal(got, want)
    assert ops == [("dma", "dma_copy"), ("dma", "dma_copy")]


def test_load_and_store_name_the_wrong_buffer():
    def load_sbuf():
        nl.load(nl.ndarray((4, 4), nl.float32))

    def store_sbuf():
        nl.store(nl.ndarray((4, 4), nl.float32), value=nl.ndarray((4, 4), nl.float32))

    def store_psum():
        nl.store(nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm), value=nl.ndarray((4, 4), nl.float32,
                                                                                      buffer=nl.psum))

    with pytest.raises(ValueError, match=r"nl.load: src must be an HBM tensor"):
        nki.simulate(nki.jit(load_sbuf))()
    with pytest.raises(ValueError, match=r"nl.store: dst must be an HBM tensor"):
        nki.simulate(nki.jit(store_sbuf))()
    with pytest.raises(NkiValidationError, match=r"\[dma-psum\]"):
        nki.simulate(nki.jit(store_psum))()


# -- nl.copy --------------------------------------------------------------------------------------

@pytest.mark.parametrize("buffer", ["sbuf", "psum"])
def test_copy_is_a_vector_tensor_copy_into_sbuf(buffer):
    x = rand((16, 8), F32, seed=2)
    buf = getattr(nl, buffer)   # host code: kernel code may not call getattr

    @nki.jit
    def k(x):
        t = load(x, buffer=buf) if buf is nl.sbuf else nl.ndarray(x.shape, nl.float32, buffer=nl.psum)
        if buf is nl.psum:
            nisa.tensor_copy(dst=t, src=load(x))
        same = nl.copy(t)
        bf = nl.copy(t, dtype=nl.bfloat16)
        assert same.buffer == nl.sbuf and bf.dtype == nl.bfloat16
        return store(same), store(bf)

    (same, bf), ops = opcodes(k, x)
    assert_bits_equal(same, x)
    assert_bits_equal(bf, x.astype(BF16))
    assert ops[-4:-2] == [("vector", "tensor_copy"), ("vector", "tensor_copy")]


def test_nl_copy_is_still_the_activation_function():
    x = rand((4, 8), F32, seed=3)

    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, nl.float32)
        nisa.activation(dst=t, op=nl.copy, data=load(x))
        return store(t)

    assert_bits_equal(run(k, x), x)


# -- nl.sum / nl.max / nl.min ---------------------------------------------------------------------

REDUCTIONS = [(nl.sum, np.sum, "add"), (nl.max, np.max, "maximum"), (nl.min, np.min, "minimum")]


@pytest.mark.parametrize("nl_fn,np_fn,op", REDUCTIONS, ids=["sum", "max", "min"])
@pytest.mark.parametrize("axis,keepdims", [(3, False), ([2, 3], False), ((-2, -1), True), ([1, 2, 3], False)],
                         ids=["last", "last-two", "negative-keepdims", "all-free"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_reductions_match_numpy(nl_fn, np_fn, op, axis, keepdims, dtype):
    x = rand((8, 3, 4, 5), dtype, seed=4)

    @nki.jit
    def k(x):
        return store(nl_fn(load(x), axis=axis, keepdims=keepdims))

    got, ops = opcodes(k, x)
    axes = tuple(a % 4 for a in ([axis] if isinstance(axis, int) else axis))
    want = np_fn(x.astype(F32), axis=axes, keepdims=keepdims).astype(dtype)
    want = want.reshape(8, -1) if want.ndim < 2 else want   # an all-free reduction keeps a [P, 1] tile
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=1e-6 if dtype == F32 else 1e-2)
    assert got.dtype == dtype and got.shape == want.shape
    c = nkicpu.capture(k)(x)
    (reduce,) = [i for i in c.instructions if i.opcode == "tensor_reduce"]
    assert reduce.engine == "vector" and reduce.args["op"] == op


def test_sum_dtype_and_axis_errors():
    x = rand((4, 6), BF16, seed=5)

    @nki.jit
    def k(x):
        return store(nl.sum(load(x), axis=1, dtype=nl.float32))

    got = run(k, x)
    np.testing.assert_allclose(got[:, 0], x.astype(F32).sum(axis=1), rtol=1e-6)
    with pytest.raises(NkiValidationError, match=r"\[reduce-axis\]"):
        nki.simulate(nki.jit(lambda x: store(nl.sum(load(x), axis=0))))(x)
    with pytest.raises(ValueError, match=r"nl.max: axis must be an int or a list of ints in \[-2, 2\), got 2"):
        nki.simulate(nki.jit(lambda x: store(nl.max(load(x), axis=2))))(x)


# -- nl.broadcast_to ------------------------------------------------------------------------------

@pytest.mark.parametrize("src_shape,shape,engine,opcode", [
    ((8, 1), (8, 16), "vector", "tensor_copy"),
    ((1, 16), (8, 16), "dma", "dma_copy"),
    ((1, 1, 4), (8, 3, 4), "dma", "dma_copy"),
], ids=["free-dim", "partition-dim", "both"])
def test_broadcast_to_repeats_size_one_dims(src_shape, shape, engine, opcode):
    x = rand(src_shape, BF16, seed=6)

    @nki.jit
    def k(x):
        return store(nl.broadcast_to(load(x), shape))

    got, ops = opcodes(k, x)
    assert_bits_equal(got, np.broadcast_to(x, shape).copy())
    assert ops[1] == (engine, opcode) and len(ops) == 3


def test_broadcast_to_same_shape_is_x_or_a_cast_copy():
    x = rand((4, 6), F32, seed=7)

    @nki.jit
    def k(x):
        t = load(x)
        assert nl.broadcast_to(t, t.shape) is t
        return store(nl.broadcast_to(t, t.shape, dtype=nl.bfloat16))

    assert_bits_equal(run(k, x), x.astype(BF16))


def test_broadcast_to_errors():
    def bad_shape():
        nl.broadcast_to(nl.ndarray((4, 2), nl.float32), (4, 6))

    def from_psum_across_partitions():
        nl.broadcast_to(nl.ndarray((1, 6), nl.float32, buffer=nl.psum), (4, 6))

    with pytest.raises(ValueError, match=r"nl.broadcast_to: shape must have x's rank 2 and match"):
        nki.simulate(nki.jit(bad_shape))()
    with pytest.raises(NotImplementedError, match=r"across partitions from PSUM"):
        nki.simulate(nki.jit(from_psum_across_partitions))()


# -- nl.shared_constant / nl.shared_identity_matrix / nl.empty_like -------------------------------

@pytest.mark.parametrize("as_file", [False, True], ids=["array", "npy-file"])
def test_shared_constant_is_in_hbm_before_the_kernel_runs(as_file, tmp_path):
    table = rand((6, 5), F32, seed=8)
    path = tmp_path / "table.npy"
    np.save(path, table)
    constant = str(path) if as_file else table

    @nki.jit
    def k():
        c = nl.shared_constant(constant)
        assert c.buffer == nl.shared_hbm and c.shape == (6, 5)
        return store(load(c))

    got, ops = opcodes(k)
    assert_bits_equal(got, table)
    assert ops == [("dma", "dma_copy"), ("dma", "dma_copy")]   # the two of load and store: none for the constant


def test_shared_constant_errors():
    with pytest.raises(TypeError, match=r"nl.shared_constant: expected an NKI dtype .*float64"):
        nki.simulate(nki.jit(lambda: nl.shared_constant(np.zeros((2, 2)))))()
    with pytest.raises(TypeError, match=r"nl.shared_constant: the constant's dtype must be one of .*got bool"):
        nki.simulate(nki.jit(lambda: nl.shared_constant(np.zeros((2, 2), np.bool_))))()
    with pytest.raises(TypeError, match=r"constant must be a NumPy array or the path of a .npy file, got list"):
        nki.simulate(nki.jit(lambda: nl.shared_constant([1.0])))()


def test_shared_constant_is_one_tensor_in_a_launch_grid():
    def k(x):
        c = nl.shared_constant(np.full((2, 2), nl.program_id(0), np.float32))   # differs in program 1
        return c

    with pytest.raises(NkiValidationError, match=r"\[lnc-shared-hbm\] nl.shared_constant: .* must not diverge"):
        nki.simulate(nki.jit(k)[2])(np.zeros(1, F32))


@pytest.mark.parametrize("dtype,nl_dtype", [(np.uint8, None), (F32, nl.float32), (BF16, nl.bfloat16)],
                         ids=["default-uint8", "fp32", "bf16"])
def test_shared_identity_matrix(dtype, nl_dtype):
    @nki.jit
    def k():
        if nl_dtype is None:
            return store(nl.shared_identity_matrix(32))
        return store(nl.shared_identity_matrix(n=32, dtype=nl_dtype))

    got, ops = opcodes(k)
    assert_bits_equal(got, np.eye(32).astype(dtype))
    assert ops == [("dma", "dma_copy"), ("dma", "dma_copy")]


def test_shared_identity_matrix_errors():
    with pytest.raises(NotImplementedError, match=r"dst="):
        nki.simulate(nki.jit(lambda: nl.shared_identity_matrix(8, dst=nl.ndarray((8, 8), nl.uint8))))()
    with pytest.raises(ValueError, match=r"n must be a positive int, got 0"):
        nki.simulate(nki.jit(lambda: nl.shared_identity_matrix(0)))()
    with pytest.raises(NkiValidationError, match=r"\[partition-dim\]"):
        nki.simulate(nki.jit(lambda: nl.shared_identity_matrix(129)))()


def test_empty_like_defaults_to_x_and_takes_overrides():
    @nki.jit
    def k(x):
        same = nl.empty_like(x)
        assert (same.shape, same.dtype, same.buffer) == (x.shape, x.dtype, x.buffer)
        other = nl.empty_like(x, dtype=nl.bfloat16, buffer=nl.shared_hbm, name="out")
        assert (other.shape, other.dtype, other.buffer, other.name) == (x.shape, nl.bfloat16, nl.shared_hbm, "out")
        nisa.dma_copy(dst=other, src=x)
        return other

    x = rand((4, 3), F32, seed=9)
    assert_bits_equal(run(k, x), x.astype(BF16))


# -- binary ALU calls -----------------------------------------------------------------------------

ARITHMETIC = ["add", "subtract", "multiply", "maximum", "minimum", "greater", "less_equal", "equal"]
NUMPY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
         "minimum": np.minimum, "greater": np.greater, "less_equal": np.less_equal, "equal": np.equal}


@pytest.mark.parametrize("name", ARITHMETIC)
def test_binary_calls_match_numpy(name):
    op = getattr(nl, name)
    a, b = rand((8, 16), BF16, seed=10), rand((8, 16), BF16, seed=11)
    b[0, :4] = a[0, :4]   # equal elements for the comparisons

    @nki.jit
    def k(a, b):
        x, y = load(a), load(b)
        return store(op(x, y)), store(op(x, 0.5)), store(op(0.5, y))

    (tt, ts, st), ops = opcodes(k, a, b)
    f = NUMPY[name]
    af, bf = a.astype(F32), b.astype(F32)
    assert_bits_equal(tt, f(af, bf).astype(F32).astype(BF16))
    assert_bits_equal(ts, f(af, F32(0.5)).astype(F32).astype(BF16))
    assert_bits_equal(st, f(F32(0.5), bf).astype(F32).astype(BF16))
    compute = [o for o in ops if o[0] != "dma"]
    assert compute == [("vector", "tensor_tensor"), ("vector", "tensor_scalar"), ("vector", "tensor_scalar")]


def test_the_called_operator_is_still_an_op_argument_and_dtype_casts():
    a, b = rand((4, 8), F32, seed=12), rand((4, 8), F32, seed=13)

    @nki.jit
    def k(a, b):
        x, y = load(a), load(b)
        called = nl.multiply(x, y, dtype=nl.bfloat16)
        as_op = nl.ndarray(x.shape, nl.bfloat16)
        nisa.tensor_tensor(dst=as_op, data1=x, data2=y, op=nl.multiply)
        return store(called), store(as_op)

    called, as_op = run(k, a, b)
    assert_bits_equal(called, as_op)
    assert_bits_equal(called, (a * b).astype(BF16))


def test_binary_call_errors():
    def tile(shape=(4, 8), dtype=nl.float32):
        return nl.ndarray(shape, dtype)

    cases = [
        (ValueError, r"nl.add: x and y must have one shape .*\[4, 8\] and \[4, 1\]", lambda: nl.add(tile(), tile((4, 1)))),
        (ValueError, r"nl.power: .*nl.power\(tile, scalar\) is not supported", lambda: nl.power(tile(), 2.0)),
        (NkiValidationError, r"\[no-divide\]", lambda: nl.divide(tile(), tile())),
        (NotImplementedError, r"nl.add of float32 and bfloat16 tiles without dtype=",
         lambda: nl.add(tile(), tile(dtype=nl.bfloat16))),
        (TypeError, r"nl.add: x or y must be a tile", lambda: nl.add(1.0, 2.0)),
        (NotImplementedError, r"unary nl.exp\(x\) wrapper", lambda: nl.exp(tile())),
    ]
    for error, words, body in cases:
        with pytest.raises(error, match=words):
            nki.simulate(nki.jit(body))()


# -- nl.tile_size ---------------------------------------------------------------------------------

def test_tile_size_alignments():
    """Free-dim address alignments in bytes; PSUM's is its 4-byte word."""
    assert (nl.tile_size.psum_min_align, nl.tile_size.sbuf_min_align) == (4, 1)
    with pytest.raises(AttributeError):
        nl.tile_size.not_a_constant   # noqa: B018
