"""Stage 4, the gated delta rule: the NKI kernel against kernels.reference.gated_delta_rule_ref."""
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
import nkicpu
from kernels.configs import GDNShape, model_shard
import nki.language as nl
from kernels.delta_rule_pairs import DMA_PAIRS, GROUP, SUB_PAIRS
from kernels.delta_rule_pairs import STATE_BUFFERS
from kernels.versions.delta_rule_fold import state_fold
from kernels.gated_delta_rule import gated_delta_rule_hbm, gated_delta_rule_kernel
from kernels.layout import store_rows
from nkicpu.profile import covered_us, event_end, profile_capture
from kernels.reference import gated_delta_rule_ref, pipeline_inputs, to_numpy, to_torch
from tests.gdn_testing import (SHARD_SHAPES, TINY_SHAPES, assert_output_close, assert_state_close, f64,
                               rel_rmse, run_unmodified, shapes_param)
from tests.nkicpu_testing import allocation_id

BF16 = ml_dtypes.bfloat16
NAMES = ("q", "k", "v", "a", "b", "A_log", "dt_bias", "recurrent_state")


def stage_args(shape, seed=0):
    """The stage's 8 inputs as the references of stages 1-3 produce them from make_inputs (a dict)."""
    x = pipeline_inputs(shape, seed=seed)
    return {n: x[n] for n in NAMES}


def random_inputs(shape, seed=0, qkv_std=1.0, state_std=0.1):
    """q, k, v ~ N(0, qkv_std) bf16 (a distinct direction per value head), a, b ~ N(0, 1) bf16, and
    A_log, dt_bias, the state with make_inputs' distributions: log(U(0.01, 16)), 1 + 0.1 N(0, 1),
    state_std * N(0, 1)."""
    rng = np.random.default_rng(seed)
    B, nv, dk, dv = shape.B, shape.nv, shape.dk, shape.dv
    return {
        "q": (qkv_std * rng.standard_normal((B, nv, dk))).astype(BF16),
        "k": (qkv_std * rng.standard_normal((B, nv, dk))).astype(BF16),
        "v": (qkv_std * rng.standard_normal((B, nv, dv))).astype(BF16),
        "a": rng.standard_normal((B, nv)).astype(BF16),
        "b": rng.standard_normal((B, nv)).astype(BF16),
        "A_log": np.log(rng.uniform(0.01, 16.0, size=nv)).astype(np.float32),
        "dt_bias": (1.0 + 0.1 * rng.standard_normal(nv)).astype(np.float32),
        "recurrent_state": (state_std * rng.standard_normal((B, nv, dk, dv))).astype(np.float32),
    }


def run(x):
    return nki.simulate(gated_delta_rule_kernel)(*(x[n] for n in NAMES))


@nki.jit
def key_heads_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """The stage kernel without its input checks, so q and k may hold the nk key heads
    ([B, nk, dk]): the building block's GQA path, as the fused kernel uses it."""
    B, nv, dv = v.shape
    o = nl.ndarray((B, nv, dv), nl.bfloat16, buffer=nl.shared_hbm, name="o")
    new_state = nl.ndarray((B, nv, q.shape[2], dv), nl.float32, buffer=nl.shared_hbm,
                           name="new_state")
    o_sb = gated_delta_rule_hbm(new_state, q, k, v, a, b, A_log, dt_bias, recurrent_state)
    store_rows(o.reshape((B * nv, dv)), o_sb.reshape((dv, B * nv)))
    return o, new_state


def reference(x):
    o, state = gated_delta_rule_ref(*(to_torch(x[n]) for n in NAMES))
    return to_numpy(o), to_numpy(state)


def check(x):
    """Run the kernel and compare both outputs with the reference; return them."""
    o, state = run(x)
    ref_o, ref_state = reference(x)
    assert o.shape == ref_o.shape and o.dtype == BF16
    assert state.shape == ref_state.shape and state.dtype == np.float32
    assert_output_close(o, ref_o, "o")
    assert_state_close(state, ref_state)
    return o, state


# --- against the reference --------------------------------------------------------------------

@shapes_param(TINY_SHAPES + SHARD_SHAPES)
def test_matches_reference(shape):
    check(random_inputs(shape, seed=shape.B))


def test_matches_reference_on_pipeline_inputs():
    """q, k, v, a, b as the references of stages 1-3 produce them from realistic block inputs."""
    check(stage_args(SHARD_SHAPES[5], seed=2))   # Qwen3.5-27B TP8, B=8


