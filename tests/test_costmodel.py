"""The trn2 cost model (nkicpu.costs, nkicpu.schedule, nkicpu.profile) on small kernels.

The kernels here exist to exercise the model: dependencies of each kind across engines,
independent DMAs, many DMAs sharing bandwidth, an HBM-to-HBM copy, every compute engine.
"""
import time

import numpy as np
import pytest

import kernels  # noqa: F401  registers nkicpu as `nki` where the Neuron SDK is absent
import nki
import nki.isa as nisa
import nki.language as nl
import nkicpu
from nkicpu import costs
from nkicpu.profile import MODELED, profile, profile_capture
from nkicpu.record import Access, Instruction
from nkicpu.schedule import dependencies, schedule

F32 = np.float32


@nki.jit
def hazards(x):
    """One read-after-write, one write-after-read and one write-after-write, each across engines."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    u = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    v = nl.ndarray((128, 2048), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x, name="load")
    nisa.activation(u, nl.exp, t, name="raw")               # ScalarE reads what the DMA wrote
    nisa.memset(t, 0.0, engine=nisa.engine.vector, name="war")  # VectorE overwrites what ScalarE read
    nisa.memset(v, 1.0, engine=nisa.engine.gpsimd, name="waw1")
    nisa.memset(v[:, 0:4], 2.0, engine=nisa.engine.vector, name="waw2")  # overwrites part of waw1
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, u)
    return out


@nki.jit
def independent_loads(x):
    """len(x) / 128 independent loads, then one store that needs the first of them."""
    tiles = []
    for i in range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[i * 128:(i + 1) * 128, :], name=f"load{i}")
        tiles.append(t)
    out = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, tiles[0], name="store")
    return out


@nki.jit
def hbm_copy(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, x)
    return out


@nki.jit
def every_engine(x, w):
    """x [128, 64] fp32, w [128, 512] bf16: matmul, activation with a reduction, VectorE, GpSimd."""
    xs = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    ws = nl.ndarray(w.shape, w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(xs, x)
    nisa.dma_copy(ws, w)
    xb = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(xb, xs)
    ps = nl.ndarray((64, 512), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, xb, ws)
    y = nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf)
    ss = nl.ndarray((64, 1), nl.float32, buffer=nl.sbuf)
    nisa.activation(y, nl.square, ps, reduce_op=nl.add, reduce_res=ss, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    r = nl.ndarray((64, 1), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(r, ss, nl.rsqrt, None, engine=nisa.engine.gpsimd)
    z = nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(z, y, nl.multiply, r)
    nisa.tensor_tensor(z, z, y, nl.add)
    out = nl.ndarray((64, 512), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, z)
    return out


def _rand(shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).uniform(0.1, 1.0, size=shape).astype(F32).astype(dtype)


CASES = {
    "hazards": (hazards, lambda: (_rand((128, 512)),)),
    "independent_loads": (independent_loads, lambda: (_rand((512, 512)),)),
    "many_loads": (independent_loads, lambda: (_rand((1024, 1024)),)),
    "hbm_copy": (hbm_copy, lambda: (_rand((256, 1024)),)),
    "every_engine": (every_engine, lambda: (_rand((128, 64)), _rand((128, 512), nkicpu.language.bfloat16))),
}


@pytest.fixture(scope="module")
def profiles():
    return {name: profile_capture(nkicpu.capture(k)(*make())) for name, (k, make) in CASES.items()}


def _by_name(p):
    return {e["name"]: e for e in p.events}


def _end(e):
    return e["start_us"] + e["dur_us"]


@pytest.mark.parametrize("case", CASES)
def test_an_engine_runs_one_instruction_at_a_time(profiles, case):
    lanes = {}
    for e in profiles[case].events:
        lanes.setdefault(e["lane"], []).append(e)
    for lane, events in lanes.items():
        events.sort(key=lambda e: e["start_us"])
        for a, b in zip(events, events[1:]):
            assert b["start_us"] >= _end(a) - 1e-9, f"{case}: {lane} runs {a['name']} and {b['name']} at once"


@pytest.mark.parametrize("case", CASES)
def test_every_instruction_starts_after_its_producers_end(profiles, case):
    p = profiles[case]
    for e in p.events:
        for d in e["args"]["deps"]:
            assert e["start_us"] >= _end(p.events[d]) - 1e-9
            assert e["args"]["ready_us"] >= _end(p.events[d]) - 1e-9


def test_read_after_write_write_after_read_write_after_write(profiles):
    e = _by_name(profiles["hazards"])
    assert e["raw"]["start_us"] >= _end(e["load"]), "read after write"
    assert e["war"]["start_us"] >= _end(e["raw"]), "write after read"
    assert e["waw2"]["start_us"] >= _end(e["waw1"]), "write after write"
    # Each wait comes from the memory conflict itself (the engines differ).
    assert {e[n]["lane"] for n in ("raw", "war", "waw1")} == {"ScalarE", "VectorE", "GpSimd"}
    assert e["load"]["args"]["index"] in e["raw"]["args"]["deps"]
    assert e["raw"]["args"]["index"] in e["war"]["args"]["deps"]
    assert e["waw1"]["args"]["index"] in e["waw2"]["args"]["deps"]


def test_disjoint_slices_do_not_wait_for_each_other():
    x = _rand((512, 512))
    deps = dependencies(nkicpu.capture(independent_loads)(x).instructions)
    assert deps[:4] == [(), (), (), ()]
    assert deps[4] == (0,)  # the store reads tile 0 only


def _random_access(rng, shape):
    """A slice of a [8, 16, 12] allocation, sometimes stepped, permuted, broadcast or flat."""
    strides = (shape[1] * shape[2], shape[2], 1)
    start = [int(rng.integers(0, n)) for n in shape]
    count = [int(rng.integers(1, n - s + 1)) for n, s in zip(shape, start)]
    pattern = [(st, c) for st, c in zip(strides, count)]
    kind = rng.integers(0, 5)
    if kind == 1 and count[1] > 1:             # every other row
        pattern[1] = (2 * strides[1], (count[1] + 1) // 2)
    elif kind == 2:                            # transposed view
        pattern = pattern[::-1]
    elif kind == 3:                            # broadcast along a new dim
        pattern.insert(1, (0, 3))
    elif kind == 4:                            # a flat run across rows
        n = int(rng.integers(1, 200))
        return Access(1, "sbuf", "float32", int(rng.integers(0, 1536 - n)), ((1, n),), 4, 1536 // 8)
    return Access(1, "sbuf", "float32", sum(s * st for s, st in zip(start, strides)), tuple(pattern), 4, 1536 // 8)


@pytest.mark.parametrize("with_shapes", [True, False])
def test_dependencies_match_brute_force(with_shapes):
    """Every pair of conflicting accesses is ordered (directly, or through other waits), and every
    direct wait is a real conflict."""
    rng = np.random.default_rng(1)
    shape = (8, 16, 12)
    ins = []
    for i in range(150):
        a = _random_access(rng, shape)
        ins.append(Instruction(i, "vector", "tensor_copy", [] if rng.random() < 0.5 else [a],
                               [a] if not ins or rng.random() < 0.5 else []))
        if not ins[-1].reads and not ins[-1].writes:
            ins[-1].writes.append(a)
    deps = dependencies(ins, {1: shape} if with_shapes else None)
    elements = [set(a.indices().tolist()) for x in ins for a in (x.reads + x.writes)[:1]]
    writes = [bool(x.writes) for x in ins]
    reach = []
    for i, ds in enumerate(deps):
        reach.append(set(ds).union(*(reach[d] for d in ds)))
        for j in range(i):
            conflict = (writes[i] or writes[j]) and bool(elements[i] & elements[j])
            assert not conflict or j in reach[i], f"{i} does not wait for {j}"
            assert j not in ds or conflict, f"{i} waits for {j} without a conflict"


def test_independent_dmas_on_different_queues_overlap(profiles):
    e = _by_name(profiles["independent_loads"])
    a, b = e["load0"], e["load1"]
    assert a["lane"] != b["lane"]
    assert a["start_us"] < _end(b) and b["start_us"] < _end(a)


@pytest.mark.parametrize("case", CASES)
def test_no_dma_beats_the_bandwidth(profiles, case):
    dmas = [e for e in profiles[case].events if e["lane"].startswith("DMA")]
    for e in dmas:
        assert e["dur_us"] >= e["args"]["bytes"] / costs.BYTES_PER_US - 1e-9
    # Together too: all bytes through one core's DMA bandwidth.
    first = min(e["start_us"] for e in dmas)
    last = max(_end(e) for e in dmas)
    assert last - first >= sum(e["args"]["bytes"] for e in dmas) / costs.BYTES_PER_US - 1e-9


def test_many_transfers_in_flight_share_the_bandwidth(profiles):
    loads = [e for e in profiles["many_loads"].events if e["name"].startswith("load")]
    assert len(loads) == 8 and len({e["lane"] for e in loads}) == costs.DMA_QUEUES
    alone = loads[0]["args"]["bytes"] / costs.BYTES_PER_US
    assert loads[0]["dur_us"] >= costs.DMA_QUEUES * alone - 1e-9  # four at a time, each a quarter


@pytest.mark.parametrize("case", CASES)
def test_modeled_total_is_never_below_the_roofline(profiles, case):
    p = profiles[case]
    assert p.roofline_us > 0
    assert p.total_us >= p.roofline_us


def test_hbm_to_hbm_copy_counts_read_and_write(profiles):
    p = profiles["hbm_copy"]
    assert p.hbm_read_bytes == p.hbm_write_bytes == 256 * 1024 * 4
    assert p.total_us >= p.roofline_us == pytest.approx(2 * 256 * 1024 * 4 / costs.BYTES_PER_US)


@pytest.mark.parametrize("case", CASES)
def test_busy_fractions_are_fractions(profiles, case):
    p = profiles[case]
    assert set(p.busy) >= {"TensorE", "VectorE", "ScalarE", "GpSimd"}
    assert all(0.0 <= f <= 1.0 for f in p.busy.values())
    assert p.label == MODELED and p.summary().splitlines()[0].startswith(MODELED)


def test_every_engine_kernel_uses_every_engine(profiles):
    p = profiles["every_engine"]
    assert all(p.busy[lane] > 0 for lane in ("TensorE", "VectorE", "ScalarE", "GpSimd"))


def test_profile_runs_the_kernel_and_returns_its_outputs():
    x = _rand((128, 512))
    p = profile(hazards)(x)
    np.testing.assert_allclose(p.outputs, np.exp(x), rtol=1e-6)
    assert p.instructions == 6 and len(p.events) == 6


# -- the cost formulas against the documented numbers ------------------------------------------

def _access(buffer, dtype, pattern, itemsize, alloc=1):
    return Access(alloc=alloc, buffer=buffer, dtype=dtype, offset=0, pattern=pattern, itemsize=itemsize,
                  row_elems=pattern[-1][1] if buffer in ("sbuf", "psum") else None)


def _matmul(N, dtype="bfloat16", M=128):
    item = 4 if dtype == "float32" else 2
    stationary = _access("sbuf", dtype, ((M, 128), (1, M)), item, 1)
    moving = _access("sbuf", dtype, ((N, 128), (1, N)), item, 2)
    dst = _access("psum", "float32", ((N, M), (1, N)), 4, 3)
    return Instruction(0, "tensor", "nc_matmul", [stationary, moving], [dst])


def test_matmul_initiation_interval():
    ns = 1e3  # us -> ns
    assert costs.engine_us(_matmul(512)) * ns == pytest.approx(512 / 2.4)
    assert costs.engine_us(_matmul(1)) * ns == pytest.approx(64 / 2.4)      # MM_INIT_LATENCY
    assert costs.engine_us(_matmul(512, "float32")) == pytest.approx(4 * costs.engine_us(_matmul(512)))


def test_activation_and_vector_costs():
    one = Instruction(0, "scalar", "activation", [_access("sbuf", "float32", ((1, 128), (1, 1)), 4)],
                      [_access("sbuf", "float32", ((1, 128), (1, 1)), 4, 2)])
    assert costs.engine_us(one) * 1e3 == pytest.approx(65 / 1.2)              # MIN_II + 1 element

    def copy(dtype, item):
        return Instruction(0, "vector", "tensor_copy", [_access("sbuf", dtype, ((1024, 128), (1, 1024)), item)],
                           [_access("sbuf", dtype, ((1024, 128), (1, 1024)), item, 2)])
    assert costs.engine_us(copy("float32", 4)) * 1e3 == pytest.approx((100 + 1024) / 0.96)
    assert costs.engine_us(copy("bfloat16", 2)) * 1e3 == pytest.approx((100 + 1024 / 4) / 0.96)  # perf mode


def test_dma_descriptor_efficiency_follows_the_documented_curve():
    def load(free_bytes):
        n = free_bytes // 4
        src = _access("private_hbm", "float32", ((n, 128), (1, n)), 4)
        dst = _access("sbuf", "float32", ((n, 128), (1, n)), 4, 2)
        return costs.transfer(Instruction(0, "dma", "dma_copy", [src], [dst]))
    for free_bytes, doc in ((512, 0.21), (1024, 0.42), (2048, 0.81), (4096, 0.97)):
        t = load(free_bytes)
        assert t.bytes / t.work_bytes == pytest.approx(doc, abs=0.05)
    assert load(4096).engines == 16


def test_constants_table_has_a_source_for_every_row():
    names = [c.name for c in costs.TABLE]
    assert len(names) == len(set(names)) > 20
    for c in costs.TABLE:
        assert c.unit and c.source.startswith(("doc: ", "estimate: ")), c
    assert costs.HBM_ROOFLINE_GBPS == costs.DMA_ENGINES * costs.DMA_ENGINE_BYTES_PER_NS


def test_scheduling_a_few_thousand_instructions_is_fast():
    n = 3000
    rng = np.random.default_rng(0)
    ins = []
    for i in range(n):
        col = int(rng.integers(0, 4096 - 8))
        tile = _access("sbuf", "float32", ((4096, 128), (1, 8)), 4, alloc=1)
        tile = Access(1, "sbuf", "float32", col, tile.pattern, 4, 4096)
        if i % 3 == 0:
            src = _access("private_hbm", "float32", ((8, 128), (1, 8)), 4, 2)
            ins.append(Instruction(i, "dma", "dma_copy", [src], [tile]))
        else:
            ins.append(Instruction(i, ["vector", "scalar"][i % 2], "tensor_copy", [tile],
                                   [Access(3, "sbuf", "float32", col, tile.pattern, 4, 4096)]))
    start = time.perf_counter()
    slots = schedule(ins, {1: (128, 4096), 3: (128, 4096)})
    assert time.perf_counter() - start < 5.0  # about 0.3 s on a 2-core machine
    assert len(slots) == n and all(s.end_us > s.start_us for s in slots)
