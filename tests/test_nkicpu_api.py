"""Where real NKI is more permissive than nkicpu used to be, documented names, LNC launch grids,
and `nisa.dma_transpose`.

Sources: SDK 2.32 API stubs (nki/api/nki/{__init__,language,isa}/__init__.py), the NKI 0.3.0
release notes and migration guide, nki/get-started/about/lnc.rst and nki/guides/nki_simulator.rst.
The dma_transpose rule cases are in test_nkicpu_rules.py.
"""
import numpy as np
import pytest

import nkicpu
from nkicpu.memory import DTYPES
from nkicpu_testing import BF16, F32, NkiValidationError, assert_bits_equal, load, nisa, nki, nl, rand, run, store


# -- memset: an int literal on a float tile -----------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("buffer", ["sbuf", "psum"])
def test_memset_int_literal_on_a_float_tile(dtype, buffer):
    """The NKI library writes memset(dst=float_tile, value=0); 0.3.0 rejects only float values on int tiles."""
    buf = getattr(nl, buffer)   # host code: kernel code may not call getattr

    @nki.jit
    def k(value):
        t = nl.ndarray((8, 6), dtype, buffer=buf)
        nisa.memset(dst=t, value=value)
        out = nl.ndarray((8, 6), dtype)
        nisa.tensor_copy(dst=out, src=t)
        return store(out)

    for value in (0, -3, np.int32(7), 2**24 + 1):     # 2**24 + 1 rounds through fp32 as the engine computes
        assert_bits_equal(run(k, value), np.full((8, 6), F32(value)).astype(dtype))


def test_memset_float_value_on_an_int_tile_stays_rejected():
    @nki.jit
    def k():
        nisa.memset(dst=nl.ndarray((4, 4), nl.int32), value=0.0)

    with pytest.raises(NkiValidationError, match=r"\[memset-value\] nisa.memset: value must be an int .*got 0.0"):
        nki.simulate(k)()


# -- returning an input the kernel wrote (aliased outputs) -----------------------------------------

@nki.jit
def update_state(x, state):
    """Adds x to state in place; returns (x + state, state), the second an input (LIB qkv_cte's k_cache)."""
    s = load(state)
    nisa.tensor_tensor(dst=s, data1=s, data2=load(x), op=nl.add)
    nisa.dma_copy(dst=state, src=s)
    return store(s), state


def test_a_kernel_returns_an_input_it_wrote():
    x, state = rand((8, 16), F32), rand((8, 16), F32, seed=1)
    want = x + state
    caller = state.copy()
    out, new_state = nki.simulate(update_state)(x, caller)
    assert_bits_equal(out, want)
    assert_bits_equal(new_state, want)                 # the returned array is the input's final contents
    assert_bits_equal(caller, want)                    # and the caller's array is updated, as the SDK simulator does
    assert new_state is not caller


def test_a_view_of_an_input_is_an_output():
    @nki.jit
    def k(state):
        t = load(state)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=state, src=t)
        return state.reshape((state.shape[0] * state.shape[1],))

    state = rand((4, 6), F32)
    assert_bits_equal(nki.simulate(k)(state.copy()), (state * F32(2)).reshape(-1))


def test_an_hbm_scratch_that_is_not_an_argument_is_still_rejected():
    @nki.jit
    def k(x):
        scratch = nl.ndarray(x.shape, x.dtype, buffer=nl.private_hbm)
        nisa.dma_copy(dst=scratch, src=x)
        return scratch

    with pytest.raises(NkiValidationError, match=r"\[output-shared-hbm\] k: output 0 .*or be a kernel argument"):
        nki.simulate(k)(np.zeros((2, 2), F32))


# -- nki.jit options -------------------------------------------------------------------------------

def test_jit_mode_is_deprecated_and_ignored():
    def body(x):
        return store(load(x))

    x = rand((4, 4), F32)
    assert_bits_equal(nki.simulate(nki.jit(mode="auto")(body))(x), x)
    assert_bits_equal(nki.simulate(nki.jit(body, mode="jax"))(x), x)


def test_jit_platform_target_raises():
    with pytest.raises(NkiValidationError, match=r"\[jit-options\] nki.jit: platform_target='trn2' was removed in "
                                                 r"NKI 0.3.0; set NEURON_PLATFORM_TARGET_OVERRIDE"):
        nki.jit(platform_target="trn2")


