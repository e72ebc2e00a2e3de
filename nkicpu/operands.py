"""The operand checks and numerics every `nki.isa` instruction shares: one place for each rule an
operand is held to (buffer, partitions, the engine access pattern, placement, layout, scalar
operands, operators), for writing a result as the engine rounds it, and for recording an
instruction for the cost model. The instruction modules (isa.py, isa_*.py) import from here and
from nowhere else in the package for these.
"""
import numpy as np

from .errors import rule_error
from .isa_enums import check_enum
from .memory import DTYPES, PMAX, PSUM_BANK_BYTES, is_float, is_hbm, is_psum, is_sbuf
from .ops import Op
from .record import Access, access_of
from .run import current_run
from .tensor import NkiTensor

F32 = np.float32


class NkiInstruction:
    """Opaque handle to a recorded instruction; `depends_on` adds explicit scheduling edges."""

    def __init__(self, record):
        self._record = record

    def depends_on(self, *producers):
        self._record.depends_on.extend(p._record.index for p in producers)
        return self


# -- shared checks and numerics ---------------------------------------------------------------

def tensor_arg(x, where, arg):
    if not isinstance(x, NkiTensor):
        raise TypeError(f"{where}: {arg} must be an NkiTensor, got {type(x).__name__}")
    return x


def on_chip(t, where, arg):
    tensor_arg(t, where, arg)
    if is_hbm(t.buffer):
        raise rule_error("on-chip-operand", where, f"{arg} must be in SBUF or PSUM, got {t.buffer.name} ({t!r})")
    if t.partitions > PMAX:
        raise rule_error("partition-dim", where, f"{arg} spans {t.partitions} partitions; at most {PMAX}")
    if not t.partition_stride_ok():
        raise rule_error("partition-contiguous", where, f"{arg} must address consecutive partitions (no partition step)")
    engine_access_pattern(t, where, arg)
    return t


# How a compute engine addresses an SBUF/PSUM operand (SDK nki/guides/architecture/
# trainium_inferentia2_arch.rst "Accessing SBUF/PSUM tensors using compute engines", which
# trainium2_arch.rst keeps for NeuronCore-v3; nki/deep-dives/nki-aps.rst "Hardware Capability"):
# a start partition that depends on the partition count, at most four free dims, each with a
# uint16 size and an int16 stride in elements. Public neuronx-cc verifier errors for the same rules:
# github.com/aws-neuron/aws-neuron-sdk/issues/600 (start partition), /859 (48 partitions from 32),
# /284 (step -48528 < -32768). DMA is not checked here: the compiler turns a dma_copy into lists of
# contiguous DMA buffers (trainium_inferentia2_arch.rst "Data movement between HBM and SBUF using
# DMAs"), not into an engine access pattern.
AP_MAX_FREE_DIMS = 4
AP_SIZE_MAX = 2 ** 16 - 1                 # uint16
AP_STRIDE_MIN, AP_STRIDE_MAX = -2 ** 15, 2 ** 15 - 1   # int16


def start_partitions(n):
    """Partitions an operand spanning n partitions may start at."""
    return (0,) if n > 64 else (0, 64) if n > 32 else (0, 32, 64, 96)


def start_partition(t):
    """The partition an on-chip view starts at."""
    return t.offset // t._alloc.row_elems


def free_pattern(t):
    """The free [stride, size] pairs an engine gets for view t: size-1 dims dropped, and a dim merged
    with the next inner one where the two are contiguous with each other (and the size stays uint16)."""
    dims = []
    for s, n in zip(t.strides[1:], t.shape[1:]):
        if n == 1:
            continue
        if dims and dims[-1][0] == s * n and dims[-1][1] * n <= AP_SIZE_MAX:
            dims[-1] = [s, dims[-1][1] * n]
        else:
            dims.append([s, n])
    return dims


