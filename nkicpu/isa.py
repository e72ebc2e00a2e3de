"""`nki.isa` on the CPU: each instruction checks the documented rules, computes as the engine
does (fp32 math, rounding to `dst.dtype`), writes into `dst` and records itself for the cost model.

Signatures, argument order and defaults follow the Neuron SDK 2.32 API stubs
(nki/api/nki/isa/__init__.py). An argument value that is not modeled raises NotImplementedError.
This module is the `nki.isa` namespace: the instructions below, those of the isa_* modules, the
enums (isa_enums.py); the operand checks they share come from operands.py, bound here under
private names so that the namespace shows only the API.
"""
import warnings
from contextlib import contextmanager

import numpy as np

from . import core_sync, indirect, versions
from .errors import ActivationRangeWarning, NkiValidationError, not_modeled, rule_error, rule_warning
from .isa_enums import (REDUCE_CMD as _CMD, constants, dge_mode, dma_engine, engine,  # noqa: F401
                        gpsimd_engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd, scalar_engine,
                        tensor_engine, unknown_engine, vector_engine)
from .isa_enums import check_enum as _enum
from .isa_reduce import range_select, tensor_partition_reduce, tensor_scalar_reduce  # noqa: F401
from .isa_scan import tensor_tensor_scan  # noqa: F401
from .isa_select import affine_select, tensor_copy_predicated  # noqa: F401
from .isa_shuffle import nc_stream_shuffle  # noqa: F401
from .isa_top8 import max8, nc_find_index8  # noqa: F401
from .isa_transpose import matmul_transpose as _matmul_transpose
from .memory import DTYPES, dtype_name, is_float, is_hbm, is_psum, is_sbuf
from .operands import F32, NkiInstruction  # noqa: F401
from .operands import (apply_op as _apply, binary_operands as _binary_operands,
                       bitvec_dtypes as _bitvec_dtypes, cast_to as _cast, check_dst as _dst,
                       check_op as _op, check_placement as _check_placement, engine_name as _engine_name,
                       fp32_rows as _pf, matmul_buffers as _matmul_buffers,
                       no_gpsimd_psum as _no_gpsimd_psum, on_chip as _on_chip,
                       one_psum_bank as _one_psum_bank, psum_whole_words as _psum_whole_words,
                       record as _record, same_layout as _same_layout,
                       same_start_partition as _same_start_partition, scalar_operand as _scalar_operand,
                       start_partition as _start_partition, tensor_arg as _tensor, write as _write)
from .ops import Op
from .record import access_of
from .run import current_run
from .tensor import NkiTensor
from .tiles import tile_size as TILE  # nl.tile_size, not shadowed by nc_matmul(tile_size=)

__all__ = ["NkiValidationError"]  # the rest is the documented API below


def get_nc_version():
    """nkicpu models a trn2 NeuronCore (NeuronCore-v3)."""
    return nc_version.gen3


# -- data movement ----------------------------------------------------------------------------

def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, engine=engine.unknown, name=None):
    where = "nisa.dma_copy"
    _tensor(dst, where, "dst")
    _tensor(src, where, "src")
    if is_psum(src.buffer):
        raise rule_error("dma-psum", where, "DMA never reads PSUM; evict to SBUF with nisa.tensor_copy first")
    if is_psum(dst.buffer):
        raise rule_error("dma-psum", where, "dma_copy moves data between SBUF and HBM; dst is in PSUM")
    for value, arg in ((oob_mode, "oob_mode"), (dge_mode, "dge_mode"), (engine, "engine")):
        _enum(value, arg, where)
    if priority is not None:
        raise not_modeled("dma_copy priority= (a NeuronCore-v4 DMA QoS level; nkicpu models trn2)")
    if dge_mode.name == "hwdge" and dst.dtype != src.dtype:
        raise rule_error("hwdge-dtype", where, f"dge_mode=hwdge needs equal dtypes, got {src.dtype.name} -> {dst.dtype.name}")
    if engine.name != "unknown" and dge_mode.name != "hwdge":
        raise rule_error("dma-engine", where, "engine= selects the trigger engine of a hwdge DMA only")
    if engine.name not in ("unknown", "sync", "scalar"):
        raise rule_error("dma-engine", where, f"a hwdge DMA is triggered by engine.sync or engine.scalar, got engine.{engine.name}")
    indexed = [(t, arg) for t, arg in ((dst, "dst"), (src, "src")) if t.is_indirect()]
    if len(indexed) == 2:
        raise not_modeled("a dma_copy with an indirect access pattern on both src and dst (the dma_copy docs "
                          "describe a gather, an indirect src, and a scatter, an indirect dst, not both at once)")
    if indexed:
        _indirect_dge(indexed[0][0], dge_mode, where)
    if dst.size != src.size:
        raise rule_error("dma-size", where, f"dst has {dst.size} elements ({list(dst.shape)}), src {src.size} ({list(src.shape)})")
    # neuronx-cc once rejected a DMA between SBUF and a view whose dim 0 differs from the SBUF side's
    # partition count (a compile error reported to this project), but the dma_copy docs ask only
    # for equal element counts, and the NKI library's gdn_tkg (Neuron 2.33) loads A_log through a
    # stride-0 [B, nv] view into a [1, B * nv] tile. So nkicpu copies element k to element k, as
    # documented, and warns. HBM -> HBM copies have no partitions to match.
    if not (is_hbm(dst.buffer) and is_hbm(src.buffer)) and dst.shape[0] != src.shape[0]:
        warnings.warn(rule_warning(
            "dma-partition-count", where,
            f"dst has {dst.shape[0]} in dim 0 ({list(dst.shape)} in {dst.buffer.name}), src {src.shape[0]} "
            f"({list(src.shape)} in {src.buffer.name}): the dma_copy docs ask only for equal element counts, "
            f"but neuronx-cc refused such a DMA in a compile error reported to this project; a view of the "
            f"HBM side with the on-chip side's partition count in dim 0 avoids the question"), stacklevel=2)
    _dst(dst, where)
    # oob_mode=skip skips "the DMA transfer for a given dynamic address or index when it is out of
    # bound" (dma_copy docs): a DMA without an indirect access has no dynamic index, so there it changes
    # nothing. The docs do not forbid it, so nkicpu accepts it (the NKI library passes skip or error
    # per call, LIB core/moe/moe_cte/bwmm_shard_on_block.py).
    if not indexed:
        values = src.numpy().reshape(-1)
        if dst.dtype == src.dtype:
            _write(dst, values, cast=False)
        else:
            _write(dst, np.asarray(values, dtype=F32))
        return _record("dma_copy", "dma", [src], [dst], dge_mode=dge_mode.name, trigger=engine.name,
                       priority=priority, name=name)
    # A gather (indirect src) or scatter (indirect dst): element k of src goes to element k of dst, at
    # the rows the index tile holds when the DMA runs; under oob_mode=skip the skipped ones stay as they were.
    view, arg = indexed[0]
    at, keep, moved = indirect.resolve(view, where, arg, skip=oob_mode.name == "skip")
    src_at = at if view is src else src.flat_indices().reshape(-1)
    dst_at = at if view is dst else dst.flat_indices().reshape(-1)
    if keep is not None:
        src_at, dst_at = src_at[keep], dst_at[keep]
    values = src._alloc.data[src_at]
    dst._alloc.data[dst_at] = values if dst.dtype == src.dtype else _cast(np.asarray(values, dtype=F32), dst.dtype)
    # The DMA reads its index tile when it runs: it waits for it.
    reads = [access_of(src, moved) if view is src else src, view._indirect.index]
    writes = [access_of(dst, moved) if view is dst else dst]
    return _record("dma_copy", "dma", reads, writes, dge_mode=dge_mode.name, trigger=engine.name,
                   priority=priority, name=name)


