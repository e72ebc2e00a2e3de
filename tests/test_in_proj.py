"""Stage 1, in_proj: kernels/in_proj.py against kernels.reference.in_proj_ref.

Tiny shapes (ragged channel counts: a 128-channel tile plus a tail tile), the real per-device
shards at B = 1, 3, 8, large-magnitude and all-zero hidden (gdn-math.md §4, cases 7 and 11), the
building block on a per-head column range, inputs left unmodified, and one test per validation.
"""
import functools

import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  (registers nki)
import nki
import nki.isa as nisa
import nki.language as nl
import nkicpu
from kernels.configs import GDNShape
from kernels.in_proj import in_proj_kernel, load_hidden_T, project_columns
from kernels.reference import in_proj_ref, make_inputs, to_numpy, to_torch
from tests.gdn_testing import (SHARD_SHAPES, TINY_SHAPES, assert_output_close, hbm_runs, run_unmodified,
                               shapes_param)

ARGS = ("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b")
OUTS = ("mixed_qkv", "z", "a", "b")
BF16 = ml_dtypes.bfloat16
SMALL = GDNShape(B=2, H=256, nk=1, nv=2, dk=32, dv=32, name="small")


def stage_inputs(shape, seed=0, **overrides):
    inputs = make_inputs(shape, seed=seed, **overrides)
    return [inputs[n] for n in ARGS]


@functools.lru_cache(maxsize=1)
def _shard_inputs(shape):
    return tuple(stage_inputs(shape))


def shard_inputs(shape, max_batch=8):
    """Inputs at a shard shape. SHARD_SHAPES lists each shard at B = 1, 3, 8 in a row: its weights
    are drawn once (at B = 8) and hidden[:B] is used, which saves redrawing MBs of weights."""
    hidden, *weights = _shard_inputs(shape.with_batch(max_batch))
    return [np.ascontiguousarray(hidden[:shape.B])] + list(weights)


def reference(args):
    return [to_numpy(t) for t in in_proj_ref(*[to_torch(a) for a in args])]


def check(args):
    got = run_unmodified(nki.simulate(in_proj_kernel), *args)
    for g, w, name in zip(got, reference(args), OUTS):
        assert_output_close(g, w, name)


@shapes_param(TINY_SHAPES)
def test_matches_reference_tiny(shape):
    check(stage_inputs(shape))


@shapes_param(SHARD_SHAPES)
def test_matches_reference_shards(shape):
    check(shard_inputs(shape))


def test_large_magnitude_hidden():
    """|hidden| ~ 1e2 (gdn-math §4.11): fp32 accumulation, outputs ~1e2, still one bf16 rounding."""
    shape = SHARD_SHAPES[-1]  # Qwen3.5-0.8B TP1, B = 8 (its weights are still cached)
    hidden = 100.0 * np.random.default_rng(1).standard_normal((shape.B, 1, shape.H))
    args = [hidden.astype(BF16)] + shard_inputs(shape)[1:]
    assert np.abs(args[0].astype(np.float32)).max() > 300
    check(args)


def _contiguous_run(pattern):
    """Elements of the longest contiguous innermost run of an access pattern ((stride, count), ...)."""
    run = 1
    for stride, count in reversed(pattern):
        if count == 1:
            continue
        if stride != run:
            break
        run *= count
    return run


def test_weights_stream_once_in_large_dmas():
    """At a real shard: every input is read from HBM exactly once (hidden once for all four
    projections); each DMA of W_in_qkv / W_in_z moves >= 2 KiB of contiguous HBM per partition;
    SBUF and PSUM stay bounded although the weights are MBs."""
    shape = SHARD_SHAPES[-1]
    args = shard_inputs(shape)
    c = nkicpu.capture(in_proj_kernel)(*args)
    reads = {}
    for ins in c.instructions:
        if ins.opcode == "dma_copy" and ins.reads[0].buffer == "private_hbm":
            reads.setdefault(ins.reads[0].alloc, []).append(ins)
    assert len(reads) == len(args)
    big = {a.nbytes for a in args[1:3]}
    for dmas in reads.values():
        nbytes = sum(d.reads[0].nbytes for d in dmas)
        assert nbytes in {a.nbytes for a in args}, "an input was read more or less than once"
        if nbytes == args[0].nbytes:
            assert len(dmas) == 1                                              # hidden: one load
        elif nbytes in big:
            for d in dmas:
                src, dst = d.reads[0], d.writes[0]
                per_partition = src.nbytes // dst.partitions
                run = min(_contiguous_run(src.pattern[1:]) * src.itemsize, per_partition)
                assert dst.partitions == 128 and run >= 2048, (per_partition, run)
        else:
            assert len(dmas) == 1                                              # W_in_a / W_in_b: whole
    assert c.peak_sbuf_bytes <= 64 * 1024
    assert c.peak_psum_banks <= 4


