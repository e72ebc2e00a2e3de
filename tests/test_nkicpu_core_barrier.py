"""nisa.core_barrier (NKI 0.7) and nki.lnc.core_barrier (NKI 0.8): the programs of an LNC=2 launch
wait for each other (SDK isa stub, core_barrier; nki/guides/nki_simulator.rst runs them as two
threads), the race check accepts what a barrier orders, and the cost model ends every core's k-th
barrier together (nkicpu/grid.py, nkicpu/run.py, nkicpu/schedule.py rule 6)."""
import dataclasses
import inspect
import sys
import threading

import numpy as np
import pytest

import kernels  # noqa: F401  registers nkicpu as `nki` where the Neuron SDK is absent
import nki.lnc
import nkicpu
from nkicpu import costs, grid
from nkicpu.costs import BEST, LIKELY
from nkicpu.profile import (capture_slots, critical_path, critical_path_parts, event_end, lower_bounds,
                            profile_capture)
from nkicpu.schedule import dependencies, schedule
from nkicpu.timeline import plot_timeline, trace_events
from nkicpu_testing import F32, NkiValidationError, assert_bits_equal, load, nisa, nki, nl, rand

BARRIERS = [nisa.core_barrier, nki.lnc.core_barrier]
NAMES = ["nisa", "nki.lnc"]


def _ops(capture):
    return [(i.core, i.opcode) for i in capture.instructions]


def test_both_names_have_the_documented_signature_and_nki_lnc_holds_core_barrier_and_sendrecv():
    """nki.lnc.core_barrier(data, cores, engine=engine.gpsimd, name=None) (NKI 0.8 API page) and the
    NKI 0.7 name (SDK 2.32 isa stub); nki.lnc.sendrecv is named but not modeled, and the rest of
    nki.lnc (sendrecv_compute) is not there."""
    for f in BARRIERS:
        params = inspect.signature(f).parameters
        assert list(params) == ["data", "cores", "engine", "name"]
        assert (params["engine"].default, params["name"].default) == (nisa.engine.gpsimd, None)
    assert sys.modules["nki.lnc"] is nkicpu.lnc and nki.lnc.__all__ == ["core_barrier", "sendrecv"]
    with pytest.raises(NotImplementedError, match=r"nkicpu does not model nki.lnc.sendrecv: the programs"):
        nki.lnc.sendrecv(src=None, dst=None, send_to_rank=1, recv_from_rank=1)
    with pytest.raises(NotImplementedError, match=r"nkicpu does not model nki.lnc.sendrecv_compute"):
        nki.lnc.sendrecv_compute
    assert not hasattr(nki.lnc, "__wrapped__")


# -- kernels -----------------------------------------------------------------------------------

@nki.jit
def exchange_halves(x, barrier):
    """Each program doubles its row of x into a shared scratch; after the barrier (None: without
    one) it copies the other program's row of the scratch into its row of the output."""
    i = nl.program_id(0)
    scratch = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="scratch")
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="out")
    t = load(x[i:i + 1])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=scratch[i:i + 1], src=t)
    if barrier is not None:
        barrier(scratch, (0, 1))
    nisa.dma_copy(dst=out[i:i + 1], src=load(scratch[1 - i:2 - i]))
    return out


@nki.jit
def read_then_update(state, barrier):
    """Both programs read all of `state` (a shared HBM argument); after the barrier program 0 adds 1
    to it in place. Each returns what it read, in its half of the output."""
    i = nl.program_id(0)
    n = state.shape[0]
    out = nl.ndarray((2 * n, state.shape[1]), state.dtype, buffer=nl.shared_hbm, name="out")
    t = load(state)
    if barrier is not None:
        barrier(state, (0, 1))
    if i == 0:
        u = nl.ndarray(state.shape, state.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=state, src=u)
    nisa.dma_copy(dst=out[i * n:(i + 1) * n], src=t)
    return out