def _indirect_dge(view, mode, where):
    """The DGE modes an indirect access takes (SDK nki/deep-dives/nki-dge.rst, 'How .ap() Affects DGE
    Mode': scalar_offset any mode, vector_offset unknown or swdge, and "If you specify
    dge_mode=unknown (the default) with vector_offset, the compiler will automatically select swdge").
    That table's "any mode" for scalar_offset includes none, but none's descriptors are written by the
    runtime before the kernel runs and "Cannot handle dynamic (runtime-computed) addresses" (same page,
    'none'), and the dma_copy docs give dynamic start addresses to sw_dge and hw_dge only ("When either
    sw_dge or hw_dge mode is used, the src and dst tensors can have a dynamic start address"): nkicpu
    refuses none."""
    if view._indirect.vector and mode.name not in ("unknown", "swdge"):
        raise rule_error("indirect-dge", where, f"a vector_offset (gather / scatter) DMA needs software DGE: "
                                                f"dge_mode=swdge, or unknown (the compiler then picks swdge), "
                                                f"not {mode.name}")
    if mode.name == "none":
        raise rule_error("indirect-dge", where, "a dynamic start address (scalar_offset) needs descriptors "
                                                "generated when the DMA runs: dge_mode hwdge, swdge or unknown, "
                                                "not none (the runtime writes those before the kernel runs)")


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    where = "nisa.tensor_copy"
    _on_chip(dst, where, "dst")
    _on_chip(src, where, "src")
    _same_layout(dst, src, where, "dst", "src")
    eng = _engine_name(engine, where)
    eng = "vector" if eng == "unknown" else eng
    if eng not in ("vector", "scalar", "gpsimd"):
        raise rule_error("engine", where, f"tensor_copy runs on vector, scalar or gpsimd, got {eng}")
    _no_gpsimd_psum(eng, [dst, src], where)
    _dst(dst, where)
    if dst.dtype == src.dtype:  # bit-accurate copy
        _write(dst, src.numpy().reshape(src.partitions, -1), cast=False)
    else:
        _write(dst, _pf(src))
    return _record("tensor_copy", eng, [src], [dst], name=name)