def test_hidden_and_outputs_move_as_rows():
    """hidden and the four outputs move as rows (kernels.layout): each of their DMAs moves one
    contiguous HBM run per partition, a whole row or a piece of at least 2 KiB (a transposing
    view would move 2-byte elements for the outputs and KT * 2 bytes for hidden)."""
    shape = SHARD_SHAPES[-1]
    args = shard_inputs(shape)
    c = nkicpu.capture(in_proj_kernel)(*args)
    hidden_alloc = min(i.reads[0].alloc for i in c.instructions
                       if i.opcode == "dma_copy" and i.reads[0].buffer == "private_hbm")
    rows = {shape.H * 2, shape.conv_dim * 2, shape.value_dim * 2, shape.nv * 2}
    moved = [i for i in c.instructions if i.opcode == "dma_copy"
             and (i.writes[0].buffer == "shared_hbm" or i.reads[0].alloc == hidden_alloc)]
    assert len(moved) == 5
    for ins in moved:
        _, run, contiguous = hbm_runs(ins)
        assert contiguous, ins
        assert run in rows or run >= 2048, (run, ins)


def test_zero_hidden_gives_exact_zeros():
    """A fresh sequence's zero token (gdn-math §4.7): every projection is exactly 0, no NaN."""
    args = stage_inputs(SMALL, hidden=0.0)
    for g in nki.simulate(in_proj_kernel)(*args):
        assert np.array_equal(g.astype(np.float32), np.zeros(g.shape, np.float32))


def test_batch_rows_stay_apart():
    """Row b of every output depends on hidden[b] only (no cross-row leakage, order kept)."""
    args = stage_inputs(SMALL.with_batch(3))
    swapped = [args[0][::-1].copy()] + args[1:]
    for g, s in zip(nki.simulate(in_proj_kernel)(*args), nki.simulate(in_proj_kernel)(*swapped)):
        assert np.array_equal(g[::-1].view(np.uint16), s.view(np.uint16))