@nki.jit
def calls_barrier(x, counts):
    """Program i calls core_barrier counts[i] times."""
    i = nl.program_id(0)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[i:i + 1], src=load(x[i:i + 1]))
    for _ in range(counts[i]):
        nisa.core_barrier(out, (0, 1))
    return out


# -- program order at the barrier ------------------------------------------------------------------

@pytest.mark.parametrize("barrier", BARRIERS, ids=NAMES)
def test_each_program_reads_the_half_the_other_wrote_after_the_barrier(barrier):
    x = rand((2, 4), F32)
    c = nkicpu.capture(exchange_halves[2])(x, barrier)
    assert_bits_equal(c.outputs, 2 * x[::-1])
    # program 0 to its barrier, program 1 to its barrier, then each after it, in program order
    before = ["dma_copy", "tensor_scalar", "dma_copy", "core_barrier"]
    assert _ops(c) == ([(0, op) for op in before] + [(1, op) for op in before]
                       + [(0, "dma_copy")] * 2 + [(1, "dma_copy")] * 2)


def test_without_the_barrier_reading_the_others_half_is_a_race():
    """Program 0 reads row 1 of the scratch before program 1 writes it."""
    with pytest.raises(NkiValidationError, match=r"\[lnc-race\] nisa.dma_copy in program 1: changes 4 element\(s\) "
                                                 r"of scratch that program 0 read; .*run at the same time .*only a "
                                                 r"core_barrier on scratch between the two accesses orders them"):
        nki.simulate(exchange_halves[2])(rand((2, 4), F32), None)


@pytest.mark.parametrize("barrier", BARRIERS, ids=NAMES)
def test_what_a_program_read_before_the_barrier_is_the_old_state(barrier):
    state = rand((4, 8), F32)
    caller = state.copy()
    out = nki.simulate(read_then_update[2])(caller, barrier)
    assert_bits_equal(out, np.concatenate([state, state]))   # program 1 read before program 0's write
    assert_bits_equal(caller, state + F32(1))                 # the argument updated in place


def test_without_the_barrier_the_in_place_write_races_with_the_other_read():
    with pytest.raises(NkiValidationError, match=r"\[lnc-race\] nisa.dma_copy in program 1: reads 32 element\(s\) "
                                                 r"of arg0 that program 0 wrote"):
        nki.simulate(read_then_update[2])(rand((4, 8), F32), None)


def test_accesses_after_the_barrier_are_checked_again():
    """A barrier orders what lies before it against what lies after it; two writes after it race."""
    @nki.jit
    def k(x):
        i = nl.program_id(0)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="out")
        nisa.dma_copy(dst=out[i:i + 1], src=load(x[i:i + 1]))
        nisa.core_barrier(out, (0, 1))
        t = load(x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(i))
        nisa.dma_copy(dst=out, src=t)                    # both programs write all of it, differently
        return out

    with pytest.raises(NkiValidationError, match=r"\[lnc-race\] nisa.dma_copy in program 1: changes 8 element\(s\) "
                                                 r"of out that program 0 wrote"):
        nki.simulate(k[2])(rand((2, 4), F32))


def test_a_barrier_on_one_tensor_does_not_order_another():
    @nki.jit
    def k(x):
        i = nl.program_id(0)
        scratch = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="scratch")
        flag = nl.ndarray((1, 1), x.dtype, buffer=nl.shared_hbm, name="flag")
        nisa.dma_copy(dst=scratch[i:i + 1], src=load(x[i:i + 1]))
        nisa.core_barrier(flag, (0, 1))
        return scratch if i else load_and_store(scratch)

    with pytest.raises(NkiValidationError, match=r"\[lnc-race\] .*reads 4 element\(s\) of scratch that program 1 "
                                                 r"wrote"):
        nki.simulate(k[2])(rand((2, 4), F32))


def load_and_store(scratch):
    """Program 0 reads the row program 1 wrote (after the barrier, but the barrier names another tensor)."""
    nisa.dma_copy(dst=scratch[0:1], src=load(scratch[1:2]))
    return scratch


