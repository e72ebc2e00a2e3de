"""Stage 1, in_proj: kernels/in_proj.py against kernels.reference.in_proj_ref.

Tiny shapes (ragged channel counts), the real per-device shards at B = 1, 3, 8, more than 128
tokens (chunks of the stationary operand), large-magnitude and all-zero hidden (the edge cases of
book/gdn/math.md), the instruction plan (hidden stationary, weights moving in large contiguous
DMAs, no transposes in the standalone stage), both building blocks on column ranges, inputs left
unmodified, and one test per validation.
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
from kernels.in_proj import (MIN_SLICE_RUN_BYTES, in_proj_kernel, load_hidden_T, project_columns, project_pair,
                             project_rows, project_slices)
from kernels.reference import in_proj_ref, make_inputs, to_numpy, to_torch
from nkicpu import costs
from tests.gdn_testing import (SHARD_SHAPES, TINY_SHAPES, assert_output_close, hbm_runs, run_unmodified,
                               shapes_param)

ARGS = ("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b")
OUTS = ("mixed_qkv", "z", "a", "b")
BF16 = ml_dtypes.bfloat16
SMALL = GDNShape(B=2, H=256, nk=1, nv=2, dk=32, dv=32, name="small")
# More than 128 tokens: 2 or 3 chunks of the stationary operand; conv_dim 1024, value_dim 512.
WIDE_BATCH = GDNShape(B=300, H=256, nk=2, nv=4, name="wide batch")


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


@pytest.mark.parametrize("batch", [130, 300])
def test_matches_reference_more_than_128_tokens(batch):
    """B > 128: the tokens go in chunks of 128 (the matmul's stationary free size) that share each
    weight chunk; 3 chunks also narrow the column groups to one PSUM bank each."""
    check(stage_inputs(WIDE_BATCH.with_batch(batch)))


def test_large_magnitude_hidden():
    """|hidden| ~ 1e2 (book/gdn/math.md, edge cases): fp32 accumulation, outputs ~1e2, still one bf16 rounding."""
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


def _input_allocs(c):
    """The allocation ids of the kernel's inputs, in argument order."""
    return [c.arguments[k] for k in range(len(c.arguments))]


def test_min_slice_run_is_the_cost_models_long_run():
    """Kernel files cannot import nkicpu: the kernel's shortest weight run worth slicing for is
    the run length from which the cost model charges a run its bytes, not a short descriptor's."""
    assert MIN_SLICE_RUN_BYTES == costs.DMA_LONG_RUN_BYTES


@pytest.mark.parametrize("shape", [SHARD_SHAPES[-1], WIDE_BATCH], ids=["Qwen3.5-0.8B-TP1-B8", "B300"])
def test_matmuls_hidden_stationary_weights_moving(shape):
    """The instruction plan: every matmul has a [128, <= 128 tokens] slice of hidden_T stationary
    and a [128, <= 512] block of weight rows moving, (H / 128) * ceil(N / 512) matmuls per weight
    and chunk of 128 tokens; no TensorE transpose after the first matmul (the rows leave as they
    are); PSUM stays within the 4 banks of one column group."""
    args = shard_inputs(shape) if shape in SHARD_SHAPES else stage_inputs(shape)
    c = nkicpu.capture(in_proj_kernel)(*args)
    weight_of = {}                                        # SBUF weight chunk -> input index
    inputs = _input_allocs(c)
    for ins in c.instructions:
        if ins.opcode == "dma_copy" and ins.reads[0].buffer == "private_hbm":
            weight_of[ins.writes[0].alloc] = inputs.index(ins.reads[0].alloc)
    matmuls = [i for i in c.instructions if i.opcode == "nc_matmul"]
    first = matmuls[0].index
    assert not [i for i in c.instructions if i.opcode == "nc_transpose" and i.index > first]
    stationary = {m.reads[0].alloc for m in matmuls}
    assert len(stationary) == 1 and stationary.isdisjoint(weight_of)      # one hidden_T, not a weight
    per_weight = [0] * len(args)
    for m in matmuls:
        s, mv = m.reads[0], m.reads[1]
        assert s.partitions == 128 and s.free_elements <= 128
        assert mv.partitions == 128 and mv.free_elements <= 512
        per_weight[weight_of[mv.alloc]] += 1
    KT, chunks = shape.H // 128, -(-shape.B // 128)
    widths = [shape.conv_dim, shape.value_dim, shape.nv, shape.nv]
    assert per_weight == [0] + [KT * chunks * -(-n // 512) for n in widths]      # hidden never moves
    assert c.peak_psum_banks <= 4


def test_hidden_and_outputs_move_as_rows():
    """hidden and the four outputs move as rows: each of their DMAs moves one contiguous HBM run
    per partition, a whole row or a piece of at least 2 KiB (a transposing view would move 2-byte
    elements for the outputs and KT * 2 bytes for hidden); hidden in one DMA, each output's DMAs
    write it exactly once between them."""
    shape = SHARD_SHAPES[-1]
    args = shard_inputs(shape)
    c = nkicpu.capture(in_proj_kernel)(*args)
    hidden_alloc = _input_allocs(c)[0]
    rows = {shape.H * 2, shape.conv_dim * 2, shape.value_dim * 2, shape.nv * 2}
    loads = [i for i in c.instructions if i.opcode == "dma_copy" and i.reads[0].alloc == hidden_alloc]
    stores = [i for i in c.instructions if i.opcode == "dma_copy" and i.writes[0].buffer == "shared_hbm"]
    assert len(loads) == 1
    written = {}
    for ins in loads + stores:
        _, run, contiguous = hbm_runs(ins)
        assert contiguous, ins
        assert run in rows or run >= 2048, (run, ins)
    for ins in stores:
        written.setdefault(ins.writes[0].alloc, []).extend(ins.writes[0].indices())
    assert sorted(len(v) for v in written.values()) == sorted(shape.B * n for n in
                                                              (shape.conv_dim, shape.value_dim, shape.nv, shape.nv))
    for elements in written.values():
        assert len(set(elements)) == len(elements)                         # no element written twice


def test_zero_hidden_gives_exact_zeros():
    """A fresh sequence's zero token (book/gdn/math.md, edge cases): every projection is exactly 0, no NaN."""
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
def _per_head_kernel(hidden, W, col0, n_heads, head_dim, by_block=False):
    """project_columns as the fused kernel uses it: heads col0/head_dim .. of W, [head_dim, n_heads, B]."""
    B, _, H = hidden.shape
    hid = nl.ndarray((128, B, H // 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    hidden_T = load_hidden_T(hid, hidden)
    heads = nl.ndarray((head_dim, n_heads, B), dtype=nl.bfloat16, buffer=nl.sbuf)
    project_columns(heads, hidden_T, W, col0=col0, by_block=by_block)
    out = nl.ndarray((head_dim, n_heads, B), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=heads)
    return out


@pytest.mark.parametrize("shape, col0, n_heads, head_dim", [
    (SHARD_SHAPES[0].with_batch(3), 128, 3, 128),     # Qwen3-Next-80B TP4: conv_dim 2048
    (SHARD_SHAPES[0].with_batch(3), 96, 2, 32),
    (SHARD_SHAPES[0].with_batch(1), 0, 16, 128),      # all of W_in_qkv, one token (fp32 transposes)
    (WIDE_BATCH.with_batch(130), 128, 6, 128),        # two token chunks
], ids=["heads-1-3", "dk32", "all-B1", "B130"])
def test_building_block_projects_a_column_range(shape, col0, n_heads, head_dim):
    args = stage_inputs(shape)
    got = nki.simulate(_per_head_kernel)(args[0], args[1], col0, n_heads, head_dim)
    mixed_qkv = reference(args)[0]
    cols = mixed_qkv[:, col0:col0 + n_heads * head_dim]                     # [B, n_heads * head_dim]
    want = cols.reshape(shape.B, n_heads, head_dim).transpose(2, 1, 0)      # [head_dim, n_heads, B]
    assert_output_close(got, np.ascontiguousarray(want), "heads")


@nki.jit
def _rows_kernel(hidden, W, col0, n, dst_batch):
    """project_rows into an SBUF tile [dst_batch, n]: columns col0 .. col0 + n - 1 of hidden @ W."""
    B, _, H = hidden.shape
    hid = nl.ndarray((128, B, H // 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    hidden_T = load_hidden_T(hid, hidden)
    rows = nl.ndarray((dst_batch, n), dtype=nl.bfloat16, buffer=nl.sbuf)
    project_rows(rows, hidden_T, W, col0=col0)
    out = nl.ndarray((dst_batch, n), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


@pytest.mark.parametrize("batch, col0, n", [(1, 96, 200), (3, 0, 2048), (128, 1000, 1048)])
def test_project_rows_into_sbuf(batch, col0, n):
    """The row-major building block with an SBUF dst, on a column range (groups of 2048 columns)."""
    args = stage_inputs(SHARD_SHAPES[0].with_batch(batch))
    got = nki.simulate(_rows_kernel)(args[0], args[1], col0, n, batch)
    assert_output_close(got, np.ascontiguousarray(reference(args)[0][:, col0:col0 + n]), "rows")


@pytest.mark.parametrize("col0, n, dst_batch, message", [
    (100, 60, 2, r"col0: expected columns col0 .. col0 \+ 60 inside W's 128 columns, got 100"),
    (0, 64, 3, r"dst: expected batch 2 \(of hidden_T\) in its first dim, got \[3, 64\]"),
], ids=["columns-outside-W", "batch-mismatch"])
def test_project_rows_rejects_misuse(col0, n, dst_batch, message):
    hidden, W_in_qkv = stage_inputs(SMALL)[:2]
    with pytest.raises(AssertionError, match=message):
        nki.simulate(_rows_kernel)(hidden, W_in_qkv, col0, n, dst_batch)


def test_building_block_rejects_columns_outside_W():
    hidden, W_in_qkv = stage_inputs(SMALL)[:2]
    with pytest.raises(AssertionError, match=r"col0: expected columns col0 .. col0 \+ 2\*32 inside W's 128 columns, got 96"):
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
    (513, 513, 2, r"dst: expected batch B <= 512 \(chunks of 128 tokens, each accumulating in its own PSUM "
                  r"bank\), got 513"),
], ids=["batch-mismatch", "hidden_T-not-all-of-H", "batch-over-512"])
def test_building_block_rejects_misuse(batch, dst_batch, n_kt, message):
    hidden = np.zeros((batch, 1, 256), BF16)
    W = stage_inputs(SMALL)[1]
    with pytest.raises(AssertionError, match=message):
        nki.simulate(_block_misuse_kernel)(hidden, W, dst_batch, n_kt)


@nki.jit
def _pair_kernel(hidden, W0, W1, c0, n):
    """project_pair: columns c0 .. c0 + n - 1 of hidden @ W0 and of hidden @ W1, [n, 2, B]."""
    B, _, H = hidden.shape
    hid = nl.ndarray((128, B, H // 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    hidden_T = load_hidden_T(hid, hidden)
    dst = nl.ndarray((n, 2, B), dtype=nl.bfloat16, buffer=nl.sbuf)
    project_pair(dst, hidden_T, W0, W1, c0)
    out = nl.ndarray((n, 2, B), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@pytest.mark.parametrize("shape, c0, n", [
    (SHARD_SHAPES[0].with_batch(1), 0, 8),            # Qwen3-Next-80B TP4: all 8 heads of a and b
    (SHARD_SHAPES[0].with_batch(3), 4, 4),            # the second program's heads on an LNC=2 grid
    (WIDE_BATCH.with_batch(130), 1, 2),               # two token chunks
], ids=["all-B1", "heads-4-8-B3", "B130"])
def test_project_pair_matches_both_projections(shape, c0, n):
    """project_pair against the reference a and b, and against project_columns on each weight
    apart: the same sums, bit for bit."""
    args = stage_inputs(shape)
    hidden, W_a, W_b = args[0], args[3], args[4]
    got = nki.simulate(_pair_kernel)(hidden, W_a, W_b, c0, n)
    a, b = reference(args)[2:]
    for i, want in enumerate((a, b)):
        assert_output_close(got[:, i], np.ascontiguousarray(want[:, c0:c0 + n].T), "ab")
        apart = nki.simulate(_per_head_kernel)(hidden, (W_a, W_b)[i], c0, 1, n)
        assert np.array_equal(got[:, i].view(np.uint16), apart[:, 0].view(np.uint16))


def test_project_pair_rejects_misuse():
    hidden, _, _, W_a, W_b = stage_inputs(SMALL)
    with pytest.raises(AssertionError, match=r"W1: expected W0's shape \[256, 2\], got \[256, 1\]"):
        nki.simulate(_pair_kernel)(hidden, W_a, np.ascontiguousarray(W_b[:, :1]), 0, 2)
    with pytest.raises(AssertionError, match=r"col0: expected columns col0 .. col0 \+ 2 inside W's 2 "
                                             r"columns, got 1"):
        nki.simulate(_pair_kernel)(hidden, W_a, W_b, 1, 2)
    wide = np.zeros((SMALL.H, 300), BF16)
    with pytest.raises(AssertionError, match=r"dst: expected \[n, 2, B\], the two weights' 600 sums in "
                                             r"one PSUM bank \(<= 512\), got \[2, 2, 2\]"):
        nki.simulate(_pair_kernel)(hidden, wide, wide, 0, 2)


@pytest.mark.parametrize("shape, n_heads", [
    (SHARD_SHAPES[0].with_batch(1), 4),               # one bank: evicted by block
    (SHARD_SHAPES[0].with_batch(3), 8),               # two banks: evicted whole either way
    (WIDE_BATCH.with_batch(130), 2),                  # two token chunks, a bank each
], ids=["one-bank-B1", "two-banks-B3", "B130"])
def test_project_columns_by_block_changes_no_bit(shape, n_heads):
    """by_block: a one-bank group's sums leave PSUM a 128-column block at a time, VectorE and
    ScalarE in turn; the projection is the same bit for bit, and the copies are one per block."""
    hidden, W = stage_inputs(shape)[:2]
    whole = nki.simulate(_per_head_kernel)(hidden, W, 0, n_heads, 128)
    cap = nkicpu.capture(_per_head_kernel)(hidden, W, 0, n_heads, 128, True)
    assert np.array_equal(cap.outputs.view(np.uint16), whole.view(np.uint16))
    sums = {a.alloc for i in cap.instructions if i.opcode == "nc_matmul" for a in i.writes}
    copies = [i for i in cap.instructions if i.opcode == "tensor_copy" and i.reads[0].alloc in sums]
    one_bank = n_heads * 128 <= 512
    per_chunk = n_heads if one_bank else -(-n_heads * 128 // 512)
    assert len(copies) == per_chunk * -(-shape.B // 128)
    assert {i.engine for i in copies} == {"vector", "scalar"}


@nki.jit
def _slices_kernel(hidden, W, c0, c1, n_heads, head_dim=128):
    """project_slices: n_heads heads of W from column c0 and from c1, [head_dim, 2, n_heads, B]."""
    B, _, H = hidden.shape
    hid = nl.ndarray((128, B, H // 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    hidden_T = load_hidden_T(hid, hidden)
    dst = nl.ndarray((head_dim, 2, n_heads, B), dtype=nl.bfloat16, buffer=nl.sbuf)
    project_slices(dst, hidden_T, W, (c0, c1))
    out = nl.ndarray((head_dim, 2, n_heads, B), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@pytest.mark.parametrize("shape, c0, c1, n_heads", [
    (SHARD_SHAPES[0].with_batch(1), 256, 768, 2),     # Qwen3-Next-80B TP4, LNC=2: program 1's q | k
    (SHARD_SHAPES[0].with_batch(3), 0, 512, 1),
    (WIDE_BATCH.with_batch(130), 128, 640, 2),
], ids=["program1-B1", "B3", "B130"])
def test_project_slices_matches_project_columns(shape, c0, c1, n_heads):
    """project_slices against the reference's columns, and against project_columns on each slice
    apart: the same sums, bit for bit, with one matmul per row tile for both slices."""
    args = stage_inputs(shape)
    hidden, W = args[0], args[1]
    cap = nkicpu.capture(_slices_kernel)(hidden, W, c0, c1, n_heads)
    got = cap.outputs
    mixed = reference(args)[0]
    for i, col in enumerate((c0, c1)):
        want = mixed[:, col:col + n_heads * 128].reshape(shape.B, n_heads, 128).transpose(2, 1, 0)
        assert_output_close(got[:, i], np.ascontiguousarray(want), "slices")
        apart = nki.simulate(_per_head_kernel)(hidden, W, col, n_heads, 128)
        assert np.array_equal(got[:, i].view(np.uint16), apart.view(np.uint16))
    assert sum(i.opcode == "nc_matmul" for i in cap.instructions) == shape.H // 128 * -(-shape.B // 128)


def test_project_slices_rejects_misuse():
    hidden, W = stage_inputs(SMALL)[:2]                    # W: [256, 128] (q | k | v of 32 columns)
    with pytest.raises(AssertionError, match=r"cols: expected slices of 2\*32 columns inside W's 128, "
                                             r"got \[0, 96\]"):
        nki.simulate(_slices_kernel)(hidden, W, 0, 96, 2, 32)
    wide = np.zeros((SMALL.H, 1024), BF16)
    with pytest.raises(AssertionError, match=r"dst: expected \[P, 2, nt, B\], both slices' 2 \* nt \* P sums "
                                             r"in one PSUM bank \(<= 512\), got \[32, 2, 9, 2\]"):
        nki.simulate(_slices_kernel)(hidden, wide, 0, 512, 9, 32)


# -- validation: one test per check ---------------------------------------------------------------

def bad(shape=SMALL, **changes):
    """The SMALL stage inputs with some replaced: name -> array (dtype kept as given)."""
    args = dict(zip(ARGS, stage_inputs(shape)))
    args.update(changes)
    return [args[n] for n in ARGS]


def rejects(args, message):
    with pytest.raises(AssertionError, match=message):
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