@nki.jit
def _per_head_kernel(hidden, W, col0, n_heads, head_dim):
    """project_columns as the fused kernel uses it: heads col0/head_dim .. of W, [head_dim, n_heads, B]."""
    B, _, H = hidden.shape
    hid = nl.ndarray((128, B, H // 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    hidden_T = load_hidden_T(hid, hidden)
    heads = nl.ndarray((head_dim, n_heads, B), dtype=nl.bfloat16, buffer=nl.sbuf)
    project_columns(heads, hidden_T, W, col0=col0)
    out = nl.ndarray((head_dim, n_heads, B), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=heads)
    return out


@pytest.mark.parametrize("col0, n_heads, head_dim", [(128, 3, 128), (96, 2, 32)])
def test_building_block_projects_a_column_range(col0, n_heads, head_dim):
    shape = SHARD_SHAPES[0]  # Qwen3-Next-80B TP4, B = 1: conv_dim 2048
    args = stage_inputs(shape.with_batch(3))
    got = nki.simulate(_per_head_kernel)(args[0], args[1], col0, n_heads, head_dim)
    mixed_qkv = reference(args)[0]
    cols = mixed_qkv[:, col0:col0 + n_heads * head_dim]                     # [B, n_heads * head_dim]
    want = cols.reshape(3, n_heads, head_dim).transpose(2, 1, 0)            # [head_dim, n_heads, B]
    assert_output_close(got, np.ascontiguousarray(want), "heads")


def test_building_block_rejects_columns_outside_W():
    hidden, W_in_qkv = stage_inputs(SMALL)[:2]
    with pytest.raises(ValueError, match=r"col0: expected columns col0 .. col0 \+ 2\*32 inside W's 128 columns, got 96"):
        nki.simulate(_per_head_kernel)(hidden, W_in_qkv, 96, 2, 32)


@nki.jit
def _block_misuse_kernel(hidden, W, dst_batch, n_kt):
    """Calls project_columns with a dst of batch `dst_batch` and the first `n_kt` contraction tiles."""
    B, _, H = hidden.shape
    hid = nl.ndarray((128, B, H // 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    hidden_T = load_hidden_T(hid, hidden)
    dst = nl.ndarray((32, dst_batch), dtype=nl.bfloat16, buffer=nl.sbuf)
    project_columns(dst, hidden_T[:, :n_kt, :], W)
    out = nl.ndarray((32, dst_batch), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@pytest.mark.parametrize("batch, dst_batch, n_kt, message", [
    (2, 3, 2, r"dst: expected batch 2 \(of hidden_T\) in its last dim, got \[32, 1, 3\]"),
    (2, 2, 1, r"hidden_T: expected shape \[128, H/128, B\] for W's H = 256, got \[128, 1, 2\]"),
    (513, 513, 2, r"dst: expected batch B <= 512 \(the matmul moving free size\), got 513"),
], ids=["batch-mismatch", "hidden_T-not-all-of-H", "batch-over-512"])
def test_building_block_rejects_misuse(batch, dst_batch, n_kt, message):
    hidden = np.zeros((batch, 1, 256), BF16)
    W = stage_inputs(SMALL)[1]
    with pytest.raises(ValueError, match=message):
        nki.simulate(_block_misuse_kernel)(hidden, W, dst_batch, n_kt)


# -- validation: one test per check ---------------------------------------------------------------

def bad(shape=SMALL, **changes):
    """The SMALL stage inputs with some replaced: name -> array (dtype kept as given)."""
    args = dict(zip(ARGS, stage_inputs(shape)))
    args.update(changes)
    return [args[n] for n in ARGS]


def rejects(args, message):
    with pytest.raises(ValueError, match=message):
        nki.simulate(in_proj_kernel)(*args)


def test_rejects_hidden_rank():
    rejects(bad(hidden=np.zeros((2, 256), BF16)), r"hidden: expected a 3-d tensor, got shape \[2, 256\]")


def test_rejects_more_than_one_token():
    rejects(bad(hidden=np.zeros((2, 2, 256), BF16)),
            r"hidden: expected one decode token, shape \[B, 1, H\], got shape \[2, 2, 256\]")


def test_rejects_H_not_multiple_of_128():
    shape = GDNShape(B=2, H=192, nk=1, nv=2, dk=32, dv=32)
    rejects(stage_inputs(shape), r"hidden: expected hidden size H a multiple of 128, got 192")


def test_rejects_batch_over_512():
    rejects(bad(hidden=np.zeros((513, 1, 256), BF16)), r"hidden: expected batch B <= 512 .*, got 513")


def test_rejects_hidden_dtype():
    rejects(bad(hidden=np.zeros((2, 1, 256), np.float32)), r"hidden: expected dtype bfloat16, got float32")


@pytest.mark.parametrize("arg", ARGS[1:])
def test_rejects_weight_rank(arg):
    rejects(bad(**{arg: np.zeros((256, 2, 2), BF16)}), rf"{arg}: expected a 2-d tensor, got shape \[256, 2, 2\]")


@pytest.mark.parametrize("arg", ARGS[1:])
def test_rejects_weight_rows_not_H(arg):
    rejects(bad(**{arg: np.zeros((128, 8), BF16)}), rf"{arg}: expected 256 rows \(H of hidden\), .*got shape \[128, 8\]")


@pytest.mark.parametrize("arg", ARGS[1:])
def test_rejects_weight_dtype(arg):
    rejects(bad(**{arg: np.zeros((256, 8), np.float32)}), rf"{arg}: expected dtype bfloat16, got float32")


def test_rejects_a_b_width_mismatch():
    rejects(bad(W_in_b=np.zeros((256, 3), BF16)), r"W_in_b: expected 2 columns \(nv, as W_in_a\), got shape \[256, 3\]")