@pytest.mark.parametrize("shape", [TINY_SHAPES[2], TINY_SHAPES[3]] + [SHARD_SHAPES[i] for i in (1, 4, 8)],
                         ids=lambda s: f"{s.name} B{s.B}".replace(" ", "-"))
def test_gqa_key_heads(shape):
    """The building block's GQA path: q, k given per key head ([B, nk, dk]); value head h must read
    key head h // G (repeat_interleave), not h % nk (tile)."""
    x = random_inputs(shape, seed=3)
    G = shape.G
    assert G > 1
    q_k, k_k = x["q"][:, ::G], x["k"][:, ::G]                       # one per key head
    o, state = nki.simulate(key_heads_kernel)(q_k, k_k, *(x[n] for n in NAMES[2:]))

    expanded = dict(x, q=np.repeat(q_k, G, axis=1), k=np.repeat(k_k, G, axis=1))     # interleave
    ref_o, ref_state = reference(expanded)
    assert_output_close(o, ref_o, "o")
    assert_state_close(state, ref_state)
    if shape.nk > 1:  # with one key head, tile and repeat_interleave coincide
        tiled = dict(x, q=np.tile(q_k, (1, G, 1)), k=np.tile(k_k, (1, G, 1)))
        assert rel_rmse(o, reference(tiled)[0]) > 0.01


@pytest.mark.parametrize("shape", [
    GDNShape(B=9, H=128, nk=4, nv=16, name="B9 nv16 two chunks"),
    GDNShape(B=70, H=128, nk=1, nv=2, dk=32, dv=16, name="B70 nv2 two chunks"),
    GDNShape(B=40, H=128, nk=2, nv=4, dk=96, dv=64, name="B40 nv4 two-sub-chunk chunks"),
    GDNShape(B=71, H=128, nk=2, nv=4, dk=48, dv=32, name="B71 nv4 one-sub-chunk chunks"),
], ids=lambda s: s.name.replace(" ", "-"))
def test_more_than_one_chunk(shape):
    """B * nv > 128 pairs: chunks of 128 // nv batch rows (8 + 1 rows; 64 + 6 rows; 32 + 8 rows;
    32 + 32 + 7 rows), each streamed in sub-chunks (32 pairs of 4-pair tiles at dk = 128; 64 pairs
    of 8-pair tiles at dk = 32, F = 2; 64 pairs of 2-pair tiles at dk = 96, F = 2; 128 pairs at
    dk = 48, F = 1, one sub-chunk per chunk, so the next chunk's preparation runs all at once), the
    last sub-chunk and the last tile partial. The sub-chunks of all chunks share one ring of state
    buffers, so buffers are reused across chunks."""
    check(random_inputs(shape, seed=4))


@pytest.mark.parametrize("dk, dv", [(128, 64), (64, 128), (128, 48), (16, 128), (48, 32), (96, 64)],
                         ids=lambda d: str(d))
def test_head_dims(dk, dv):
    """dk != dv (dv = 48, not a power of two) and every kind of state fold (see test_state_fold):
    the scale uses dk, the norms sum over dk, the outer product and the state are [dk, dv]."""
    shape = GDNShape(B=3, H=128, nk=2, nv=4, dk=dk, dv=dv, name=f"dk{dk} dv{dv}")
    check(random_inputs(shape, seed=dk + dv))


@pytest.mark.parametrize("dk, dv, fold", [
    (128, 128, (4, 4)),   # 2 KiB per partition and pair; 4 pairs x 32 partitions
    (64, 128, (4, 8)),    # 8 pairs x 16 partitions; the outer product contracts over 32 rows
    (16, 32, (2, 16)),    # F = 4 would need 128 contraction rows per tile
    (96, 64, (2, 2)),     # 96 = 2 x 48 partitions per tile: 2 pairs, 96 partitions busy
    (48, 32, (1, 2)),     # no fold fits a quadrant: rows on partitions, 2 pairs per tile
])
def test_state_fold(dk, dv, fold):
    assert state_fold(dk, dv) == fold


# --- edge cases -----------------------------------------------------------------------------------

def test_fresh_sequence_zero_state():
    shape = SHARD_SHAPES[2]  # Qwen3-Next-80B TP4, B=8
    x = random_inputs(shape, seed=5)
    x["recurrent_state"] = np.zeros_like(x["recurrent_state"])
    check(x)


