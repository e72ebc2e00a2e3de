"""The trn2 cost model (nkicpu.costs, nkicpu.schedule, nkicpu.profile) on small kernels.

The kernels here exist to exercise the model: dependencies of each kind across engines,
independent DMAs, many DMAs sharing bandwidth, an HBM-to-HBM copy, every compute engine. Then
each cost term of the two estimates (best, likely) on hand-made instructions, the band's order
(roofline <= best <= likely) on random instruction streams, and two cores (LNC=2).
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
from nkicpu.costs import BANDS, BEST, LIKELY
from nkicpu.profile import MODELED, profile, profile_capture, profile_instructions
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


@nki.jit
def queue_choice(x):
    """Loads with each documented trigger choice, then two the compiler places."""
    tiles = []
    for _ in range(5):
        tiles.append(nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf))
    nisa.dma_copy(tiles[0], x[0:128], dge_mode=nisa.dge_mode.hwdge, engine=nisa.engine.sync, name="sync")
    nisa.dma_copy(tiles[1], x[128:256], dge_mode=nisa.dge_mode.hwdge, engine=nisa.engine.scalar, name="scalar")
    nisa.dma_copy(tiles[2], x[256:384], dge_mode=nisa.dge_mode.swdge, name="swdge")
    nisa.dma_copy(tiles[3], x[384:512], name="compiler0")
    nisa.dma_copy(tiles[4], x[512:640], dge_mode=nisa.dge_mode.hwdge, name="compiler1")
    out = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, tiles[0])
    return out


def test_a_dma_goes_to_the_queue_of_its_trigger():
    p = profile_capture(nkicpu.capture(queue_choice)(_rand((640, 256))))
    lanes = {e["name"]: e["lane"] for e in p.events}
    assert [lanes[n] for n in ("sync", "scalar", "swdge", "compiler0", "compiler1")] == \
        ["DMA SyncE", "DMA ScalarE", "DMA GpSimd", "DMA q0", "DMA q1"]
    trigger = [e for e in p.events if e["name"] == "DMA trigger"]          # in ScalarE's stream, no time
    assert [(e["lane"], e["dur_us"]) for e in trigger] == [("ScalarE", 0.0)]


def _stream(n):
    """A long VectorE op, a store of its result, then `n` short weight loads."""
    big = lambda a: _access("sbuf", "float32", ((16384, 128), (1, 16384)), 4, alloc=a)    # noqa: E731
    tile = lambda a: _access("sbuf", "float32", ((512, 128), (1, 512)), 4, alloc=a)       # noqa: E731
    hbm = lambda a: _access("shared_hbm", "float32", ((512, 128), (1, 512)), 4, alloc=a)  # noqa: E731
    ins = [Instruction(0, "vector", "tensor_copy", [big(1)], [big(2)]),
           Instruction(1, "dma", "dma_copy", [tile(2)], [hbm(3)])]
    ins += [Instruction(2 + j, "dma", "dma_copy", [hbm(10 + j)], [tile(30 + j)]) for j in range(n)]
    return ins


def test_a_dma_waiting_for_data_holds_up_only_its_own_queue():
    """The store waits for VectorE; the 4th load behind it on "DMA q0" waits too, unless the kernel
    gives the loads a queue of their own (hwdge, engine=sync)."""
    spread = profile_instructions(_stream(4))
    store_end = _end(spread.events[1])
    assert spread.events[5]["lane"] == spread.events[1]["lane"] == "DMA q0"
    assert spread.events[5]["start_us"] >= store_end - 1e-9
    own = _stream(4)
    for ins in own[2:]:
        ins.args.update(dge_mode="hwdge", trigger="sync")
    chosen = profile_instructions(own)
    assert {e["lane"] for e in chosen.events[2:6]} == {"DMA SyncE"}
    assert _end(chosen.events[5]) < store_end                              # all loaded before the store
    assert chosen.total_us < spread.total_us


def test_a_scalar_triggered_dma_takes_its_place_in_scalars_stream():
    """ScalarE: a long activation, the trigger of a store of VectorE's result, a short activation.
    The trigger waits for the activation before it; the activation after it waits for the trigger,
    which waits for VectorE."""
    k = 8192
    tile = lambda a, n=k: _access("sbuf", "float32", ((n, 128), (1, n)), 4, alloc=a)    # noqa: E731
    hbm = _access("shared_hbm", "float32", ((k, 128), (1, k)), 4, alloc=9)
    ins = [Instruction(0, "scalar", "activation", [tile(1)], [tile(2)], args={"op": "copy"}),
           Instruction(1, "vector", "tensor_copy", [tile(3)], [tile(4)]),
           Instruction(2, "dma", "dma_copy", [tile(4)], [hbm], args={"dge_mode": "hwdge", "trigger": "scalar"}),
           Instruction(3, "scalar", "activation", [tile(5, 64)], [tile(6, 64)], args={"op": "copy"})]
    for band in BANDS:
        slots = schedule(ins, band=band)
        trigger = next(s for s in slots if s.work == "DMA trigger")
        assert trigger.lane == "ScalarE" and trigger.index == 2
        assert trigger.start_us >= max(slots[0].end_us, slots[1].end_us) - 1e-9
        assert slots[3].start_us >= trigger.end_us - 1e-9
        assert slots[2].trigger_us >= trigger.end_us - 1e-9


@nki.jit
def tile_loop(x, n):
    """n tiles of x, each loaded into a new SBUF tile, summed on VectorE, then dropped."""
    acc = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
    for i in range(n):
        t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf, name=f"tile{i}")
        nisa.dma_copy(t, x[i * 128:(i + 1) * 128], name=f"load{i}")
        nisa.tensor_reduce(acc, nl.add, t, axis=1, name=f"sum{i}")
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, acc)
    return out


def test_a_tile_reusing_freed_memory_waits_for_its_last_reader():
    """64 KiB tiles: three fit in the 224 KiB of SBUF, so the 4th load takes the first tile's memory
    and must wait until its reduce has read it; the allocation order is the same either way."""
    x = _rand((128 * 6, 16384))
    c = nkicpu.capture(tile_loop)(x, 6)
    regions = [c.allocations[i.writes[0].alloc].region for i in c.instructions if i.opcode == "dma_copy"][:6]
    assert regions[3] == regions[0] and len({r for r in regions[:3]}) == 3   # next fit, then wrap around
    p = profile_capture(c)
    e = _by_name(p)
    assert e["load3"]["args"]["trigger_us"] >= _end(e["sum0"]) - 1e-9
    assert e["sum0"]["args"]["index"] in e["load3"]["args"]["deps"]
    # Without the addresses, nothing bounds the prefetch: every load starts at once.
    free = profile_instructions(c.instructions, outputs=c.outputs)
    assert _by_name(free)["load3"]["args"]["trigger_us"] == 0.0
    assert free.total_us < p.total_us


def test_on_chip_addresses_are_next_fit_and_pieced_when_fragmented():
    from nkicpu.memory import SBUF_USABLE_BYTES, Accounting, Allocation, MemoryRegion
    acc, ids = Accounting(), iter(range(1, 100))

    def sbuf(nbytes):
        return Allocation(next(ids), (128, nbytes), np.dtype(np.uint8), MemoryRegion.sbuf, None, acc)
    KiB = 1024
    a, b = sbuf(90 * KiB), sbuf(90 * KiB)
    assert (a.region, b.region) == (((0, 90 * KiB),), ((90 * KiB, 180 * KiB),))
    del a
    c = sbuf(20 * KiB)                                     # after b, not in a's freed memory
    assert c.region == ((180 * KiB, 200 * KiB),)
    d = sbuf(60 * KiB)                                     # no room after c: wraps around to a's memory
    assert d.region == ((0, 60 * KiB),)
    e = sbuf(30 * KiB)                                     # the rest of a's memory
    assert e.region == ((60 * KiB, 90 * KiB),)
    acc, ids = Accounting(), iter(range(1, 100))           # a fresh SBUF: four quarter tiles fill it
    Q = SBUF_USABLE_BYTES // 4
    tiles = [sbuf(Q) for _ in range(4)]
    del tiles[2], tiles[0]
    h = sbuf(Q + 10 * KiB)                                 # 2Q free, no Q + 10 KiB of it contiguous
    assert h.region == ((0, Q), (2 * Q, 2 * Q + 10 * KiB))
    with pytest.raises(nkicpu.NkiValidationError, match="sbuf-capacity"):
        sbuf(Q - 10 * KiB + 1)


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
    # Six instructions, event k is instruction k; then the exp table load the record does not show.
    assert p.instructions == 6 and [e["args"]["index"] for e in p.events[:6]] == list(range(6))
    assert [e["name"] for e in p.events[6:]] == ["ACT_TABLE_LOAD exp"]


def test_launch_preamble_and_epilogue_are_reported_apart(profiles):
    p = profiles["hazards"]
    assert p.launch_us == costs.LAUNCH_PREAMBLE_US + costs.LAUNCH_EPILOGUE_US > 0
    assert max(_end(e) for e in p.events) == pytest.approx(p.total_us)   # not in the kernel's time
    assert "launch" in p.summary() and "not in the total" in p.summary()


# -- the cost formulas against the documented numbers and the measurements -----------------------

def _access(buffer, dtype, pattern, itemsize, alloc=1, offset=0):
    return Access(alloc=alloc, buffer=buffer, dtype=dtype, offset=offset, pattern=pattern, itemsize=itemsize,
                  row_elems=pattern[-1][1] if buffer in ("sbuf", "psum") else None)


def _matmul(N, dtype="bfloat16", M=128, K=128):
    item = 4 if dtype == "float32" else 2
    stationary = _access("sbuf", dtype, ((M, K), (1, M)), item, 1)
    moving = _access("sbuf", dtype, ((N, K), (1, N)), item, 2)
    dst = _access("psum", "float32", ((N, M), (1, N)), 4, 3)
    return Instruction(0, "tensor", "nc_matmul", [stationary, moving], [dst])


def _us(ins, band):
    return costs.engine_us(ins, band)


def test_matmul_best_is_the_documented_initiation_interval():
    ns = 1e3  # us -> ns
    assert _us(_matmul(512), BEST) * ns == pytest.approx(512 / 2.4)       # LoadStationary hidden behind it
    assert _us(_matmul(1), BEST) * ns == pytest.approx(64 / 2.4)          # MM_INIT_LATENCY


def test_matmul_likely_adds_a_load_stationary_of_k_cycles():
    ns = 1e3
    assert _us(_matmul(512), LIKELY) * ns == pytest.approx((128 + 512) / 2.4)
    assert _us(_matmul(512, K=32), LIKELY) * ns == pytest.approx((32 + 512) / 2.4)
    # The measured fp32 in_proj matmul: 2 passes of (128 + 512) cycles = 533 ns; 592 ns measured.
    assert _us(_matmul(512, "float32"), LIKELY) * ns == pytest.approx(2 * 640 / 2.4)


def test_tensor_instructions_have_a_floor_in_likely_only():
    assert _us(_matmul(1), LIKELY) == costs.TENSOR_FLOOR_US       # (128 + 64) cycles = 80 ns < 140 ns
    assert _us(_matmul(1), BEST) < costs.TENSOR_FLOOR_US
    assert _us(_matmul(512), LIKELY) > costs.TENSOR_FLOOR_US      # a long matmul is above the floor


@pytest.mark.parametrize("band", BANDS)
def test_fp32_matmul_is_two_passes_and_fp32_transpose_one(band):
    assert _us(_matmul(512, "float32"), band) == pytest.approx(2 * _us(_matmul(512), band))

    def transpose(dtype, item):
        data = _access("sbuf", dtype, ((128, 128), (1, 128)), item, 1)
        dst = _access("psum", dtype, ((128, 128), (1, 128)), item, 2)
        return Instruction(0, "tensor", "nc_transpose", [data], [dst])
    assert _us(transpose("float32", 4), band) == _us(transpose("bfloat16", 2), band)


def test_activation_and_vector_costs():
    one = Instruction(0, "scalar", "activation", [_access("sbuf", "float32", ((1, 128), (1, 1)), 4)],
                      [_access("sbuf", "float32", ((1, 128), (1, 1)), 4, 2)], args={"op": "exp"})
    assert costs.engine_us(one) * 1e3 == pytest.approx(65 / 1.2)              # MIN_II + 1 element

    def copy(dtype, item):
        return Instruction(0, "vector", "tensor_copy", [_access("sbuf", dtype, ((1024, 128), (1, 1024)), item)],
                           [_access("sbuf", dtype, ((1024, 128), (1, 1024)), item, 2)])
    assert costs.engine_us(copy("float32", 4)) * 1e3 == pytest.approx((100 + 1024) / 0.96)
    assert costs.engine_us(copy("bfloat16", 2)) * 1e3 == pytest.approx((100 + 1024 / 4) / 0.96)  # perf mode


def _load(free_bytes, partitions=128, **args):
    n = free_bytes // 4
    src = _access("private_hbm", "float32", ((n, partitions), (1, n)), 4)
    dst = _access("sbuf", "float32", ((n, partitions), (1, n)), 4, 2)
    return Instruction(0, "dma", "dma_copy", [src], [dst], args=args)


@pytest.mark.parametrize("band", BANDS)
def test_short_dma_runs_follow_the_documented_curve(band):
    for free_bytes in (64, 256):  # below DMA_LONG_RUN_BYTES: each run costs DMA_DESCRIPTOR_BYTES
        t = costs.transfer(_load(free_bytes), band)
        assert t.bytes / t.work_bytes == pytest.approx(free_bytes / costs.DMA_DESCRIPTOR_BYTES)
    assert costs.transfer(_load(4096), band).engines == 16


def test_long_dma_runs_pay_a_weaker_penalty():
    for free_bytes in (512, 1024, 4096):
        best, likely = costs.transfer(_load(free_bytes), BEST), costs.transfer(_load(free_bytes), LIKELY)
        assert best.work_bytes == best.bytes                     # the documented peak: bytes only
        assert likely.bytes / likely.work_bytes == pytest.approx(
            free_bytes / (free_bytes + costs.DMA_DESCRIPTOR_OVERHEAD_BYTES))


def test_likely_dma_rates_reproduce_the_measured_weight_streams():
    """The fit behind DMA_ACHIEVED_GBPS: 6.36 MB as 10,240 runs of ~620 B measured 240 GB/s, as
    1,664 runs of ~3.8 KiB 267 GB/s."""
    def stream(run_elems, runs):
        src = _access("private_hbm", "float32", ((2 * run_elems, runs), (1, run_elems)), 4)
        dst = _access("sbuf", "float32", ((runs // 128 * run_elems, 128), (1, runs // 128 * run_elems)), 4, 2)
        t = costs.transfer(Instruction(0, "dma", "dma_copy", [src], [dst]), LIKELY)
        assert t.descriptors == runs
        return t.bytes / (t.work_bytes / costs.dma_bytes_per_us(LIKELY)) / 1e3   # GB/s while moving
    assert stream(155, 10240) == pytest.approx(240, rel=0.01)                 # 620 B runs
    assert stream(955, 1664) == pytest.approx(267, rel=0.01)                  # 3820 B runs


def test_dma_transpose_runs_at_its_documented_share_of_the_throughput():
    def transpose(src_buffer):
        src = _access(src_buffer, "bfloat16", ((512, 128), (1, 512)), 2)      # [128, 512]: HBM one run, SBUF 128
        dst = _access("sbuf", "bfloat16", ((128, 512), (1, 128)), 2, 2)
        return Instruction(0, "dma", "dma_transpose", [src], [dst])
    moved, o = 128 * 512 * 2, costs.DMA_DESCRIPTOR_OVERHEAD_BYTES
    for band, hbm_work, sbuf_work in ((BEST, moved, moved), (LIKELY, moved + o, moved + 128 * o)):
        hbm, sbuf = costs.transfer(transpose("private_hbm"), band), costs.transfer(transpose("sbuf"), band)
        assert hbm.work_bytes == pytest.approx(hbm_work / costs.DMA_TRANSPOSE_HBM_EFFICIENCY)
        assert sbuf.work_bytes == pytest.approx(sbuf_work / costs.DMA_TRANSPOSE_SBUF_EFFICIENCY)
        assert hbm.engines == sbuf.engines == 16                                # all engines cooperate


def test_descriptor_generation_per_dge_mode():
    latency = {(mode, band): costs.transfer(_load(4096, dge_mode=mode), band).latency_us
               for mode in ("none", "hwdge", "unknown") for band in BANDS}
    assert latency[("none", BEST)] == latency[("none", LIKELY)] == costs.DMA_FIXED_US
    assert latency[("hwdge", BEST)] == latency[("hwdge", LIKELY)] == costs.DMA_FIXED_US + costs.DGE_ISSUE_US
    assert latency[("unknown", BEST)] == costs.DMA_FIXED_US                   # the compiler may pick static
    assert latency[("unknown", LIKELY)] == costs.DMA_FIXED_US + costs.DGE_ISSUE_US


def test_software_dge_keeps_gpsimd_busy_before_its_dma():
    busy = Instruction(0, "gpsimd", "tensor_copy", [_access("sbuf", "float32", ((4096, 128), (1, 4096)), 4, 5)],
                       [_access("sbuf", "float32", ((4096, 128), (1, 4096)), 4, 6)])
    load = _load(4096, dge_mode="swdge")
    load.index = 1
    for band in BANDS:
        slots = schedule([busy, load], band=band)
        work = [s for s in slots if s.work]
        assert [(s.work, s.lane, s.index) for s in work] == [("SWDGE descriptors", "GpSimd", 1)]
        assert work[0].start_us == pytest.approx(slots[0].end_us)            # behind GpSimd's own work
        assert work[0].end_us - work[0].start_us == pytest.approx(costs.SWDGE_GPSIMD_US)
        assert slots[1].start_us == pytest.approx(work[0].end_us + costs.DMA_FIXED_US)


def test_likely_dma_moves_at_the_achieved_rate():
    big = _load(64 * 1024, dge_mode="none")                                    # 8 MiB, 64 KiB per partition
    best, likely = schedule([big], band=BEST)[0], schedule([big], band=LIKELY)[0]
    assert best.end_us - best.start_us == pytest.approx(big.nbytes / costs.BYTES_PER_US)
    work = big.nbytes + 128 * costs.DMA_DESCRIPTOR_OVERHEAD_BYTES
    assert likely.end_us - likely.start_us == pytest.approx(work / (costs.DMA_ACHIEVED_GBPS * 1e3))


# -- ScalarE function tables, semaphores ------------------------------------------------------

def _scalar(index, op, alloc, opcode="activation", reads=None):
    tile = _access("sbuf", "float32", ((512, 128), (1, 512)), 4, alloc)
    return Instruction(index, "scalar", opcode, [reads or _access("sbuf", "float32", ((512, 128), (1, 512)), 4, 100)],
                       [tile], args={"op": op} if op else {})


def test_an_activation_table_switch_is_charged_only_when_the_table_changes():
    ops = ["copy", "square", "rsqrt", "sigmoid", "sigmoid", "exp", None, "tanh", "tanh", "silu"]
    ins = [_scalar(i, op, 10 + i, opcode="activation" if op else "tensor_copy") for i, op in enumerate(ops)]
    likely, best = schedule(ins, band=LIKELY), schedule(ins, band=BEST)
    loads = [s for s in likely if s.work]
    # copy/square/rsqrt share a table, a ScalarE copy uses it too; tanh is outside the measured map.
    assert [(s.work, s.index) for s in loads] == [
        ("ACT_TABLE_LOAD copy/square/rsqrt", 0), ("ACT_TABLE_LOAD sigmoid", 3), ("ACT_TABLE_LOAD exp", 5),
        ("ACT_TABLE_LOAD copy/square/rsqrt", 6), ("ACT_TABLE_LOAD tanh", 7), ("ACT_TABLE_LOAD silu", 9)]
    assert all(s.lane == "ScalarE" for s in loads) and not any(s.work for s in best)
    end = max(s.end_us for s in likely) - max(s.end_us for s in best)
    assert end == pytest.approx(len(loads) * costs.ACT_TABLE_SWITCH_US)       # one engine, back to back


def test_a_table_load_runs_while_its_activation_waits_for_data():
    x = _rand((128, 512))
    p = profile(hazards)(x)       # load (DMA), then exp on ScalarE
    e = _by_name(p)
    table = next(ev for ev in p.events if ev["name"] == "ACT_TABLE_LOAD exp")
    assert table["start_us"] == 0 and _end(table) < _end(e["load"])
    assert e["raw"]["start_us"] == pytest.approx(_end(e["load"]) + costs.SEMAPHORE_US)


def test_semaphore_latency_only_on_cross_engine_waits():
    tile = lambda alloc: _access("sbuf", "float32", ((512, 128), (1, 512)), 4, alloc)   # noqa: E731
    hbm = _access("shared_hbm", "float32", ((512, 128), (1, 512)), 4, 9)
    ins = [Instruction(0, "vector", "tensor_copy", [tile(1)], [tile(2)]),
           Instruction(1, "vector", "tensor_copy", [tile(2)], [tile(3)]),      # same engine
           Instruction(2, "gpsimd", "tensor_copy", [tile(2)], [tile(4)]),      # another engine
           Instruction(3, "dma", "dma_copy", [tile(2)], [hbm], args={"dge_mode": "none"}),  # a DMA
           Instruction(4, "vector", "tensor_copy", [tile(5)], [tile(6)]),
           Instruction(5, "dma", "dma_copy", [hbm], [tile(7)], args={"dge_mode": "none"}),
           Instruction(6, "gpsimd", "tensor_copy", [tile(7)], [tile(8)])]     # waits for a DMA
    for band, sem in ((BEST, 0.0), (LIKELY, costs.SEMAPHORE_US)):
        s = schedule(ins, band=band)
        assert s[1].start_us == pytest.approx(s[0].end_us)
        assert s[2].start_us == pytest.approx(s[0].end_us + sem)
        assert s[3].start_us == pytest.approx(s[0].end_us + costs.DMA_FIXED_US)  # inside the DMA's latency
        assert s[6].start_us == pytest.approx(s[5].end_us + sem)


# -- the band -------------------------------------------------------------------------------------

def _random_stream(rng, n=40, cores=1):
    """Random work on `cores` cores: DMAs of every kind, matmuls, activations, vector and GpSimd ops."""
    ins = []
    for i in range(n):
        core = int(rng.integers(0, cores))
        tile = lambda k, free=512: _access("sbuf", "float32", ((free, 128), (1, free)), 4,  # noqa: E731
                                           alloc=100 * core + k)
        kind = rng.integers(0, 7)
        if kind <= 1:
            run = int(rng.choice([1, 16, 100, 128, 256, 512]))                # elements per run
            hbm = _access("private_hbm", "float32", ((4 * run, 128), (1, run)), 4, alloc=1000 + i)
            dst = _access("sbuf", "float32", ((512, 128), (1, run)), 4, alloc=100 * core + int(rng.integers(0, 6)))
            opcode = "dma_transpose" if rng.random() < 0.2 else "dma_copy"
            mode = str(rng.choice(["none", "hwdge", "swdge", "unknown"]))
            src, dst = (hbm, dst) if kind == 0 else (dst, hbm)
            ins.append(Instruction(i, "dma", opcode, [src], [dst], args={"dge_mode": mode}, core=core))
        elif kind == 2:
            K, M, N = (int(rng.choice([1, 32, 128])) for _ in range(3))
            dtype = str(rng.choice(["float32", "bfloat16"]))
            item = 4 if dtype == "float32" else 2
            stat = _access("sbuf", dtype, ((M, K), (1, M)), item, alloc=100 * core + int(rng.integers(0, 6)))
            mov = _access("sbuf", dtype, ((N, K), (1, N)), item, alloc=100 * core + int(rng.integers(0, 6)))
            dst = _access("psum", "float32", ((N, M), (1, N)), 4, alloc=100 * core + 50)
            ins.append(Instruction(i, "tensor", "nc_matmul", [stat, mov], [dst], core=core))
        elif kind == 3:
            op = str(rng.choice(["copy", "exp", "sigmoid", "silu", "softplus", "tanh"]))
            ins.append(Instruction(i, "scalar", "activation", [tile(int(rng.integers(0, 6)))],
                                   [tile(int(rng.integers(0, 6)))], args={"op": op}, core=core))
        else:
            engine = str(rng.choice(["vector", "vector", "gpsimd"]))
            free = int(rng.choice([1, 64, 512]))
            ins.append(Instruction(i, engine, "tensor_copy", [tile(int(rng.integers(0, 6)), free)],
                                   [tile(int(rng.integers(0, 6)), free)], core=core))
    return ins


@pytest.mark.parametrize("cores", [1, 2])
def test_band_is_ordered_roofline_best_likely_on_random_streams(cores):
    rng = np.random.default_rng(cores)
    for _ in range(60):
        p = profile_instructions(_random_stream(rng, cores=cores))
        if p.hbm_read_bytes + p.hbm_write_bytes:
            assert p.roofline_us <= p.best_us + 1e-9
        assert p.best_us <= p.total_us + 1e-9


# -- LNC=2: two cores ---------------------------------------------------------------------------

def _core_work(core, index, free_bytes):
    """A load, a VectorE op on it and a store, on one core."""
    n = free_bytes // 4
    tile = lambda k: _access("sbuf", "float32", ((n, 128), (1, n)), 4, alloc=10 * core + k)   # noqa: E731
    hbm = lambda k: _access("shared_hbm", "float32", ((n, 128), (1, n)), 4, alloc=100 + 10 * core + k)  # noqa: E731
    return [Instruction(index, "dma", "dma_copy", [hbm(0)], [tile(0)], core=core),
            Instruction(index + 1, "vector", "tensor_copy", [tile(0)], [tile(1)], core=core),
            Instruction(index + 2, "dma", "dma_copy", [tile(1)], [hbm(1)], core=core)]


def test_each_core_has_its_own_engines_queues_and_dma_bandwidth():
    one = profile_instructions(_core_work(0, 0, 16384))
    two = profile_instructions(_core_work(0, 0, 16384) + _core_work(1, 3, 16384))
    assert two.cores == 2 and set(two.busy) >= {"c0 VectorE", "c1 VectorE", "c0 DMA q0", "c1 DMA q0", "c1 TensorE"}
    assert not any(lane.startswith("c") for lane in one.busy)                # no core names on one core
    assert two.events[0]["lane"] == "c0 DMA q0" and two.events[3]["lane"] == "c1 DMA q0"
    # The same work on the other core, at the same time: neither core's DMA slows the other's.
    for k in range(3):
        assert two.events[k + 3]["start_us"] == pytest.approx(two.events[k]["start_us"])
        assert two.events[k + 3]["dur_us"] == pytest.approx(one.events[k]["dur_us"])
    assert (two.total_us, two.best_us) == pytest.approx((one.total_us, one.best_us))
    # Twice the bytes over twice the bandwidth: the same roofline.
    assert two.hbm_read_bytes == 2 * one.hbm_read_bytes and two.roofline_us == pytest.approx(one.roofline_us)


def test_the_total_is_the_later_core():
    p = profile_instructions(_core_work(0, 0, 4096) + _core_work(1, 3, 65536))
    ends = {core: max(_end(e) for e in p.events if e["lane"].startswith(f"c{core} ")) for core in (0, 1)}
    assert ends[1] > ends[0] and p.total_us == pytest.approx(ends[1])
    assert p.roofline_us == pytest.approx((p.hbm_read_bytes + p.hbm_write_bytes) / (2 * costs.BYTES_PER_US))


# -- the table ---------------------------------------------------------------------------------

def test_constants_table_has_a_source_and_a_band_for_every_row():
    names = [c.name for c in costs.TABLE]
    assert len(names) == len(set(names)) > 30
    for c in costs.TABLE:
        assert c.unit and c.source.startswith(("doc: ", "measured: ", "estimate: ")), c
        assert c.band in ("both", BEST, LIKELY, "launch"), c
    assert costs.HBM_ROOFLINE_GBPS == costs.DMA_ENGINES * costs.DMA_ENGINE_BYTES_PER_NS
    # Every LIKELY-only constant makes the likely estimate slower than the best one, never faster.
    assert costs.DMA_ACHIEVED_GBPS < costs.HBM_ROOFLINE_GBPS
    assert min(costs.TENSOR_FLOOR_US, costs.SEMAPHORE_US, costs.ACT_TABLE_SWITCH_US,
               costs.DMA_DESCRIPTOR_OVERHEAD_BYTES, costs.LOAD_STATIONARY_CYCLES_PER_ROW) > 0


def test_an_unknown_estimate_is_rejected():
    with pytest.raises(ValueError, match="band must be one of"):
        costs.engine_us(_matmul(512), "worst")


def test_a_dma_instruction_the_model_does_not_price_is_not_modeled():
    ins = _load(4096)
    ins.opcode = "dma_compute"
    with pytest.raises(NotImplementedError, match="dma_compute"):
        costs.transfer(ins)


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
    assert len(slots) == n + 1 and slots[n].work == "ACT_TABLE_LOAD copy/square/rsqrt"   # ScalarE copies
    assert all(s.end_us > s.start_us for s in slots)