def test_each_program_resumes_with_its_own_state():
    """After the barrier each program has its own program id, ScalarE registers and SBUF accounting
    again, and its shared_hbm allocations are program 0's."""
    @nki.jit
    def k(x):
        i = nl.program_id(0)
        out = nl.ndarray((2, 2), x.dtype, buffer=nl.shared_hbm, name="out")
        big = nl.ndarray((128, 1024 * (i + 1)), nl.float32, buffer=nl.sbuf)   # 4 KiB / 8 KiB a partition
        nisa.memset(dst=big, value=0.0)
        t = load(x[i:i + 1])
        nisa.activation(dst=t, op=nl.copy, data=t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.dma_copy(dst=out[i:i + 1, 0:2], src=t[:, 0:2])
        nisa.core_barrier(out, (0, 1))
        late = nl.ndarray((2, 2), x.dtype, buffer=nl.shared_hbm, name="late")   # program 0's in both
        r = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=t, op=nl.copy, data=t, reduce_op=nl.add, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.dma_copy(dst=late[i:i + 1, 0:1], src=r)               # twice its own row's sum
        nisa.dma_copy(dst=late[i:i + 1, 1:2], src=load(out[1 - i:2 - i, 0:1]))
        return late

    x = rand((2, 4), F32)
    c = nkicpu.capture(k[2])(x)
    sums = x.sum(axis=1, dtype=F32)
    assert_bits_equal(c.outputs, np.stack([[sums[0] + sums[0], x[1, 0]], [sums[1] + sums[1], x[0, 0]]]))
    peak0, peak1 = c.peak_sbuf_bytes_per_core
    assert peak1 - peak0 == 4096 and peak0 > 4096
    assert [a for a, info in c.allocations.items() if info.name == "late"] != []
    assert len([info for info in c.allocations.values() if info.name == "late"]) == 1


def test_a_launch_without_a_barrier_starts_no_thread(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a thread was started")

    monkeypatch.setattr(grid.threading, "Thread", refuse)
    x = rand((2, 4), F32)
    assert_bits_equal(nki.simulate(calls_barrier[2])(x, (0, 0)), x)


@pytest.mark.parametrize("counts,words", [
    ((2, 1), "program 0 called it 2 time(s), program 1 ended after 1"),
    ((1, 2), "program 1 called it 2 time(s), program 0 ended after 1"),
    ((1, 0), "program 0 called it 1 time(s), program 1 ended after 0"),
    ((0, 1), "program 1 called it 1 time(s), program 0 ended after 0"),
])
def test_every_program_calls_the_barrier_as_often(counts, words):
    threads = threading.active_count()
    with pytest.raises(NkiValidationError, match=r"\[lnc-barrier\] core_barrier: " + words.replace("(", r"\(")
                       .replace(")", r"\)") + ": every program of a launch grid must call core_barrier the same "
                                              "number of times"):
        nki.simulate(calls_barrier[2])(rand((2, 4), F32), counts)
    assert threading.active_count() == threads           # no program left waiting
    x = rand((2, 4), F32)
    assert_bits_equal(nki.simulate(calls_barrier[2])(x, (3, 3)), x)


@nki.jit
def fails(x, failing, before):
    """Program `failing` breaks a rule (dma-size) before or after the barrier."""
    i = nl.program_id(0)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[i:i + 1], src=load(x[i:i + 1]))
    if before and i == failing:
        nisa.dma_copy(dst=out[0:1], src=load(x))
    nisa.core_barrier(out, (0, 1))
    if not before and i == failing:
        nisa.dma_copy(dst=out[0:1], src=load(x))
    return out


@pytest.mark.parametrize("failing", [0, 1])
@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_an_error_in_either_program_reaches_the_caller(failing, before):
    threads = threading.active_count()
    with pytest.raises(NkiValidationError, match=r"^\[dma-size\] nisa.dma_copy: dst has 4 elements \(\[1, 4\]\), "
                                                 r"src 8 \(\[2, 4\]\)$"):
        nki.simulate(fails[2])(rand((2, 4), F32), failing, before)
    assert threading.active_count() == threads


def test_a_python_error_in_a_waiting_program_keeps_its_type_and_message():
    @nki.jit
    def k(x):
        i = nl.program_id(0)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[i:i + 1], src=load(x[i:i + 1]))
        nisa.core_barrier(out, (0, 1))
        assert i == 0, "program 1 stops here"
        return out

    with pytest.raises(AssertionError, match=r"^program 1 stops here"):
        nki.simulate(k[2])(rand((2, 4), F32))