# -- documented names ----------------------------------------------------------------------------

def test_deprecated_engine_constants_are_the_engine_members():
    assert (nisa.tensor_engine, nisa.vector_engine, nisa.scalar_engine, nisa.gpsimd_engine, nisa.unknown_engine) == (
        nisa.engine.tensor, nisa.engine.vector, nisa.engine.scalar, nisa.engine.gpsimd, nisa.engine.unknown)

    @nki.jit
    def k():
        t = nl.ndarray((4, 4), nl.float32)
        nisa.memset(dst=t, value=1.0, engine=nisa.gpsimd_engine)
        return store(t)

    assert [i.engine for i in nkicpu.capture(k)().instructions if i.opcode == "memset"] == ["gpsimd"]


def test_isa_constants_module_holds_the_enums_the_nki_library_imports():
    from nki.isa.constants import dge_mode, matmul_perf_mode, oob_mode
    assert (dge_mode, oob_mode, matmul_perf_mode) == (nisa.dge_mode, nisa.oob_mode, nisa.matmul_perf_mode)
    assert nisa.constants.dge_mode.hwdge is nisa.dge_mode.hwdge
    assert not hasattr(nisa.constants, "engine")      # only what public code is seen importing from it


def test_nki_dtype_is_the_type_of_every_nl_dtype():
    def k(x, dt: nki.dtype):                          # the NKI library's annotation
        return store(load(x, dtype=dt))

    assert all(isinstance(getattr(nl, name), nki.dtype) for name in DTYPES)
    assert_bits_equal(nki.simulate(nki.jit(k))(np.ones((2, 2), F32), nl.bfloat16), np.ones((2, 2), BF16))


def _matmul(stationary_dtype, moving_dtype):
    @nki.jit
    def k(a, b):
        s, m = load(a, dtype=stationary_dtype), load(b, dtype=moving_dtype)
        p = nl.ndarray((a.shape[1], b.shape[1]), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=s, moving=m)
        out = nl.ndarray(p.shape, nl.float32)
        nisa.tensor_copy(dst=out, src=p)
        return store(out)
    return k