def engine_access_pattern(t, where, arg):
    start = start_partition(t)
    if start not in start_partitions(t.partitions):
        raise rule_error("ap-start-partition", where,
                         f"{arg} spans {t.partitions} partitions from partition {start}; an operand of "
                         f"{t.partitions} partitions must start at partition {start_partitions(t.partitions)}")
    pattern = free_pattern(t)
    if len(pattern) > AP_MAX_FREE_DIMS:
        raise rule_error("ap-free-dims", where, f"{arg} has {len(pattern)} free dims {pattern} ([stride, size] after "
                                                f"merging contiguous dims); an engine access pattern has at most "
                                                f"{AP_MAX_FREE_DIMS}")
    for s, n in pattern:
        if n > AP_SIZE_MAX:
            raise rule_error("ap-size", where, f"{arg} has a free dim of {n} elements; an access pattern size is a "
                                               f"uint16 (at most {AP_SIZE_MAX})")
        if not AP_STRIDE_MIN <= s <= AP_STRIDE_MAX:
            raise rule_error("ap-stride", where, f"{arg} has a free stride of {s} elements; an access pattern stride is "
                                                 f"an int16 ({AP_STRIDE_MIN}..{AP_STRIDE_MAX})")


def check_dst(t, where):
    steps = list(zip(t.strides, t.shape))
    if t.is_indirect() and t._indirect.vector:   # its partition step is ignored: each partition has its row
        steps = steps[1:]
    if any(s == 0 and n > 1 for s, n in steps):
        raise rule_error("dst-broadcast", where, f"dst {t!r} has a stride-0 (broadcast) dim; it must address distinct elements")
    return t


def psum_whole_words(t, where):
    """A sub-word (bf16, fp8, ...) TensorE write to PSUM must start on a 4-byte word of each partition.

    PSUM is organised in 4-byte elements (trainium_inferentia2_arch.rst "Near-memory accumulation
    in PSUM": read-accumulate-write "to every 4B element"). The neuronx-cc backend verifier rejects a
    write of narrower elements at a per-partition byte offset that is not a multiple of 4, e.g. bf16
    nc_transposes of [P, 1] tiles packed side by side in one PSUM tile (2-byte offsets; a compile
    error reported to this project, no public doc states the rule). The size need not be a multiple
    of 4: the NKI library pads only the offset (LIB core/subkernels/norm_tkg_utils.py,
    _PSUM_ALIGNMENT_BYTES) and writes 2 bytes per partition at one token in kernels whose tests
    carry hardware cycle counts (LIB test_mlp_tkg.py). A strided write is held to the rule run by run.
    The evidence is TensorE writes only: VectorE and ScalarE read and write PSUM like a regular SRAM
    (trainium_inferentia2_arch.rst, 'Near-memory accumulation in PSUM'), so their writes are not held to it.
    """
    if t.dtype.itemsize >= 4:
        return
    item = t.dtype.itemsize
    elems = np.unique(t.flat_indices()[0].ravel() % t._alloc.row_elems)    # one partition's elements
    starts = elems[np.concatenate(([True], np.diff(elems) != 1))]             # first element of each run
    bad = starts[(starts * item) % 4 != 0]
    if bad.size:
        raise rule_error("psum-subword-write", where,
                         f"dst {t!r} writes {t.dtype.name} elements starting at byte offset {int(bad[0]) * item} "
                         f"of a partition: PSUM is written in 4-byte words, so a write of elements narrower than "
                         f"4 bytes must start on a word (byte offset a multiple of 4); stage it through fp32 PSUM "
                         f"or pad the offset")


def same_start_partition(where, **inputs):
    """The SBUF inputs an ALU instruction combines element by element start on one partition.

    Each engine lane reads one partition of every input at once; the engine can move data across
    partitions only between an input and the output (trainium_inferentia2_arch.rst, 'Cross-Partition
    Connectivity'). The NKI library copies an SBUF operand to partition 0 "for tensor_tensor base
    partition alignment" (LIB core/embeddings/rope.py, RoPE_sbuf) and writes the result to
    partitions 64.. from inputs on partitions 0.. . PSUM inputs are not compared: no public text
    states the rule for them, and the library adds the PSUM rows a column-tiled matmul wrote from
    partition 32 * f into an SBUF accumulator on partitions 0.. (LIB core/qkv/qkv_tkg.py
    _accumulate_psum_to_output, core/router_topk/router_topk.py, core/mlp/mlp_tkg/
    mlp_tkg_gate_up_projection.py). Scalar operands (Python numbers) have no partition.
    """
    starts = {arg: start_partition(t) for arg, t in inputs.items()
              if isinstance(t, NkiTensor) and not is_psum(t.buffer)}
    if len(set(starts.values())) > 1:
        raise rule_error("input-start-partition", where,
                         f"SBUF inputs start on different partitions {starts}; the SBUF inputs of one "
                         f"instruction must start on the same partition (copy one to the other's "
                         f"partitions first); dst and PSUM inputs may start elsewhere")