def memset(dst, value, engine=engine.unknown, name=None):
    where = "nisa.memset"
    _on_chip(dst, where, "dst")
    _dst(dst, where)
    # NKI 0.3.0 rejects a float value on an int dst; an int literal on a float dst is fine (the NKI
    # library's memset(value=0) on float tiles; SDK release-notes/components/nki.rst 0.3.0).
    ok = isinstance(value, (int, np.integer) + ((float, np.floating) if is_float(dst.dtype) else ())) \
        and not isinstance(value, (bool, np.bool_))
    if not ok:
        kind = "a number" if is_float(dst.dtype) else "an int"
        raise rule_error("memset-value", where, f"value must be {kind} for a {dst.dtype.name} dst, got {value!r}")
    eng = _engine_name(engine, where)
    eng = "vector" if eng == "unknown" else eng
    if eng not in ("vector", "gpsimd"):
        raise rule_error("engine", where, f"memset runs on vector or gpsimd, got {eng}")
    _no_gpsimd_psum(eng, [dst], where)
    # A float value goes through fp32, as the engine computes, then rounds once to dst.dtype.
    _write(dst, np.full(dst.shape, value, dtype=F32 if is_float(dst.dtype) else np.int64))
    return _record("memset", eng, [], [dst], name=name)


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    where = "nisa.iota"
    _on_chip(dst, where, "dst")
    if not is_sbuf(dst.buffer):
        raise rule_error("gpsimd-psum", where, "iota runs on GpSimd and writes SBUF only")
    pattern = [list(p) for p in pattern]
    if not 1 <= len(pattern) <= 4:
        raise ValueError(f"{where}: pattern must have 1 to 4 [step, num] pairs, got {pattern}")
    counts = [n for _, n in pattern]
    if int(np.prod(counts)) != dst.free_size:
        raise rule_error("iota-size", where, f"pattern counts {counts} make {int(np.prod(counts))} elements per "
                                             f"partition; dst has {dst.free_size}")
    values = np.zeros(counts, dtype=np.int64) + offset
    for d, (step, n) in enumerate(pattern):
        shape = [1] * len(counts)
        shape[d] = n
        values = values + (np.arange(n) * step).reshape(shape)
    values = values.reshape(1, -1) + (np.arange(dst.partitions) * channel_multiplier)[:, None]
    _dst(dst, where)
    _write(dst, values.astype(np.int32).astype(F32) if is_float(dst.dtype) else values.astype(np.int32), cast=True)
    return _record("iota", "gpsimd", [], [dst], name=name)


# -- TensorE ----------------------------------------------------------------------------------

MATMUL_DTYPES = {"float8_e4m3", "float8_e5m2", "bfloat16", "float16", "float32"}


def _check_tiling(tile_position, tile_size, K, M, where):
    if bool(tile_position) != bool(tile_size):
        raise rule_error("matmul-tiling", where, "tile_position and tile_size must be set together")
    if not tile_size:
        return
    (row, col), (r0, c0) = tile_size, tile_position
    if row not in (32, 64, 128) or col not in (32, 64, 128):
        raise rule_error("matmul-tiling", where, f"tile_size entries must be 32, 64 or 128, got {tile_size}")
    if r0 % row or c0 % col or r0 + row > 128 or c0 + col > 128:
        raise rule_error("matmul-tiling", where, f"tile_position {tile_position} must be a multiple of tile_size "
                                                 f"{tile_size} inside the 128x128 array")
    if K > row or M > col:
        raise rule_error("matmul-tiling", where, f"the stationary tile [{K}, {M}] must fit tile_size {tile_size}")


# -- fp32 matmul numerics ---------------------------------------------------------------------
# What TensorE computes for fp32 operands is not documented. Public trn2 profiles show every fp32
# nc_matmul as two LoadStationary + MultiplyMoving passes, the first tagged fp32_mode=LOW_HIGH and
# the second fp32_mode=HIGH (github.com/KevGomes1403/nki-moe-megakernel: tests/nxdi_moe.md at
# 26ff3d7, nki_kernels/specs/deltanet_decode_opt.md at 0d4ef9a), and the nc_matmul API says an
# is_*_onezero hint "could lead to 2x better performance" for a float32 operand (SDK
# nki/api/nki/isa/__init__.py). ASSUMPTION, the reading nkicpu models by default ("bf16x3"):
# each operand x splits into hi = bf16(x) and lo = bf16(x - hi) (round to nearest even); pass 1
# multiplies the stationary's hi by the moving's lo and hi, pass 2 the stationary's lo by the
# moving's hi, each product exact and each pass accumulated into PSUM in fp32; lo * lo is dropped.
# An operand hinted as ones/zeros enters as its hi part only (its low pass is the one skipped).
# "exact" is the optimistic alternative: fp32 products as an fp32 multiply rounds them.
FP32_MATMUL_MODES = ("bf16x3", "exact")
_fp32_matmul = {"mode": "bf16x3"}


@contextmanager
def fp32_matmul_numerics(mode):
    """Run nc_matmul on fp32 operands under `mode` (one of FP32_MATMUL_MODES) inside the block."""
    if mode not in FP32_MATMUL_MODES:
        raise ValueError(f"mode: expected one of {FP32_MATMUL_MODES}, got {mode!r}")
    before = _fp32_matmul["mode"]
    _fp32_matmul["mode"] = mode
    try:
        yield
    finally:
        _fp32_matmul["mode"] = before


def _bf16(x):
    """fp32 values rounded to bf16 (nearest, ties to even; truncated where that would overflow),
    as fp32; non-finite values unchanged. Bit arithmetic: ml_dtypes' cast is ~10x slower."""
    u = x.view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(F32)
    r = np.where(np.isinf(r), (u & np.uint32(0xFFFF0000)).view(F32), r)
    return np.where(np.isfinite(x), r, x)


def _bf16_split(x):
    """(hi, lo) = (bf16(x), bf16(x - hi)) as fp32 (x - hi is exact); lo = 0 where x is not finite."""
    hi = _bf16(x)
    with np.errstate(invalid="ignore"):
        return hi, _bf16(np.where(np.isfinite(x), x - hi, F32(0)))


def _matmul_passes(stationary, moving, s_onezero, m_onezero):
    """The products stationary.T @ moving that PSUM accumulates one after the other, in fp32."""
    s, m = _pf(stationary), _pf(moving)
    fp32 = dtype_name(stationary.dtype) == dtype_name(moving.dtype) == "float32"   # not tfloat32
    if not fp32 or _fp32_matmul["mode"] == "exact":
        return [s.T @ m]
    (s_hi, s_lo), (m_hi, m_lo) = _bf16_split(s), _bf16_split(m)
    low_high = s_hi.T @ (m_hi if m_onezero else m_hi + m_lo)    # m_hi + m_lo is exact in fp32
    return [low_high] if s_onezero else [low_high, s_lo.T @ m_hi]