# -- what core_barrier refuses -------------------------------------------------------------------------

def _private(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.private_hbm)
    nisa.dma_copy(dst=t, src=x)
    return t


REFUSED = [
    ("no grid", None, lambda x: nisa.core_barrier(x, (0, 1)), NkiValidationError,
     r"\[lnc-barrier\] nisa.core_barrier: the kernel was launched without a grid; core_barrier synchronises the two "
     r"physical cores of an LNC=2 launch kernel\[2\]"),
    ("kernel[1]", 1, lambda x: nki.lnc.core_barrier(x, (0, 1)), NkiValidationError,
     r"\[lnc-barrier\] nki.lnc.core_barrier: the kernel was launched as kernel\[1\]"),
    ("cores (1, 0)", 2, lambda x: nisa.core_barrier(x, (1, 0)), NkiValidationError,
     r"\[lnc-barrier\] nisa.core_barrier: only cores=\(0, 1\) is supported .*got cores=\(1, 0\)"),
    ("cores (0, 1, 2)", 2, lambda x: nisa.core_barrier(x, (0, 1, 2)), NkiValidationError, r"only cores=\(0, 1\)"),
    ("cores 2", 2, lambda x: nisa.core_barrier(x, 2), NkiValidationError, r"only cores=\(0, 1\)"),
    ("sbuf", 2, lambda x: nisa.core_barrier(load(x), (0, 1)), NkiValidationError,
     r"\[lnc-barrier\] nisa.core_barrier: data must be in shared HBM .* in sbuf"),
    ("private_hbm", 2, lambda x: nisa.core_barrier(_private(x), (0, 1)), NkiValidationError,
     r"data must be in shared HBM .* in private_hbm"),
    ("not a tensor", 2, lambda x: nisa.core_barrier(None, (0, 1)), TypeError,
     r"nisa.core_barrier: data must be an NkiTensor"),
    ("raw engine", 2, lambda x: nisa.core_barrier(x, (0, 1), engine=3), TypeError,
     r"engine must be a nisa.engine member"),
    ("engine sync", 2, lambda x: nisa.core_barrier(x, (0, 1), engine=nisa.engine.sync), NotImplementedError,
     r"nkicpu does not model nisa.core_barrier on engine.sync"),
]