def test_all_zero_gives_exact_zero():
    """q = k = v = 0 and a zero state: l2norm gives 0 (eps inside the sqrt), o and the state stay 0."""
    shape = SHARD_SHAPES[1]  # Qwen3-Next-80B TP4, B=3
    x = random_inputs(shape)
    for n in ("q", "k", "v", "recurrent_state"):
        x[n] = np.zeros_like(x[n])
    o, state = run(x)
    assert np.isfinite(f64(o)).all() and np.isfinite(state).all()
    assert (f64(o) == 0).all() and (state == 0).all()


def test_softplus_extremes():
    """a + dt_bias in {-100, -20, 0, 19.9, 20, 20.1, 30, 100}, one value per head: both sides of the
    threshold 20 (softplus(x) = x above it), no overflow of exp at 100."""
    shape = SHARD_SHAPES[1]  # Qwen3-Next-80B TP4 (nv = 8), B=3
    x = random_inputs(shape, seed=6)
    x["a"] = np.zeros_like(x["a"])
    x["dt_bias"] = np.array([-100, -20, 0, 19.9, 20, 20.1, 30, 100], np.float32)
    o, state = check(x)
    assert np.isfinite(state).all()


def test_decay_underflows_to_zero():
    """Large A = exp(A_log) (up to e^80) and large a: exp(g) underflows to 0 for most heads; the
    state becomes k delta^T, finite."""
    shape = SHARD_SHAPES[1]
    x = random_inputs(shape, seed=7)
    x["A_log"] = np.array([0.0, np.log(16.0), 5, 10, 20, 40, 60, 80], np.float32)
    x["a"] = np.full_like(x["a"], 10.0)
    ref_o, ref_state = reference(x)
    assert (f64(ref_state) == 0).mean() < 0.5
    o, state = check(x)
    assert np.isfinite(state).all()


def test_beta_extremes():
    """b = +-20: beta -> 1 (the state's component along k is overwritten) and beta -> 0 (the state
    only decays)."""
    shape = SHARD_SHAPES[4]  # Qwen3.5-27B TP8 (nv = 6), B=3
    x = random_inputs(shape, seed=8)
    x["b"] = np.where(np.arange(shape.nv) % 2 == 0, 20.0, -20.0)[None, :].repeat(shape.B, 0).astype(BF16)
    check(x)


def test_large_magnitudes():
    """|q|, |k|, |v| ~ 1e2 (bf16 range of real projections), state ~ 10: l2norm sums of ~1e6 in fp32."""
    shape = SHARD_SHAPES[7]  # Qwen3.5-397B TP16 (nv = 4), B=3
    x = random_inputs(shape, seed=9, qkv_std=100.0, state_std=10.0)
    assert np.abs(f64(x["q"])).max() > 300
    check(x)


CHAIN_STEPS = 16
CHAIN_STATE_RMSE = 1e-5   # bound on rel-RMSE(kernel state, reference state) after every step


def test_chained_decode_drift():
    """16 decode steps, each feeding its new state to the next (fresh q, k, v, a, b per step), run
    through the kernel and through the reference chained the same way.

    Bound: both sides compute in fp32, so one step differs by fp32 summation order (~1e-7
    relative). The state map S -> exp(g) (I - beta k k^T) S + beta k v^T is non-expansive
    (exp(g) <= 1, 0 <= beta <= 1, |k| = 1), so differences add up at most linearly: 16 steps stay
    far below 1e-5. A kernel that rounded beta or the state through bf16 (2^-9 relative) would
    exceed it in a single step; the last assertion checks that for bf16 beta.
    """
    shape = SHARD_SHAPES[0]  # Qwen3-Next-80B TP4, B=1
    x0 = random_inputs(shape, seed=10)
    state_k = state_r = x0["recurrent_state"]
    worst = 0.0
    for step in range(CHAIN_STEPS):
        x = dict(random_inputs(shape, seed=100 + step), A_log=x0["A_log"], dt_bias=x0["dt_bias"])
        o_k, state_k = run(dict(x, recurrent_state=state_k))
        o_r, state_r = reference(dict(x, recurrent_state=state_r))
        assert_output_close(o_k, o_r, f"o at step {step}")
        worst = max(worst, rel_rmse(state_k, state_r))
        assert worst <= CHAIN_STATE_RMSE, f"state drift {worst:.2e} at step {step}"
    one_step = reference(x0)[1]
    assert rel_rmse(_reference_bf16_beta(x0), one_step) > 10 * CHAIN_STATE_RMSE