def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None):
    where = "nisa.nc_matmul"
    for t, arg in ((dst, "dst"), (stationary, "stationary"), (moving, "moving")):
        _on_chip(t, where, arg)
    if is_transpose:
        return _matmul_transpose(dst, stationary, moving, accumulate, tile_position, tile_size, perf_mode, name)
    if _enum(perf_mode, "perf_mode", where) != matmul_perf_mode.none:
        raise not_modeled(f"nc_matmul perf_mode={perf_mode}")
    _matmul_buffers(where, dst, stationary, moving)
    if dst.dtype != DTYPES["float32"]:
        raise rule_error("matmul-dst-fp32", where, f"dst must be float32 on trn2, got {dst.dtype.name}")
    dts = {stationary.dtype.name, moving.dtype.name}
    if not dts <= MATMUL_DTYPES or ("float32" in dts and dts != {"float32"}):
        raise rule_error("matmul-dtypes", where, f"inputs {sorted(dts)}: allowed are fp8/bf16/fp16/fp32, "
                                                 f"and fp32 only with fp32")
    K, M, N = stationary.partitions, stationary.free_size, moving.free_size
    if moving.partitions != K:
        raise rule_error("matmul-contraction", where, f"stationary and moving must share the contraction (partition) "
                                                      f"size, got {K} and {moving.partitions}")
    if M > TILE.gemm_stationary_fmax:
        raise rule_error("matmul-stationary-free", where,
                         f"stationary free size must be <= {TILE.gemm_stationary_fmax}, got {M}")
    if N > TILE.gemm_moving_fmax:
        raise rule_error("matmul-moving-free", where,
                         f"moving free size must be <= {TILE.gemm_moving_fmax} (one PSUM bank), got {N}")
    if dst.partitions != M or dst.free_size != N:
        raise rule_error("matmul-dst-shape", where, f"dst must be [{M}, {N}] (stationary free x moving free), "
                                                    f"got {list(dst.shape)}")
    _one_psum_bank(dst, where)
    _check_tiling(tuple(tile_position), tuple(tile_size), K, M, where)
    _check_placement(dst, stationary, moving, tuple(tile_position), tuple(tile_size), where)
    _dst(dst, where)
    passes = _matmul_passes(stationary, moving, is_stationary_onezero, is_moving_onezero)
    idx = dst.flat_indices().reshape(M, N)
    written = dst._alloc.matmul_written[idx]
    # accumulate=None: per element, a first matmul write overwrites and a later one adds (as the SDK
    # simulator does since NKI 0.6.0 for overlapping regions, "the convolution pattern").
    # accumulate=True onto PSUM no matmul wrote (uninitialised, or set by memset / a copy) is
    # undefined on trn2 (isa stub, nc_matmul, "Accumulation mode").
    if accumulate is None:
        acc = written
    elif accumulate:
        if not written.all():
            raise rule_error("matmul-accumulate", where, "accumulate=True onto PSUM that no matmul has written "
                                                         "(memset or uninitialised) is undefined on trn2")
        acc = written
    else:
        acc = np.zeros_like(written)
    old = np.asarray(dst.numpy(), dtype=F32).reshape(M, N)
    result = np.where(acc, old + passes[0], passes[0])
    for product in passes[1:]:
        result = result + product
    dst.numpy()[...] = result.reshape(dst.shape)
    dst._alloc.matmul_written[idx] = True
    return _record("nc_matmul", "tensor", [stationary, moving], [dst], K=K, M=M, N=N,
                   accumulate=bool(acc.any()), tile_position=tuple(tile_position), tile_size=tuple(tile_size),
                   moving_dtype=moving.dtype.name, name=name)


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    where = "nisa.nc_transpose"
    _on_chip(dst, where, "dst")
    _on_chip(data, where, "data")
    P, F = data.partitions, data.free_size
    eng = _engine_name(engine, where)
    if eng == "unknown":
        eng = "vector" if P <= 32 and F <= 32 else "tensor"
    if eng == "tensor":
        if not (is_sbuf(data.buffer) and is_psum(dst.buffer)):
            raise rule_error("transpose-buffers", where, "TensorE transpose reads SBUF and writes PSUM")
        if F > 128:
            raise rule_error("transpose-size", where, f"TensorE transposes at most [128, 128], got [{P}, {F}]")
        _one_psum_bank(dst, where)
        if _start_partition(dst) != 0:     # a matmul against an identity (trainium_inferentia2_arch.rst)
            raise rule_error("matmul-placement", where, f"dst starts at PSUM partition {_start_partition(dst)}; PE "
                                                        f"column c writes PSUM partition c, so a TensorE transpose "
                                                        f"writes from partition 0")
        _psum_whole_words(dst, where)
    elif eng == "vector":
        if P > 32 or F > 32:
            raise rule_error("transpose-size", where, f"VectorE transposes at most [32, 32], got [{P}, {F}]")
    else:
        raise rule_error("engine", where, f"nc_transpose runs on tensor or vector, got {eng}")
    if dst.dtype != data.dtype:
        raise rule_error("transpose-dtype", where, f"dst dtype must equal data dtype {data.dtype.name}, got {dst.dtype.name}")
    if dst.partitions != F or dst.free_size != P:
        raise rule_error("operand-shape", where, f"dst must be [{F}, {P}], got {list(dst.shape)}")
    _dst(dst, where)
    _write(dst, data.numpy().reshape(P, F).T, cast=False)
    return _record("nc_transpose", eng, [data], [dst], name=name)