@pytest.mark.parametrize("what,grid_n,body,error,words", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(what, grid_n, body, error, words):
    kernel = nki.jit(body)
    with pytest.raises(error, match=words):
        nki.simulate(kernel if grid_n is None else kernel[grid_n])(rand((2, 4), F32))


def test_cores_may_be_a_list_and_engine_unknown_is_gpsimd():
    """The NKI library passes (0, 1) (LIB core/moe/moe_cte/bwmm_shard_on_I.py); `engine.unknown`,
    the default before NKI 0.3.0, was GpSimd too (nki/migration/index.rst)."""
    @nki.jit
    def k(x):
        nisa.core_barrier(x, [0, 1], engine=nisa.engine.unknown)
        nki.lnc.core_barrier(data=x, cores=(0, 1), engine=nisa.engine.scalar, name="second")
        return x

    c = nkicpu.capture(k[2])(rand((2, 4), F32))
    assert [(i.core, i.engine, i.args["round"], i.args["name"]) for i in c.instructions] == [
        (0, "gpsimd", 1, None), (1, "gpsimd", 1, None), (0, "scalar", 2, "second"), (1, "scalar", 2, "second")]
    events = profile_capture(c).events                          # a ScalarE barrier loads no function table
    assert [(e["lane"], e["name"]) for e in events] == [("c0 GpSimd", "core_barrier"), ("c1 GpSimd", "core_barrier"),
                                                        ("c0 ScalarE", "second"), ("c1 ScalarE", "second")]


# -- the cost model --------------------------------------------------------------------------------------

@nki.jit
def slow_core_0(x):
    """Core 0 works long before the barrier (a chain of VectorE ops), core 1 hardly at all; after the
    barrier each works on an unrelated tile on VectorE and loads the other's row, which core 1 works on
    before storing it; a second barrier runs on VectorE."""
    i = nl.program_id(0)
    scratch = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="scratch")
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm, name="out")
    t = load(x[i:i + 1])
    if i == 0:
        for _ in range(20):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=scratch[i:i + 1], src=t)
    nisa.core_barrier(scratch, (0, 1))
    u = nl.ndarray((1, 4), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=u, value=0.0, engine=nisa.engine.vector)     # not on GpSimd: the barrier does not block it
    o = load(scratch[1 - i:2 - i])
    if i == 1:
        for _ in range(10):
            nisa.tensor_scalar(dst=o, data=o, op0=nl.multiply, operand0=1.0)
    nisa.dma_copy(dst=out[i:i + 1], src=o)
    nisa.core_barrier(out, (0, 1), engine=nisa.engine.vector)
    return out


@pytest.fixture(scope="module")
def slow():
    x = rand((2, 4), F32)
    c = nkicpu.capture(slow_core_0[2])(x)
    want = x[::-1].copy()
    for _ in range(20):
        want[1] += F32(1)
    assert_bits_equal(c.outputs, want)
    return c


def _index(c, core, opcode, k=0):
    return [i.index for i in c.instructions if i.core == core and i.opcode == opcode][k]


def test_the_barrier_waits_for_the_slow_core_and_the_other_cores_load_after_it(slow):
    c, p = slow, profile_capture(slow)
    ev = p.events
    b0, b1 = ev[_index(c, 0, "core_barrier")], ev[_index(c, 1, "core_barrier")]
    assert (b0["lane"], b1["lane"]) == ("c0 GpSimd", "c1 GpSimd")
    assert b1["start_us"] < b0["start_us"] and b1["dur_us"] > b0["dur_us"]          # core 1 waited
    assert event_end(b0) == pytest.approx(event_end(b1)) == pytest.approx(b0["start_us"] + costs.CORE_BARRIER_US)
    # core 0's work before its barrier: the chain, then the store of its row to the scratch
    store0 = ev[_index(c, 0, "core_barrier") - 1]
    assert store0["args"]["opcode"] == "dma_copy" and store0["args"]["dst"] == "shared_hbm"
    assert b0["start_us"] >= event_end(store0) + costs.SEMAPHORE_US - 1e-9
    # core 1's load of core 0's row is triggered after its barrier ends, so after core 0's store
    load1 = ev[_index(c, 1, "dma_copy", 2)]
    assert load1["args"]["src"] == "shared_hbm" and load1["args"]["trigger_us"] >= event_end(b1) - 1e-9
    assert load1["start_us"] > event_end(store0) + costs.CORE_BARRIER_US
    # the barrier blocks only its engine: core 1's VectorE memset runs while its barrier waits
    memset1 = ev[_index(c, 1, "memset")]
    assert memset1["lane"] == "c1 VectorE" and memset1["start_us"] < b1["start_us"] + 1.0 < event_end(b1)
    # the second round, on VectorE, ends together too
    r0, r1 = ev[_index(c, 0, "core_barrier", 1)], ev[_index(c, 1, "core_barrier", 1)]
    assert (r0["lane"], r1["lane"]) == ("c0 VectorE", "c1 VectorE") and r0["args"]["barrier_round"] == 2
    assert event_end(r0) == pytest.approx(event_end(r1))