def test_tfloat32_is_a_4_byte_dtype_that_pairs_with_fp32_in_matmul():
    """nc_matmul docstring: if one input is tfloat32/float32, the other must be tfloat32/float32."""
    assert nl.tfloat32.itemsize == 4
    a, b = rand((32, 8), F32), rand((32, 16), F32, seed=1)
    for s, m in ((nl.tfloat32, nl.float32), (nl.float32, nl.tfloat32), (nl.tfloat32, nl.tfloat32)):
        c = nkicpu.capture(_matmul(s, m))(a, b)
        mm = next(i for i in c.instructions if i.opcode == "nc_matmul")
        assert [r.dtype for r in mm.reads] == [nkicpu.memory.dtype_name(s), nkicpu.memory.dtype_name(m)]
        np.testing.assert_allclose(c.outputs, a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(NkiValidationError, match=r"\[matmul-dtypes\]"):
        nki.simulate(_matmul(nl.tfloat32, nl.bfloat16))(a, b)


def test_tfloat32_tiles_take_4_bytes_per_element_of_sbuf():
    @nki.jit
    def k():
        t = nl.ndarray((128, 512), nl.tfloat32)
        nisa.memset(dst=t, value=0)
        return store(t)

    assert nkicpu.capture(k)().peak_sbuf_bytes == 512 * 4


# -- LNC launch grids ------------------------------------------------------------------------------

@nki.jit
def lnc_reciprocal(x):
    """The LNC-aware kernel of nki/get-started/about/lnc.rst: one tile per program, or both on one."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    tiles = range(x.shape[0]) if nl.num_programs() == 1 else [nl.program_id(0)]
    for i in tiles:
        t = load(x[i])
        nisa.reciprocal(dst=t, data=t)
        nisa.dma_copy(dst=out[i], src=t)
    return out


def test_a_grid_of_two_programs_shares_the_work_and_the_output():
    x = rand((2, 16, 32), F32, 0.5, 2)
    want = F32(1) / x
    one = nkicpu.capture(lnc_reciprocal)(x)
    two = nkicpu.capture(lnc_reciprocal[2])(x)
    for got in (one.outputs, two.outputs, nki.simulate(lnc_reciprocal[2])(x), lnc_reciprocal[2](x)):
        assert_bits_equal(got, want)
    assert [i.core for i in one.instructions] == [0] * 6
    assert [(i.core, i.opcode) for i in two.instructions] == [(c, op) for c in (0, 1)
                                                              for op in ("dma_copy", "reciprocal", "dma_copy")]
    assert two.peak_sbuf_bytes_per_core == (32 * 4, 32 * 4) and two.peak_sbuf_bytes == 32 * 4
    # As in the SDK simulator, inputs are in HBM: shared between the programs of a grid (nki_simulator.rst).
    assert (one.instructions[0].reads[0].buffer, two.instructions[0].reads[0].buffer) == ("private_hbm", "shared_hbm")


def test_spmd_queries_in_each_program():
    seen = []

    @nki.jit
    def k(x):
        seen.append((nl.program_id(0), nl.program_id(axis=0), nl.num_programs(), nl.num_programs(axes=0),
                     nl.program_ndim()))
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        if nl.program_id(0) == 0:
            nisa.dma_copy(dst=out, src=load(x))
        return out

    x = rand((2, 2), F32)
    for launch, want in ((k, [(0, 0, 1, 1, 0)]), (k[1], [(0, 0, 1, 1, 1)]), (k[2], [(0, 0, 2, 2, 1), (1, 1, 2, 2, 1)])):
        seen.clear()
        assert_bits_equal(nki.simulate(launch)(x), x)
        assert seen == want


def test_each_program_has_its_own_sbuf_and_psum():
    """Two programs may each fill most of SBUF and all of PSUM: they run on different physical cores."""
    big = nl.tile_size.sbuf_fmax_bytes * 2 // 3 // 4      # fp32 elements per partition: 2/3 of SBUF
    live = []                                             # keeps every program's tiles alive to the end

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        keep = nl.ndarray((128, big), nl.float32)
        tiles = [keep]
        for _ in range(nl.tile_size.psum_num_banks):
            tiles.append(nl.ndarray((128, nl.tile_size.psum_bank_fmax), nl.float32, buffer=nl.psum))
        live.append(tiles)
        row = nl.program_id(0)
        t = load(x[row:row + 1])
        nisa.memset(dst=keep[0:1, 0:x.shape[1]], value=0)
        nisa.tensor_tensor(dst=t, data1=t, data2=keep[0:1, 0:x.shape[1]], op=nl.add)
        nisa.dma_copy(dst=out[row:row + 1], src=t)
        return out

    x = rand((2, 8), F32)
    c = nkicpu.capture(k[2])(x)
    assert_bits_equal(c.outputs, x)
    per_program = big * 4 + 8 * 4
    assert c.peak_sbuf_bytes_per_core == (per_program, per_program) and c.peak_sbuf_bytes == per_program
    assert c.peak_psum_banks_per_core == (8, 8)
    with pytest.raises(NkiValidationError, match=r"\[sbuf-capacity\]"):   # one core cannot hold both programs' tiles
        nki.simulate(nki.jit(lambda x: (k.fn(x), k.fn(x))[0]))(x)


def test_private_hbm_is_per_program_and_shared_hbm_is_one_storage():
    @nki.jit
    def k(x):
        scratch = nl.ndarray(x.shape, x.dtype, buffer=nl.private_hbm)   # each program's own: no race
        nisa.dma_copy(dst=scratch, src=x)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)        # program 0's storage in every program
        i = nl.program_id(0)
        t = load(scratch[i:i + 1])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(i + 1))
        nisa.dma_copy(dst=out[i:i + 1], src=t)
        return out

    x = rand((2, 4), F32)
    c = nkicpu.capture(k[2])(x)
    assert_bits_equal(c.outputs, x + np.array([[1], [2]], F32))
    scratch0, out0, scratch1, out1 = [i.writes[0].alloc for i in c.instructions
                                      if i.opcode == "dma_copy" and i.writes[0].buffer != "sbuf"]
    assert scratch0 != scratch1 and out0 == out1


def test_an_input_written_by_the_programs_is_returned_and_updated():
    @nki.jit
    def k(state):
        i = nl.program_id(0)
        t = load(state[i:i + 1])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=-1.0)
        nisa.dma_copy(dst=state[i:i + 1], src=t)
        return state

    state = rand((2, 8), F32)
    caller = state.copy()
    assert_bits_equal(nki.simulate(k[2])(caller), -state)
    assert_bits_equal(caller, -state)


def _grid_kernel(body):
    @nki.jit
    def k(x):
        return body(x, nl.program_id(0))
    return k[2]


def _both_write_everything(x, i, offset):
    """Each program writes the whole output: x + offset(i)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = load(x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=offset(i))
    nisa.dma_copy(dst=out, src=t)
    return out


def _read_the_other_half(x, i):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[i:i + 1], src=load(x[i:i + 1]))
    if i == 1:
        load(out[0:1])                                 # program 1 reads the row program 0 wrote
    return out