# -- ScalarE ----------------------------------------------------------------------------------

# Valid input ranges of the ScalarE functions that have one (SDK nki/api/nki.api.shared.rst, table
# of activation functions): outside them the piece-wise polynomials give "invalid output results".
# The engine computes them all the same ("sin(9.0) returns ~27.65", the same page, and the SDK
# simulator reproduces it), so an input outside is an ActivationRangeWarning, not a refusal. The
# library's attention_tkg rope feeds sin a range-reduced angle up to 1.4e-4 past pi (fp32 rounding).
# Bounds compared as fp32 numbers, so that e.g. fp32(pi) counts as pi; reciprocal bounds |x|.
ACTIVATION_RANGES = {  # op: (low, high, the table's wording)
    "rsqrt": (2.0 ** -87, 2.0 ** 97, "[2^-87, 2^97]"),
    "reciprocal": (2.0 ** -42, 2.0 ** 42, "+-[2^-42, 2^42]"),
    "log": (2.0 ** -64, 2.0 ** 64, "[2^-64, 2^64]"),
    "sqrt": (2.0 ** -116, 2.0 ** 118, "[2^-116, 2^118]"),
    "sin": (-np.pi, np.pi, "[-pi, pi]"),
    "arctan": (-np.pi / 2, np.pi / 2, "[-pi/2, pi/2]"),
}


def _check_activation_range(op, x, data, where):
    """nkicpu runs on data, so it checks the function's actual inputs x = data * scale + bias.

    Non-finite inputs (NaN from uninitialised memory, a caller's inf) are not out of range: on the
    hardware they give a non-finite or garbage value for that element only, which `activation`
    models as NaN for that element. nkicpu computes the exact function outside the range (the
    polynomials are not published).
    """
    if op.name not in ACTIVATION_RANGES:
        return
    lo, hi, span = ACTIVATION_RANGES[op.name]
    v = np.abs(x) if op.name == "reciprocal" else x
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(np.isfinite(v) & ((v < F32(lo)) | (v > F32(hi))))
    if bad.size:
        i = bad[0]
        idx = [int(j) for j in np.unravel_index(i, data.shape)]
        warnings.warn(ActivationRangeWarning(
            f"{where}: op={op!r} input data * scale + bias = {float(x.ravel()[i])!r} at data index {idx} "
            f"({bad.size} input(s) out of range) is outside its valid range {span}; ScalarE extrapolates its "
            f"polynomial there, and nkicpu computes the exact function"), stacklevel=3)


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle, name=None):
    where = "nisa.activation"
    _op(op, where, "op", act=True)
    _on_chip(dst, where, "dst")
    _on_chip(data, where, "data")
    _same_layout(dst, data, where, "dst", "data")
    x = _pf(data) * _scalar_operand(scale, data, where, "scale")
    reads = [data] + [t for t in (scale, bias) if isinstance(t, NkiTensor)]
    if bias is not None:
        if isinstance(bias, NkiTensor):
            _on_chip(bias, where, "bias")
            if bias.partitions != data.partitions or bias.free_size != 1:
                raise rule_error("activation-bias", where, f"bias must be a [{data.partitions}, 1] tile, got {list(bias.shape)}")
            x = x + _pf(bias)
        else:
            x = x + _scalar_operand(bias, data, where, "bias")
    _check_activation_range(op, x, data, where)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        y = np.where(np.isfinite(x), np.asarray(op.fn(x), dtype=F32), F32(np.nan))
    if _enum(reduce_cmd, "reduce_cmd", where) == _CMD.load_reduce:
        raise not_modeled("activation reduce_cmd=load_reduce")
    if reduce_op is not None and (not isinstance(reduce_op, Op) or reduce_op.name != "add"):
        raise rule_error("activation-reduce-op", where, f"reduce_op must be nl.add, got {reduce_op!r}")
    regs = current_run(where).scalar_reduce_regs
    P = data.partitions
    p0 = _start_partition(data)                     # ScalarE lane = partition: one accumulator per lane
    lanes = slice(p0, p0 + P)
    if reduce_cmd in (_CMD.reset, _CMD.reset_reduce):
        regs[lanes] = 0
    if reduce_cmd in (_CMD.reduce, _CMD.reset_reduce):
        if reduce_op is None:
            raise rule_error("activation-reduce-op", where, f"reduce_cmd={reduce_cmd.name} needs reduce_op=nl.add")
        regs[lanes] += y.sum(axis=1, dtype=F32)
    _dst(dst, where)
    _write(dst, y)
    writes = [dst]
    if reduce_res is not None:
        _on_chip(reduce_res, where, "reduce_res")
        if reduce_res.partitions != P or reduce_res.free_size != 1:
            raise rule_error("activation-reduce-res", where, f"reduce_res must be a [{P}, 1] tile, got {list(reduce_res.shape)}")
        _dst(reduce_res, where)
        _write(reduce_res, regs[lanes].copy())
        writes.append(reduce_res)
    return _record("activation", "scalar", reads, writes, op=op.name, reduce_cmd=reduce_cmd.name,
                   reads_out_regs=reduce_res is not None, name=name)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    return activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                      reduce_cmd=_CMD.reset_reduce, name=name)


# -- VectorE / GpSimd -------------------------------------------------------------------------