def _reference_bf16_beta(x):
    """The new state of the reference math with beta = sigmoid(b) rounded to bf16 (HF eager's
    rounding point, the bug vLLM PR #53877 fixed): what a kernel with that bug would return."""
    import torch
    import torch.nn.functional as F
    q, k, v, a, b, A_log, dt_bias, S = (to_torch(x[n]).float() for n in NAMES)
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    beta = torch.sigmoid(b).to(torch.bfloat16).float()
    g = -A_log.exp() * F.softplus(a + dt_bias, threshold=20)
    S = S * g.exp()[:, :, None, None]
    delta = (v - torch.einsum("bhij,bhi->bhj", S, k)) * beta[:, :, None]
    return to_numpy(S + k[:, :, :, None] * delta[:, :, None, :])


def test_inputs_unmodified():
    x = random_inputs(SHARD_SHAPES[4], seed=11)       # Qwen3.5-27B TP8, B=3
    run_unmodified(nki.simulate(gated_delta_rule_kernel), *(x[n] for n in NAMES))


def test_instruction_plan():
    """At the largest shard (Qwen3.5-0.8B TP1, B=8: 128 pairs, one chunk, 4 sub-chunks of 32):
    per pair one [S^T k, S^T q] matmul and one K = 1 outer-product matmul, per odd group of four
    pairs an identity matmul; per group two transposes and two ScalarE copies for the outer
    product's rows; the decay on VectorE (even groups, in the eviction) or ScalarE (odd groups, in
    place, then the eviction); one state DMA in and one out per DMA_PAIRS pairs; about 5
    instructions per pair."""
    shape = SHARD_SHAPES[-1]
    n = shape.B * shape.nv
    groups = n // GROUP
    c = nkicpu.capture(gated_delta_rule_kernel)(*(random_inputs(shape)[k] for k in NAMES))
    counts = Counter((i.engine, i.opcode) for i in c.instructions)
    assert counts[("tensor", "nc_matmul")] == 2 * n + groups // 2 + 4    # + heads, a and b, norms, k.q
    ring = allocation_id(c, "state_ring")
    writes = Counter((i.engine, i.opcode) for i in c.instructions
                     if i.engine != "dma" and any(a.alloc == ring for a in i.writes))
    assert writes == {("vector", "scalar_tensor_tensor"): n // 2,
                      ("scalar", "activation"): n // 2 + groups // 2}
    assert counts[("dma", "dma_copy")] == 2 * n // DMA_PAIRS + 8   # + q, k, v, a, b, A_log, dt_bias, o
    assert len(c.instructions) <= 5.2 * n
    assert c.peak_psum_banks <= 6
    assert c.peak_sbuf_bytes <= 96 * 1024


def test_state_matmuls_contract_one_pair():
    """Isolation by construction: every matmul that reads the state ring contracts one pair's dk
    rows (the [S^T k, S^T q] matmuls: the state as stationary, one pair) or has the pairs along the
    moving free dim, each output column one pair's (the identity matmul of an odd group)."""
    shape = SHARD_SHAPES[2]  # Qwen3-Next-80B TP4, B=8
    c = nkicpu.capture(gated_delta_rule_kernel)(*(random_inputs(shape)[k] for k in NAMES))
    ring = allocation_id(c, "state_ring")
    seen = 0
    for ins in c.instructions:
        if ins.opcode != "nc_matmul" or not any(a.alloc == ring for a in ins.reads):
            continue
        stationary, moving = ins.reads[0], ins.reads[1]
        if stationary.alloc == ring:
            assert stationary.partitions == shape.dk and stationary.free_elements == shape.dv
        else:
            assert moving.alloc == ring and ins.args["K"] == shape.dk
        seen += 1
    assert seen == shape.B * shape.nv + shape.B * shape.nv // GROUP // 2


def test_state_dmas_move_pair_rows():
    """The unfolded layout: every state DMA moves DMA_PAIRS pairs, one 512-byte HBM row per
    partition and pair (version 3's fold moved 2 KiB; see delta_rule_pairs)."""
    shape = SHARD_SHAPES[2]  # Qwen3-Next-80B TP4, B=8
    c = nkicpu.capture(gated_delta_rule_kernel)(*(random_inputs(shape)[k] for k in NAMES))
    state_bytes = shape.dk * shape.dv * 4
    dmas = [i for i in c.instructions if i.engine == "dma" and i.nbytes >= state_bytes]
    assert len(dmas) == 2 * (shape.B * shape.nv // DMA_PAIRS)
    for ins in dmas:
        hbm = next(a for a in ins.reads + ins.writes if not a.on_chip)
        stride, count = hbm.pattern[-1]
        assert stride == 1 and count * hbm.itemsize == shape.dv * 4 == 512, hbm.pattern


STREAM_SHAPE = model_shard("Qwen3-Next-80B", 4, 32)   # 256 pairs: 2 chunks, 8 sub-chunks of 32


def _state_stream(shape):
    """The capture of the stage at `shape`, and in program order the indices of its state loads
    (DMAs into the ring), state stores (DMAs out of it) and state updates (compute writes into it)."""
    c = nkicpu.capture(gated_delta_rule_kernel)(*(random_inputs(shape)[k] for k in NAMES))
    ring = allocation_id(c, "state_ring")
    loads = [i.index for i in c.instructions if i.engine == "dma" and i.writes[0].alloc == ring]
    stores = [i.index for i in c.instructions if i.engine == "dma" and i.reads[0].alloc == ring]
    updates = [i.index for i in c.instructions if i.engine != "dma" and i.writes[0].alloc == ring]
    return c, loads, stores, updates


def test_state_loads_run_ahead_of_compute():
    """Software pipelining in program order (what in-order engine and DMA queues execute): before
    the update of sub-chunk s the program has ordered the loads of sub-chunks up to
    s + STATE_BUFFERS - 1, and the store of s right after its update, before the next update."""
    shape = STREAM_SHAPE
    n = shape.B * shape.nv
    subs = n // SUB_PAIRS
    dmas_per_sub = SUB_PAIRS // DMA_PAIRS
    writes_per_sub = SUB_PAIRS + SUB_PAIRS // GROUP // 2   # a decay per pair, an eviction per odd group
    c, loads, stores, updates = _state_stream(shape)
    assert len(loads) == len(stores) == subs * dmas_per_sub and len(updates) == subs * writes_per_sub
    for s in range(subs):
        first_update = updates[s * writes_per_sub]
        last_update = updates[(s + 1) * writes_per_sub - 1]
        ahead = min(subs, s + STATE_BUFFERS) * dmas_per_sub
        assert sum(i < first_update for i in loads) == ahead
        assert sum(i < last_update for i in stores) == s * dmas_per_sub
        nxt = updates[(s + 1) * writes_per_sub] if s + 1 < subs else len(c.instructions)
        assert sum(i < nxt for i in stores) == (s + 1) * dmas_per_sub


def test_state_ring_is_bounded():
    """The state passes through STATE_BUFFERS sub-chunk buffers whatever B is: the same ring at
    B = 16 (128 pairs, four sub-chunks) and B = 64, and at B = 64 (512 pairs, 32 MiB of state each
    way) the whole stage holds at most half of the 224 KiB of SBUF per partition."""
    shapes = []
    for B in (16, 64):
        c = nkicpu.capture(gated_delta_rule_kernel)(*(random_inputs(STREAM_SHAPE.with_batch(B))[k] for k in NAMES))
        shapes.append(c.allocations[allocation_id(c, "state_ring")].shape)
    assert shapes[0] == shapes[1] == (128, STATE_BUFFERS, SUB_PAIRS, 128)   # 64 KiB per partition
    assert c.peak_sbuf_bytes <= 112 * 1024


def test_modeled_state_stream_keeps_dma_busy():
    """The modeled profile (trn2 cost model) at Qwen3-Next-80B TP4, B = 32 (33.6 MB of state in
    and out): some DMA moves data at least 90 % of the likely time, and the best estimate stays
    within 1.2x the HBM roofline. (With the state loaded, updated and stored in turn, the DMA queues
    were idle while each sub-chunk computed: 1.7x the roofline at best.)"""
    c, *_ = _state_stream(STREAM_SHAPE)
    p = profile_capture(c)
    dma = [e for e in p.events if e["lane"].startswith("DMA")]
    assert covered_us([(e["start_us"], event_end(e)) for e in dma]) >= 0.9 * p.total_us
    assert p.best_us <= 1.2 * p.roofline_us


# --- validation of the entry point: one test per check --------------------------------------

def _good():
    return random_inputs(TINY_SHAPES[2])  # B 3, nv 6, dk 16, dv 32


def _with(**changes):
    x = _good()
    x.update(changes)
    return x


def _rejects(x, match):
    with pytest.raises(AssertionError, match=match):
        run(x)


BAD_INPUTS = {
    "q-rank": (lambda x: dict(q=x["q"].reshape(3, 96)), r"q: expected a 3-d tensor, got shape \[3, 96\]"),
    "q-dk-over-128": (lambda x: dict(q=np.zeros((3, 6, 256), BF16)),
                      r"q: expected head_k_dim q.shape\[2\] <= 128 \(q and k hold dk on partitions\), got 256"),
    "q-nv-over-128": (lambda x: dict(q=np.zeros((1, 130, 16), BF16)), r"q: expected num_v_heads q.shape\[1\] <= 128, got 130"),
    "k-shape": (lambda x: dict(k=x["k"][:, :4]), r"k: expected shape \[3, 6, 16\], got \[3, 4, 16\]"),
    "v-rank": (lambda x: dict(v=x["v"].reshape(3, 192)), r"v: expected a 3-d tensor, got shape \[3, 192\]"),
    "v-heads": (lambda x: dict(v=x["v"][:, :5]), r"v: expected shape \[3, 6, dv\] \(B, nv as q\), got \[3, 5, 32\]"),
    "v-dv-over-128": (lambda x: dict(v=np.zeros((3, 6, 160), BF16)),
                      r"v: expected head_v_dim v.shape\[2\] <= 128 \(v and o hold dv on partitions\), got 160"),
    "a-shape": (lambda x: dict(a=x["a"][:2]), r"a: expected shape \[3, 6\], got \[2, 6\]"),
    "b-shape": (lambda x: dict(b=x["b"].reshape(3, 6, 1)), r"b: expected shape \[3, 6\], got \[3, 6, 1\]"),
    "A_log-shape": (lambda x: dict(A_log=x["A_log"][:3]), r"A_log: expected shape \[6\], got \[3\]"),
    "dt_bias-shape": (lambda x: dict(dt_bias=x["dt_bias"].reshape(1, 6)), r"dt_bias: expected shape \[6\], got \[1, 6\]"),
    "state-shape": (lambda x: dict(recurrent_state=x["recurrent_state"].transpose(0, 1, 3, 2).copy()),
                    r"recurrent_state: expected shape \[3, 6, 16, 32\], got \[3, 6, 32, 16\]"),
    "q-dtype": (lambda x: dict(q=x["q"].astype(np.float32)), r"q: expected dtype bfloat16, got float32"),
    "k-dtype": (lambda x: dict(k=x["k"].astype(np.float16)), r"k: expected dtype bfloat16, got float16"),
    "v-dtype": (lambda x: dict(v=x["v"].astype(np.float32)), r"v: expected dtype bfloat16, got float32"),
    "a-dtype": (lambda x: dict(a=x["a"].astype(np.float32)), r"a: expected dtype bfloat16, got float32"),
    "b-dtype": (lambda x: dict(b=x["b"].astype(np.float32)), r"b: expected dtype bfloat16, got float32"),
    "A_log-dtype": (lambda x: dict(A_log=x["A_log"].astype(BF16)), r"A_log: expected dtype float32, got bfloat16"),
    "dt_bias-dtype": (lambda x: dict(dt_bias=x["dt_bias"].astype(BF16)), r"dt_bias: expected dtype float32, got bfloat16"),
    "state-dtype": (lambda x: dict(recurrent_state=x["recurrent_state"].astype(BF16)),
                    r"recurrent_state: expected dtype float32, got bfloat16"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_rejects(case):
    change, match = BAD_INPUTS[case]
    x = _good()
    _rejects(dict(x, **change(x)), match)


def test_building_block_rejects_heads_not_dividing_nv():
    """The GQA path of the building block: q, k heads must divide the value heads."""
    x = _good()  # nv = 6
    with pytest.raises(AssertionError, match=r"q: expected heads q.shape\[1\] dividing the value heads nv = 6, got 4"):
        nki.simulate(key_heads_kernel)(x["q"][:, :4], x["k"][:, :4], *(x[n] for n in NAMES[2:]))