def _write_what_the_other_read(x, i, scale):
    t = load(x[1:2])                                   # both programs read row 1
    if i == 1:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=scale)
        nisa.dma_copy(dst=x[1:2], src=t)               # program 1 writes the row program 0 read
    return x


@pytest.mark.parametrize("body,words", [
    (lambda x, i: _both_write_everything(x, i, lambda i: float(i)),
     r"nisa.dma_copy in program 1: changes 8 element\(s\) of t\d+ that program 0 wrote"),
    (_read_the_other_half, r"nisa.dma_copy in program 1: reads 4 element\(s\) of t\d+ that program 0 wrote"),
    (lambda x, i: _write_what_the_other_read(x, i, 2.0),
     r"nisa.dma_copy in program 1: changes 4 element\(s\) of arg0 that program 0 read"),
])
def test_programs_touching_hbm_another_program_wrote_race(body, words):
    with pytest.raises(NkiValidationError, match=r"\[lnc-race\] " + words + ".*run at the same time"):
        nki.simulate(_grid_kernel(body))(rand((2, 4), F32))


def test_writes_of_the_same_bits_do_not_race():
    """Below its sharding threshold the NKI library's rmsnorm_tkg has both cores of an LNC=2 launch write
    the whole output with the same values (LIB core/subkernels/rmsnorm_tkg.py): harmless on hardware."""
    x = rand((2, 4), F32)
    assert_bits_equal(nki.simulate(_grid_kernel(lambda x, i: _both_write_everything(x, i, lambda i: 0.5)))(x),
                      x + F32(0.5))
    caller = x.copy()
    assert_bits_equal(nki.simulate(_grid_kernel(lambda x, i: _write_what_the_other_read(x, i, 1.0)))(caller), x)


def test_disjoint_hbm_writes_and_shared_reads_do_not_race():
    def body(x, i):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        t = load(x)                                    # both programs read all of the input
        nisa.dma_copy(dst=out[i:i + 1], src=t[i:i + 1])
        return out

    x = rand((2, 4), F32)
    assert_bits_equal(nki.simulate(_grid_kernel(body))(x), x)


def _shared_hbm_tensors(n):
    tensors = []
    for _ in range(n):
        tensors.append(nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm))
    return tensors


@pytest.mark.parametrize("body,words", [
    (lambda x, i: nl.ndarray((2, 4 + i), nl.float32, buffer=nl.shared_hbm),
     r"in program 1: nl.shared_hbm allocation #0 is \[2, 5\] float32, but program 0's is \[2, 4\] float32"),
    (lambda x, i: _shared_hbm_tensors(1 + i)[0],
     r"in program 1: is nl.shared_hbm allocation #1, but program 0 made only 1"),
    (lambda x, i: x if i else nl.ndarray((2, 4), nl.float32, buffer=nl.shared_hbm),
     r"program 1: allocated 0 nl.shared_hbm tensor\(s\), program 0 allocated 1"),
])
def test_shared_hbm_allocations_must_match_program_0(body, words):
    with pytest.raises(NkiValidationError, match=r"\[lnc-shared-hbm\] .*" + words):
        nki.simulate(_grid_kernel(body))(rand((2, 4), F32))