def _is_int32(t):
    return t.dtype in (DTYPES["int32"], DTYPES["uint32"])


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    where = "nisa.tensor_tensor"
    _op(op, where, "op")
    if op.unary:
        raise rule_error("alu-op", where, f"op={op!r} is unary; tensor_tensor needs a binary operator")
    _binary_operands(where, dst, data1, data2, "data1", "data2")
    _same_start_partition(where, data1=data1, data2=data2)
    eng = _engine_name(engine, where)
    any_psum = any(is_psum(t.buffer) for t in (dst, data1, data2))
    if eng == "unknown":
        all_int = all(_is_int32(t) for t in (dst, data1, data2))
        eng = "gpsimd" if op.name == "power" or (all_int and not any_psum) else "vector"
    if eng not in ("vector", "gpsimd"):
        raise rule_error("engine", where, f"tensor_tensor runs on vector or gpsimd, got {eng}")
    if op.name == "power" and eng != "gpsimd":
        raise rule_error("engine", where, f"nl.power runs on GpSimd only, got engine {eng}")
    # The tensor_tensor docstring (SDK nki/api/nki/isa/__init__.py) lets GpSimd run nl.power and
    # integer (int32/uint32) arithmetic only; neuronx-cc rejects float arithmetic there ("TensorTensor
    # cannot run on engine Pool", a trn2 compile log reported to this project), and the NKI library
    # gives GpSimd only memset/iota-style work. tensor_scalar on GpSimd is "gpsimd-ops" (rsqrt only);
    # the other ALU instructions have no engine= and run on VectorE.
    if eng == "gpsimd" and op.name != "power" and any(is_float(t.dtype) for t in (dst, data1, data2)):
        raise rule_error("gpsimd-float-arithmetic", where,
                         f"GpSimd (Pool) does not run float tensor_tensor op={op!r} (dtypes "
                         f"{[t.dtype.name for t in (dst, data1, data2)]}); only nl.power and integer arithmetic "
                         f"run there: use engine=nisa.engine.vector")
    _no_gpsimd_psum(eng, [dst, data1, data2], where)
    _dst(dst, where)
    if op.bitvec:
        _bitvec_dtypes(op, (dst, data1, data2), where)
        a = data1.numpy().reshape(data1.partitions, -1)
        b = data2.numpy().reshape(data2.partitions, -1)
        _write(dst, op.fn(a, b).astype(dst.dtype), cast=False)
    elif eng == "gpsimd" and all(_is_int32(t) for t in (dst, data1, data2)):
        # GpSimd does int32/uint32 arithmetic natively (exact), wrapping to the dst width.
        a = data1.numpy().reshape(data1.partitions, -1).astype(np.int64)
        b = data2.numpy().reshape(data2.partitions, -1).astype(np.int64)
        _write(dst, np.asarray(op.fn(a, b)).astype(np.int64).astype(dst.dtype), cast=False)
    else:
        _write(dst, op.fn(_pf(data1), _pf(data2)))
    return _record("tensor_tensor", eng, [data1, data2], [dst], op=op.name, name=name)