def test_in_best_the_barriers_end_when_the_last_starts(slow):
    slots = capture_slots(slow, BEST)
    for k in range(2):
        s0, s1 = slots[_index(slow, 0, "core_barrier", k)], slots[_index(slow, 1, "core_barrier", k)]
        assert s0.end_us == s1.end_us == max(s0.start_us, s1.start_us)
    assert costs.engine_us(slow.instructions[_index(slow, 0, "core_barrier")], BEST) == 0.0
    assert costs.engine_us(slow.instructions[_index(slow, 0, "core_barrier")], LIKELY) == costs.CORE_BARRIER_US


def test_the_lower_bounds_stay_below_the_schedule(slow):
    for band in (BEST, LIKELY):
        total = max(s.end_us for s in capture_slots(slow, band))
        assert max(b["floor"] for b in lower_bounds(slow, band)) <= total + 1e-9


def test_a_barrier_orders_only_its_own_cores_accesses(slow):
    deps = dependencies(slow.instructions)
    ins = slow.instructions
    b0, b1 = _index(slow, 0, "core_barrier"), _index(slow, 1, "core_barrier")
    assert deps[b0] == (b0 - 1,) and deps[b1] == (b1 - 1,)                  # each core's store of its row
    load1 = _index(slow, 1, "dma_copy", 2)
    assert b1 in deps[load1] and all(ins[d].core == 1 or ins[d].opcode != "core_barrier" for d in deps[load1])
    for k, d in enumerate(deps):
        if k not in (b0, b1) and ins[k].opcode != "core_barrier":
            assert all(ins[j].opcode != "core_barrier" or ins[j].core == ins[k].core for j in d)


def test_the_critical_path_crosses_to_the_core_a_barrier_waited_for(slow):
    """The path ends at the second barriers (core 1 worked longer after the first); through core 1's
    work it reaches core 1's first barrier, which waited for core 0's: from there it follows core 0's
    chain. Each barrier counts as a hand-off from the start of its round's last barrier."""
    p = profile_capture(slow)
    steps = critical_path(p)
    path = [e["args"]["index"] for e, _, _ in steps]
    b0, b1 = _index(slow, 0, "core_barrier"), _index(slow, 1, "core_barrier")
    chain0 = [i.index for i in slow.instructions if i.core == 0 and i.opcode == "tensor_scalar"]
    chain1 = [i.index for i in slow.instructions if i.core == 1 and i.opcode == "tensor_scalar"]
    assert len(chain0) == 20 and len(chain1) == 10
    assert path.index(chain0[-1]) < path.index(b0) < path.index(b1) < path.index(chain1[0])
    assert set(chain0 + chain1) <= set(path)
    waited = [us for e, label, us in steps if e["args"]["index"] == b1]
    assert waited == [pytest.approx(costs.CORE_BARRIER_US)]          # not the 2.7 µs core 1's barrier waited
    assert all(label == "semaphore hand-offs" for e, label, _ in steps if e["name"] == "core_barrier")
    parts = critical_path_parts(p)                                       # adds up to the total
    assert parts["vector"][0] == 30


def test_the_timeline_draws_the_barriers(slow):
    p = profile_capture(slow)
    assert plot_timeline(p, title="core_barrier") is not None
    slices = [e for e in trace_events(p)["traceEvents"] if e["ph"] == "X" and e["name"] == "core_barrier"]
    assert len(slices) == 4


def test_the_schedule_refuses_a_record_whose_cores_call_the_barrier_unequally(slow):
    last = _index(slow, 1, "core_barrier", 1)
    kept = [i for i in slow.instructions if i.index != last]
    with pytest.raises(ValueError, match=r"core_barrier calls per core \(from core 0\): \[2, 1\]; every core"):
        schedule([dataclasses.replace(i, index=k) for k, i in enumerate(kept)])


def test_the_barriers_cost_is_an_estimate_in_the_table():
    (row,) = [c for c in costs.TABLE if c.name == "CORE_BARRIER_US"]
    assert row.band == LIKELY and row.source.startswith("estimate: ") and row.value == costs.CORE_BARRIER_US > 0