def test_every_program_returns_the_same_outputs():
    def body(x, i):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[i:i + 1], src=load(x[i:i + 1]))
        return out if i == 0 else out[0:1]

    with pytest.raises(NkiValidationError, match=r"\[lnc-outputs\] k: program 1 returns .* every program returns the "
                                                 r"same tensors"):
        nki.simulate(_grid_kernel(body))(rand((2, 4), F32))


@pytest.mark.parametrize("grid", [0, 3, 8, (2, 1), "2", True])
def test_launch_grids_take_1_or_2_on_trn2(grid):
    with pytest.raises(NkiValidationError, match=r"\[lnc-grid\] .*1 or 2 on trn2, got " + repr(grid).replace("(", r"\(")
                       .replace(")", r"\)")):
        lnc_reciprocal[grid]


def test_grids_do_not_nest_and_cores_do_not_synchronise():
    with pytest.raises(TypeError, match=r"already has a launch grid"):
        lnc_reciprocal[2][2]

    @nki.jit
    def outer(x):
        return lnc_reciprocal[2](x)

    with pytest.raises(NotImplementedError, match=r"launching lnc_reciprocal\[2\] from inside a running kernel"):
        nki.simulate(outer)(rand((2, 4, 4), F32))

    @nki.jit
    def exchange(x):
        t = load(x)
        nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0)

    with pytest.raises(NotImplementedError, match=r"nisa.sendrecv"):
        nki.simulate(exchange[2])(rand((2, 2), F32))


# -- dma_transpose -----------------------------------------------------------------------------------

def _special(shape, dtype, seed=0):
    """Distinct values plus inf, -0.0 and a NaN with a payload: a transpose must move bits, not values."""
    x = rand(shape, dtype, seed=seed)
    nan = np.array(0x7FC00123 if dtype == F32 else 0x7FC3, np.uint32 if dtype == F32 else np.uint16).view(dtype)
    x.reshape(-1)[:3] = [np.inf, -0.0, nan]
    return x


@nki.jit
def dma_transpose_kernel(x, axes, dge_mode, via_sbuf):
    src = load(x) if via_sbuf else x
    perm = axes or ((1, 0), (2, 1, 0), (3, 1, 2, 0))[len(x.shape) - 2]
    shape = []
    for a in perm:
        shape.append(x.shape[a])
    dst = nl.ndarray(tuple(shape), x.dtype)
    nisa.dma_transpose(dst=dst, src=src, axes=axes, dge_mode=dge_mode)
    return store(dst)


@pytest.mark.parametrize("shape,axes,dtype,dge", [
    ((16, 8), None, F32, "unknown"),
    ((16, 8), (1, 0), BF16, "hwdge"),
    ((3, 5, 7), None, BF16, "unknown"),
    ((2, 8, 8), (2, 1, 0), BF16, "hwdge"),
    ((4, 2, 3, 8), None, F32, "unknown"),
    ((8, 2, 2, 16), (3, 1, 2, 0), BF16, "hwdge"),
])
@pytest.mark.parametrize("via_sbuf", [False, True], ids=["hbm2sbuf", "sbuf2sbuf"])
def test_dma_transpose_is_a_bit_exact_permutation(shape, axes, dtype, dge, via_sbuf):
    perm = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[len(shape)]
    x = _special(shape, dtype)
    c = nkicpu.capture(dma_transpose_kernel)(x, axes, getattr(nisa.dge_mode, dge), via_sbuf)
    assert_bits_equal(c.outputs, np.ascontiguousarray(np.transpose(x, perm)))
    ins = next(i for i in c.instructions if i.opcode == "dma_transpose")
    assert ins.engine == "dma" and ins.args["dge_mode"] == dge and ins.args["axes"] == perm
    assert ins.reads[0].buffer == ("sbuf" if via_sbuf else "private_hbm") and ins.writes[0].buffer == "sbuf"
    assert ins.nbytes == x.nbytes


def test_dma_transpose_priority_is_not_modeled():
    @nki.jit
    def k(x):
        nisa.dma_transpose(dst=nl.ndarray((4, 16), nl.float32), src=x, priority=0)

    with pytest.raises(NotImplementedError, match=r"dma_transpose priority="):
        nki.simulate(k)(rand((16, 4), F32))