SCALAR_ENGINE_OPS = {("multiply", "add"), ("multiply", None), ("add", None)}


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    where = "nisa.tensor_scalar"
    _op(op0, where, "op0")
    _on_chip(dst, where, "dst")
    _on_chip(data, where, "data")
    _same_layout(dst, data, where, "dst", "data")
    if op1 is None and operand1 is not None:
        raise ValueError(f"{where}: operand1 must be None when op1 is None, got {operand1!r}")
    if op1 is not None:
        _op(op1, where, "op1")
        if op1.bitvec != op0.bitvec:
            raise rule_error("alu-op", where, f"op0={op0!r} and op1={op1!r} must both be bitvec or both arithmetic")
    if op0.unary and operand0 not in (None, 0):
        raise ValueError(f"{where}: operand0 must be None or 0 for the unary op0={op0!r}, got {operand0!r}")
    eng = _engine_name(engine, where)
    eng = "vector" if eng == "unknown" else eng
    pair = (op0.name, op1.name if op1 is not None else None)
    if eng == "scalar" and pair not in SCALAR_ENGINE_OPS:
        raise rule_error("scalar-engine-ops", where, f"ScalarE tensor_scalar on trn2 supports only "
                                                     f"(multiply, add), (multiply, None), (add, None); got {pair}")
    if eng == "gpsimd" and pair != ("rsqrt", None):
        raise rule_error("gpsimd-ops", where, f"GpSimd tensor_scalar is allowed only for rsqrt, got {pair}")
    if eng not in ("vector", "scalar", "gpsimd"):
        raise rule_error("engine", where, f"tensor_scalar runs on vector, scalar or gpsimd, got {eng}")
    _no_gpsimd_psum(eng, [dst, data], where)
    ops = [(op0, operand0, reverse0)] + ([(op1, operand1, reverse1)] if op1 is not None else [])
    operands = [None if op.unary else _scalar_operand(v, data, where, f"operand{i}") for i, (op, v, _) in enumerate(ops)]
    _same_start_partition(where, data=data, operand0=operand0, operand1=operand1)
    _dst(dst, where)
    if op0.bitvec:
        raise not_modeled("bitvec tensor_scalar")
    x = _pf(data)
    for (op, _, rev), val in zip(ops, operands):
        x = np.asarray(_apply(op, x, val, rev), dtype=F32)
    _write(dst, x)
    reads = [data] + [v for _, v, _ in ops if isinstance(v, NkiTensor)]
    return _record("tensor_scalar", eng, reads, [dst], op0=op0.name, op1=pair[1], name=name)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    where = "nisa.scalar_tensor_tensor"
    _op(op0, where, "op0")
    _op(op1, where, "op1")
    if op0.bitvec or op1.bitvec:
        raise rule_error("alu-op", where, "scalar_tensor_tensor takes arithmetic operators only")
    if op1.unary:
        raise rule_error("alu-op", where, f"op1={op1!r} is unary; op1 combines the tile operand1 and needs a binary operator")
    _binary_operands(where, dst, data, operand1, "data", "operand1")
    # scalar_tensor_tensor's docs allow an operand0 tile of any dtype (tensor_scalar's must be fp32).
    val = None if op0.unary else _scalar_operand(operand0, data, where, "operand0", fp32=False)
    _same_start_partition(where, data=data, operand0=operand0, operand1=operand1)
    _dst(dst, where)
    x = np.asarray(_apply(op0, _pf(data), val, reverse0), dtype=F32)
    y = np.asarray(_apply(op1, x, _pf(operand1), reverse1), dtype=F32)
    _write(dst, y)
    reads = [data, operand1] + ([operand0] if isinstance(operand0, NkiTensor) else [])
    return _record("scalar_tensor_tensor", "vector", reads, [dst], op0=op0.name, op1=op1.name, name=name)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    where = "nisa.tensor_reduce"
    _op(op, where, "op")
    if op.reduce is None:
        if op.name in ("logical_and", "logical_or", "logical_xor"):
            raise not_modeled(f"tensor_reduce with op={op!r}")
        raise rule_error("reduce-op", where, f"op={op!r} is not a legal reduction operator")
    _on_chip(dst, where, "dst")
    _on_chip(data, where, "data")
    axes = tuple(sorted([axis] if isinstance(axis, (int, np.integer)) else axis))
    nd = data.ndim
    if not axes or 0 in axes or axes != tuple(range(nd - len(axes), nd)):
        raise rule_error("reduce-axis", where, f"axis must be the last contiguous free dims of a {nd}-d tile "
                                               f"(ending at {nd - 1}, never 0), got {axis}")
    kept = int(np.prod(data.shape[1:nd - len(axes)]))
    if dst.partitions != data.partitions or dst.free_size != kept:
        raise rule_error("operand-shape", where, f"dst must have {data.partitions} partitions and {kept} elements per "
                                                 f"partition after reducing {axes}, got {list(dst.shape)}")
    _dst(dst, where)
    x = np.asarray(data.numpy(), dtype=F32)
    if op.bitvec:
        _bitvec_dtypes(op, (dst, data), where)
        r = op.reduce.reduce(np.asarray(data.numpy()).reshape(data.shape[:nd - len(axes)] + (-1,)), axis=-1)
        _write(dst, r.astype(dst.dtype), cast=False)
    else:
        # The reduced axes are the last ones: fold them into one so that non-reorderable ops
        # (subtract) reduce them in storage order.
        r = op.reduce.reduce(x.reshape(x.shape[:nd - len(axes)] + (-1,)), axis=-1, dtype=F32)
        _write(dst, -r if negate else r)
    return _record("tensor_reduce", "vector", [data], [dst], op=op.name, name=name)


def reciprocal(dst, data, name=None):
    where = "nisa.reciprocal"
    _on_chip(dst, where, "dst")
    _on_chip(data, where, "data")
    _same_layout(dst, data, where, "dst", "data")
    _dst(dst, where)
    with np.errstate(divide="ignore"):
        _write(dst, F32(1.0) / _pf(data))
    return _record("reciprocal", "vector", [data], [dst], name=name)


# -- VectorE statistics (SDK isa stub: bn_stats, bn_aggr) ---------------------------------------

def _count_mean_m2(x):
    """Per row of x: (count, mean, variance * count). A group with no elements (the odd elements of
    a one-element row) gives zeros (estimate: the docs do not say; bn_aggr weighs it by count 0)."""
    n = x.shape[1]
    if n == 0:
        return np.zeros((x.shape[0], 3), dtype=F32)
    mean = x.mean(axis=1, dtype=F32)
    m2 = np.square(x - mean[:, None], dtype=F32).sum(axis=1, dtype=F32)
    return np.stack([np.full_like(mean, n), mean, m2], axis=1)


def bn_stats(dst, data, name=None):
    where = "nisa.bn_stats"
    _on_chip(dst, where, "dst")
    _on_chip(data, where, "data")
    fmax = TILE.bn_stats_fmax
    if data.free_size > fmax:
        raise rule_error("operand-shape", where, f"data has {data.free_size} elements per partition; bn_stats takes at "
                                                 f"most {fmax} (nl.tile_size.bn_stats_fmax): run it per "
                                                 f"{fmax}-element tile and combine the outputs with one bn_aggr")
    if dst.partitions != data.partitions or dst.free_size != 6:
        raise rule_error("operand-shape", where, f"dst must hold 6 statistics for each of data's {data.partitions} "
                                                 f"partitions, [{data.partitions}, 6], got {list(dst.shape)}")
    _dst(dst, where)
    x = _pf(data)           # the free dims flattened in view order: "even" and "odd" are positions in it
    _write(dst, np.concatenate([_count_mean_m2(x[:, 0::2]), _count_mean_m2(x[:, 1::2])], axis=1))
    return _record("bn_stats", "vector", [data], [dst], name=name)