def same_layout(a, b, where, an, bn):
    if a.partitions != b.partitions or a.free_size != b.free_size:
        raise rule_error("operand-shape", where,
                         f"{an} and {bn} must have the same partitions and elements per partition, got "
                         f"{a.partitions}x{a.free_size} ({list(a.shape)}) and {b.partitions}x{b.free_size} ({list(b.shape)})")


def no_gpsimd_psum(eng, tensors, where):
    if eng == "gpsimd" and any(is_psum(t.buffer) for t in tensors if isinstance(t, NkiTensor)):
        raise rule_error("gpsimd-psum", where, "GpSimd cannot access PSUM")


def fp32_rows(t):
    """fp32 values of an on-chip view as [partitions, elements per partition]."""
    return np.asarray(t.numpy(), dtype=F32).reshape(t.partitions, -1)


def cast_to(values, dtype):
    if is_float(dtype):
        return values.astype(dtype)
    info = np.iinfo(dtype)  # fp32 -> int: round to nearest even, saturate (as the hardware)
    # In float64: the int32 bounds are not fp32 numbers (fp32(2**31 - 1) == 2**31 would overflow the cast).
    wide = np.nan_to_num(np.asarray(values, dtype=np.float64))
    return np.clip(np.rint(wide), info.min, info.max).astype(dtype)


def write(dst, values, cast=True):
    out = dst.numpy()
    values = np.asarray(values).reshape(dst.shape)
    out[...] = cast_to(values, dst.dtype) if cast else values
    if is_psum(dst.buffer):
        dst._alloc.matmul_written[dst.flat_indices().ravel()] = False


def scalar_operand(x, data, where, arg, fp32=True):
    """A Python scalar, or a [P, 1] tile (fp32 where the instruction requires it) broadcast along the free dim."""
    if isinstance(x, NkiTensor):
        on_chip(x, where, arg)
        if x.partitions != data.partitions or x.free_size != 1:
            raise rule_error("scalar-operand", where,
                             f"{arg} must be a scalar or a [{data.partitions}, 1] tile, got {list(x.shape)}")
        if fp32 and x.dtype != DTYPES["float32"]:
            raise rule_error("scalar-operand", where, f"{arg} tile must be float32, got {x.dtype.name}")
        return fp32_rows(x)
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{where}: {arg} must be a number or an NkiTensor, got {type(x).__name__}")
    return F32(x)


def engine_name(e, where):
    return check_enum(e, "engine", where).name


def check_op(op, where, arg, act=False):
    if not isinstance(op, Op):
        raise TypeError(f"{where}: {arg} must be an nl operator such as nl.add, got {op!r}")
    if op.name == "divide":
        raise rule_error("no-divide", where, "there is no divide ALU op on the hardware; multiply by nisa.reciprocal")
    if act and not op.act:
        raise rule_error("activation-function", where, f"{arg}={op!r} is not a ScalarE activation function")
    if not act and not op.alu:
        raise rule_error("alu-op", where, f"{arg}={op!r} is not an ALU operator")
    if not act and op.name in TRN3_ALU_OPS:
        raise rule_error("alu-op", where, f"{arg}={op!r} is an ALU operator on trn3 only; on trn2 use "
                                          f"nisa.activation(op={op!r})")
    return op


# Unary ALU ops the Vector/GpSimd engines have only from NeuronCore-v4 (trn3) on
# (SDK nki/api/nki.api.shared.rst, 'Supported Math Operators for NKI ISA').
TRN3_ALU_OPS = {"square", "relu"}


def bitvec_dtypes(op, tensors, where):
    """Bitvec operators treat elements as bit patterns: every operand must be an integer tile."""
    bad = [t for t in tensors if is_float(t.dtype)]
    if bad:
        raise rule_error("bitvec-dtype", where, f"bitvec operator {op!r} needs integer tiles, got "
                                               f"{sorted({t.dtype.name for t in bad})}")


def apply_op(op, x, operand, reverse):
    if op.unary:
        return op.fn(x)
    return op.fn(operand, x) if reverse else op.fn(x, operand)