def bn_aggr(dst, data, name=None):
    where = "nisa.bn_aggr"
    _on_chip(dst, where, "dst")
    _on_chip(data, where, "data")
    if data.free_size % 3:
        raise rule_error("operand-shape", where, f"data must hold (count, mean, variance * count) triples from bn_stats, "
                                                 f"a multiple of 3 elements per partition, got {data.free_size}")
    if dst.partitions != data.partitions or dst.free_size != 2:
        raise rule_error("operand-shape", where, f"dst must hold mean and variance for each of data's "
                                                 f"{data.partitions} partitions, [{data.partitions}, 2], got {list(dst.shape)}")
    _dst(dst, where)
    t = _pf(data).reshape(data.partitions, -1, 3)
    count, mean, m2 = t[:, :, 0], t[:, :, 1], t[:, :, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        n = count.sum(axis=1, dtype=F32)
        total_mean = (count * mean).sum(axis=1, dtype=F32) / n
        # Chan et al.'s pairwise combination: within-group sums plus the spread of the group means.
        spread = (count * np.square(mean - total_mean[:, None])).sum(axis=1, dtype=F32)
        variance = (m2.sum(axis=1, dtype=F32) + spread) / n
    _write(dst, np.stack([total_mean, variance], axis=1))
    return _record("bn_aggr", "vector", [data], [dst], name=name)


# -- DMA transpose (SDK isa stub: dma_transpose) ----------------------------------------------

# The one permutation each src rank takes ("Supported axes are (1, 0), (2, 1, 0), and (3, 1, 2, 0)").
DMA_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error, name=None):
    where = "nisa.dma_transpose"
    _tensor(dst, where, "dst")
    _tensor(src, where, "src")
    for value, arg in ((dge_mode, "dge_mode"), (oob_mode, "oob_mode")):
        _enum(value, arg, where)
    if priority is not None:
        raise not_modeled("dma_transpose priority= (a NeuronCore-v4 DMA QoS level; nkicpu models trn2)")
    if not is_sbuf(dst.buffer) or is_psum(src.buffer):
        raise rule_error("dma-transpose-buffers", where, f"transposes HBM or SBUF into SBUF, got "
                                                         f"{src.buffer.name} -> {dst.buffer.name}")
    if src.is_indirect() or dst.is_indirect():
        raise not_modeled("dma_transpose of an indirect access pattern (an indirect transpose, with its own "
                          "software-DGE rules in nki/deep-dives/nki-dge.rst)")
    # nkicpu has no indirect transpose, the only form that takes swdge or oob_mode=skip.
    if dge_mode.name not in ("unknown", "hwdge") or oob_mode.name != "error":
        raise rule_error("dma-transpose-mode", where, f"a direct transpose takes dge_mode unknown or hwdge and "
                                                      f"oob_mode error, got {dge_mode.name} and {oob_mode.name}")
    perm = DMA_TRANSPOSE_AXES.get(src.ndim)
    if perm is None or (axes is not None and tuple(axes) != perm):
        raise rule_error("dma-transpose-axes", where, f"the supported axes are {sorted(DMA_TRANSPOSE_AXES.values())}, "
                                                      f"one per src rank; got axes={axes} for a {src.ndim}-d src")
    # dst.shape[0] is src.shape[-1] and an SBUF dst spans at most 128 partitions: src.shape[-1] <= 128 holds.
    transposed = tuple(src.shape[a] for a in perm)
    if dst.shape != transposed:
        raise rule_error("dma-transpose-shape", where, f"dst.shape must be the transposed src.shape "
                                                       f"{list(transposed)}, rank included (NKI 0.4.0), got "
                                                       f"{list(dst.shape)}")
    # 2- and 4-byte dtypes are bit-accurate (trainium2_arch.rst "DMA Transpose"); hwdge takes 2 bytes.
    sizes = (2,) if dge_mode.name == "hwdge" else (2, 4)
    if dst.dtype != src.dtype or src.dtype.itemsize not in sizes:
        raise rule_error("dma-transpose-dtype", where, f"src and dst need one dtype of {' or '.join(map(str, sizes))} "
                                                       f"bytes (dge_mode={dge_mode.name}), got {src.dtype.name} -> "
                                                       f"{dst.dtype.name}")
    lead = src.shape[0]
    if dge_mode.name == "hwdge" and not (lead == 16 if src.ndim == 2 else
                                         lead in (1, 2, 4, 8, 16) and lead * src.shape[-2] % 16 == 0):
        raise rule_error("dma-transpose-hwdge", where, f"a hwdge transpose needs src.shape[0] == 16 (2-d), or "
                                                       f"src.shape[0] in (1, 2, 4, 8, 16) with src.shape[0] * "
                                                       f"src.shape[-2] a multiple of 16 (3-/4-d); got "
                                                       f"{list(src.shape)}")
    _dst(dst, where)
    _write(dst, np.transpose(src.numpy(), perm), cast=False)
    return _record("dma_transpose", "dma", [src], [dst], dge_mode=dge_mode.name, axes=perm, priority=priority,
                   name=name)


# -- LNC synchronisation (SDK isa stub: core_barrier, sendrecv) ----------------------------------

def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """Wait until both programs of an LNC=2 launch have reached this barrier (NKI 0.7's name;
    NKI 0.8 calls it nki.lnc.core_barrier and deprecates this name). See
    `core_sync.core_barrier`."""
    versions.deprecated("nisa.core_barrier")
    return core_sync.core_barrier("nisa.core_barrier", data, cores, engine, name)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma, name=None):
    versions.deprecated("nisa.sendrecv")
    core_sync.sendrecv("nisa.sendrecv")


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(f"module 'nki.isa' has no attribute {attr!r}")  # hasattr() probes
    if f"nisa.{attr}" in versions.DEPRECATED_0_8:
        versions.deprecated(f"nisa.{attr}")
    raise not_modeled(f"nki.isa.{attr}")