def record(opcode, eng, reads, writes, **args):
    """Record an instruction; its reads and writes are tensor views, or Accesses already made."""
    ins = current_run(f"nisa.{opcode}").record(eng, opcode, [access(t) for t in reads],
                                               [access(t) for t in writes], **args)
    return NkiInstruction(ins)


def access(t):
    return t if isinstance(t, Access) else access_of(t)


def check_placement(dst, stationary, moving, tile_position, tile_size, where):
    """Where a matmul's operands and result sit must match the PE array tile it runs on.

    SBUF partition p feeds PE row p (trainium2_arch.rst: "each partition feeding data into each row
    of processing elements"), so stationary and moving start on one partition, inside the tile's
    rows; PE column c writes PSUM partition c (the free axis of the stationary becomes the partition
    axis of the output, trainium_inferentia2_arch.rst), so dst starts at the tile's first column, 0
    without tiling. The NKI library places them so (LIB core/qkv/qkv_tkg.py, core/router_topk/
    router_topk.py and core/mlp/mlp_tkg: column tile c0 writes dst rows c0 .. c0 + T).
    """
    (r0, c0), rows = (tile_position, tile_size[0]) if tile_size else ((0, 0), PMAX)
    s0, m0, d0 = start_partition(stationary), start_partition(moving), start_partition(dst)
    if s0 != m0:
        raise rule_error("matmul-placement", where, f"stationary starts at partition {s0} and moving at {m0}; "
                                                    f"partition p feeds PE row p, so both start on one partition")
    if not (r0 <= s0 and s0 + stationary.partitions <= r0 + rows):
        raise rule_error("matmul-placement", where,
                         f"stationary and moving sit on partitions {s0}..{s0 + stationary.partitions - 1}, outside "
                         f"the PE rows {r0}..{r0 + rows - 1} of tile_position {tuple(tile_position)}, tile_size "
                         f"{tuple(tile_size)}: partition p feeds PE row p")
    if d0 != c0:
        raise rule_error("matmul-placement", where,
                         f"dst starts at PSUM partition {d0}; PE column c writes PSUM partition c, so dst must "
                         f"start at the tile's first column {c0}"
                         + ("" if tile_size else " (no tiling: the whole array)"))


def psum_bank_span(t):
    """First and last byte (per partition) a PSUM view touches, from the start of its allocation's first bank."""
    a = t._alloc
    item = a.dtype.itemsize
    first = t.offset % a.row_elems
    last = first + sum((n - 1) * s for n, s in zip(t.shape[1:], t.strides[1:]))
    return first * item, last * item + item - 1


def one_psum_bank(dst, where):
    """A TensorE output stays within one 2 KiB PSUM bank of each partition."""
    lo, hi = psum_bank_span(dst)
    if lo // PSUM_BANK_BYTES != hi // PSUM_BANK_BYTES:
        raise rule_error("psum-bank", where, f"dst spans bytes {lo}..{hi} of a partition; a TensorE output must "
                                             f"stay within one 2 KiB PSUM bank")


def binary_operands(where, dst, a, b, an, bn):
    """dst and the two tile inputs a, b (named an, bn) of an element-wise instruction: all three on
    chip, a and b with one layout and dst with a's, and not both inputs in PSUM (the tensor_tensor
    docs; scalar_tensor_tensor and tensor_tensor_scan read theirs the same way)."""
    for t, arg in ((dst, "dst"), (a, an), (b, bn)):
        on_chip(t, where, arg)
    same_layout(a, b, where, an, bn)
    same_layout(dst, a, where, "dst", an)
    if is_psum(a.buffer) and is_psum(b.buffer):
        raise rule_error("psum-operands", where, f"{an} and {bn} cannot both be in PSUM")


def matmul_buffers(where, dst, stationary, moving):
    """A TensorE matmul (and its transpose mode) reads SBUF and writes PSUM (the nc_matmul docs)."""
    if not (is_sbuf(stationary.buffer) and is_sbuf(moving.buffer)):
        raise rule_error("matmul-inputs-sbuf", where, f"stationary and moving must be in SBUF, got "
                                                      f"{stationary.buffer.name} and {moving.buffer.name}")
    if not is_psum(dst.buffer):
        raise rule_error("matmul-dst-psum", where, f"dst must be a PSUM tile, got {dst.buffer.name}")
