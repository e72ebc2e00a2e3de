"""What one instruction costs on a trn2 NeuronCore (NeuronCore-v3): the constants and the formulas.

Every number the cost model uses is a row of `TABLE`, with its unit and where it comes from: a
Neuron documentation page (`doc:` paths are relative to the aws-neuron/aws-neuron-sdk repository,
release 2.32) or, where the documentation is silent, `estimate:` and the reasoning. The formulas
below turn an `Instruction` from the nkicpu record into engine time (compute engines) or into the
work a DMA transfer puts on the core's DMA engines. *When* each instruction runs is decided by
`nkicpu.schedule`; this module only says how long it takes.

The rule for compute engines, from the architecture guides: a fixed cost per instruction (the
static overhead or minimum initiation interval) plus a cost per element of one partition, because
all partitions (lanes) work in parallel. For TensorE, the documented initiation interval of a
matmul. For DMA, a fixed latency plus bytes over bandwidth, where each descriptor (one contiguous
chunk) costs at least as much engine time as a ~2.4 KiB chunk would.
"""
import math
from dataclasses import dataclass

from .record import Access, Instruction


@dataclass(frozen=True)
class Constant:
    name: str
    value: float
    unit: str
    source: str


TABLE = []


def _const(name, value, unit, source):
    TABLE.append(Constant(name, value, unit, source))
    return value


ARCH2 = "doc: nki/guides/architecture/trainium2_arch.rst"
ARCH1 = "doc: nki/guides/architecture/trainium_inferentia2_arch.rst"
SHARED = "doc: nki/api/nki.api.shared.rst"
DMA_BW = "doc: nki/deep-dives/nki-dma-bandwidth-guide.rst"
DMA_OVERVIEW = "doc: nki/get-started/about/nki-dma-overview.rst"

# -- clocks ------------------------------------------------------------------------------------
TENSOR_GHZ = _const("TENSOR_GHZ", 2.4, "GHz", f"{ARCH2}, table 'Compute Engine Specifications'")
VECTOR_GHZ = _const("VECTOR_GHZ", 0.96, "GHz", f"{ARCH2}, table 'Compute Engine Specifications'")
SCALAR_GHZ = _const("SCALAR_GHZ", 1.2, "GHz", f"{ARCH2}, table 'Compute Engine Specifications'")
GPSIMD_GHZ = _const("GPSIMD_GHZ", 1.2, "GHz", f"{ARCH2}, table 'Compute Engine Specifications'")

# -- TensorE -----------------------------------------------------------------------------------
MM_INIT_CYCLES = _const(
    "MM_INIT_CYCLES", 64, "TensorE cycles",
    f"{ARCH1}, 'Tensor Engine' Cost Model: MultiplyMoving initiation interval max(N, MM_INIT_LATENCY), "
    "64 cycles on NeuronCore-v2; assumed unchanged on v3")
MM_COLUMNS_PER_CYCLE = _const(
    "MM_COLUMNS_PER_CYCLE", 1, "moving columns / TensorE cycle",
    f"{ARCH1}, 'Tensor Engine' Cost Model (interval ~N cycles for N moving columns); consistent with "
    "79 BF16 TFLOPS = 128 x 128 x 2 x 2.4 GHz (doc: about-neuron/arch/neuron-hardware/neuron-core-v3.rst)")
LOAD_STATIONARY_SPEEDUP = _const(
    "LOAD_STATIONARY_SPEEDUP", 4, "x faster than MultiplyMoving",
    f"{ARCH1}, 'Fast LoadStationary': 'up to 4x faster than a MultiplyMoving with the same free axis "
    "size'; taken as exactly 4x")
MATMUL_FP32_FACTOR = _const(
    "MATMUL_FP32_FACTOR", 4, "x",
    f"{ARCH1}, 'Tensor Engine' Cost Model: fp32 inputs cost roughly 4x bf16/fp16/tf32/fp8")
TRANSPOSE_FP32_FACTOR = _const(
    "TRANSPOSE_FP32_FACTOR", 2, "x",
    f"{ARCH2}, 'Built-in Transpose Support': transpose mode is 2x faster for fp32 than a fp32 matmul "
    "(4x / 2)")

# -- VectorE -----------------------------------------------------------------------------------
VECTOR_FIXED_CYCLES = _const(
    "VECTOR_FIXED_CYCLES", 100, "VectorE cycles / instruction",
    f"{ARCH1}, 'Vector Engine' Cost Model: static instruction overhead of 100 engine cycles; "
    "doc: nki/deep-dives/nki_perf_guide.rst (~100 cycles)")
VECTOR_ELEMS_PER_CYCLE = _const(
    "VECTOR_ELEMS_PER_CYCLE", 1, "elements / cycle / partition / input",
    f"{ARCH1}, 'Vector Engine' Cost Model: one input ~N cycles, two inputs ~2N cycles. (The trn2 "
    "datapath row '256 input/output for other data types' would allow 2 for fp32; the perf-mode "
    "text says only bf16/fp16 speed up over v2, so fp32 stays at 1)")
VECTOR_PERF_MODE_FAST = _const(
    "VECTOR_PERF_MODE_FAST", 4, "x",
    f"{ARCH2}, 'Vector Engine Performance Mode': tensor_copy/tensor_scalar, bf16/fp16 in and out, "
    "all in SBUF, contiguous innermost dim")
VECTOR_PERF_MODE_HALF = _const(
    "VECTOR_PERF_MODE_HALF", 2, "x",
    f"{ARCH2}, 'Vector Engine Performance Mode': tensor_copy/tensor_scalar bf16/fp16 with a strided "
    "innermost dim or one operand in PSUM; tensor_tensor bf16/fp16 with both inputs in SBUF")
VECTOR_RECIPROCAL_CYCLES = _const(
    "VECTOR_RECIPROCAL_CYCLES", 8, "VectorE cycles / element / partition",
    f"{SHARED}, 'NKI Engine Selection': nisa.reciprocal costs max(MIN_II, 8N) VectorE cycles")

# -- ScalarE -----------------------------------------------------------------------------------
SCALAR_FIXED_CYCLES = _const(
    "SCALAR_FIXED_CYCLES", 64, "ScalarE cycles / instruction",
    f"{SHARED}, 'NKI Engine Selection': MIN_II, the minimum initiation interval, roughly 64 cycles")
SCALAR_ELEMS_PER_CYCLE = _const(
    "SCALAR_ELEMS_PER_CYCLE", 1, "elements / cycle / partition",
    f"{ARCH2}, 'Compute Engine Specifications' (128 elements/cycle over 128 partitions); "
    f"{SHARED} (activation costs max(MIN_II, N) cycles)")
SCALAR_READ_ACCUMULATOR_CYCLES = _const(
    "SCALAR_READ_ACCUMULATOR_CYCLES", 64, "ScalarE cycles",
    f"{ARCH1}, 'Scalar Engine': reading the reduce registers into reduce_res is an extra "
    "ActReadAccumulator instruction of roughly 64 cycles (NeuronCore-v2)")

# -- GpSimd ------------------------------------------------------------------------------------
GPSIMD_FIXED_CYCLES = _const(
    "GPSIMD_FIXED_CYCLES", 100, "GpSimd cycles / instruction",
    "estimate: nki/guides/architecture/trainium_inferentia2_arch.rst ('GpSimd Engine' Cost Model) gives "
    "no rule of thumb for GpSimd; we take VectorE's static overhead")
GPSIMD_ELEMS_PER_CYCLE = _const(
    "GPSIMD_ELEMS_PER_CYCLE", 1, "elements / cycle / partition",
    f"{ARCH1}, 'GpSimd Engine': each processor reads 512 bits/cycle from its 16 partitions (32 bits "
    "per partition per cycle), i.e. one 32-bit element per partition per cycle")
GPSIMD_RSQRT_CYCLES = _const(
    "GPSIMD_RSQRT_CYCLES", 4, "GpSimd cycles / element / partition",
    f"{SHARED}, 'NKI Engine Selection': GpSimd rsqrt throughput is 4x lower than ScalarE's")

# -- DMA ---------------------------------------------------------------------------------------
DMA_ENGINES = _const("DMA_ENGINES", 16, "DMA engines / NeuronCore", f"{DMA_BW}, table; {DMA_OVERVIEW}")
DMA_ENGINE_BYTES_PER_NS = _const("DMA_ENGINE_BYTES_PER_NS", 23, "B/ns per DMA engine",
                                 f"{DMA_BW}, table (TRN2 23 B/ns x 16 = 368 GB/s)")
DMA_PARTITIONS_PER_ENGINE = _const(
    "DMA_PARTITIONS_PER_ENGINE", 8, "SBUF partitions / DMA engine",
    f"{DMA_OVERVIEW}, 'Performance Considerations': each engine moves eight partitions, so a "
    "transfer over P partitions uses ceil(P/8) engines (its [4, 4096] example uses one)")
DMA_FIXED_US = _const(
    "DMA_FIXED_US", 1.3, "us / transfer",
    f"{DMA_BW}, 'Why Large Contiguous DMA Payloads Are Required': descriptor setup, synchronization "
    "and semaphore-to-start latency ~1300 ns per transfer. Modeled as latency: it delays the "
    "transfer but uses no bandwidth, so transfers queued back to back overlap it")
DMA_DESCRIPTOR_BYTES = _const(
    "DMA_DESCRIPTOR_BYTES", 2450, "B of engine time / descriptor (minimum)",
    "estimate: read off the figure in doc: nki/get-started/about/nki-dma-overview.rst "
    "(nki/img/overviews/nki-dma-intro-1.jpg, throughput vs bytes per partition at 128 partitions): "
    "throughput grows in proportion to bytes per partition up to ~2.4 KiB (512 B: 21%, 1 KiB: 42%, "
    "2 KiB: 81%, 4 KiB: 97% of the 32 KiB value), i.e. each contiguous chunk costs at least "
    "~2450 B / 23 B/ns = 107 ns of engine time; " + DMA_BW + " gives the same thresholds in words")
DMA_QUEUES = _const(
    "DMA_QUEUES", 4, "queues",
    "estimate: the compiler spreads dma_copy calls over a few queues (tied to the trigger engine: "
    f"SyncE, ScalarE, GpSimd; {DMA_OVERVIEW}, 'DMA Queues'); we use 4 in-order queues, round-robin")
HBM_ROOFLINE_GBPS = _const(
    "HBM_ROOFLINE_GBPS", DMA_ENGINES * DMA_ENGINE_BYTES_PER_NS, "GB/s per NeuronCore",
    f"{DMA_BW}: 16 engines x 23 B/ns = 368 GB/s, all a core's DMA engines can move; the chip's "
    "2.9 TB/s HBM (doc: about-neuron/arch/neuron-hardware/trainium2.rst) over 8 cores is 362 GB/s, "
    "within 2%. The DMA model shares exactly this bandwidth, so no modeled time is below the roofline")

BYTES_PER_US = HBM_ROOFLINE_GBPS * 1e3          # GB/s -> bytes per microsecond
ENGINE_BYTES_PER_US = DMA_ENGINE_BYTES_PER_NS * 1e3

_GHZ = {"tensor": TENSOR_GHZ, "vector": VECTOR_GHZ, "scalar": SCALAR_GHZ, "gpsimd": GPSIMD_GHZ}
_HALF_PRECISION = {"bfloat16", "float16"}


# -- compute engines ---------------------------------------------------------------------------

def _tensor_cycles(ins):
    """LoadStationary runs in the background of the previous MultiplyMoving, so a matmul costs the
    larger of the two (the architecture guide's 'bounded by either LS or MM')."""
    if ins.opcode == "nc_transpose":  # a matmul of data (stationary) against an identity (moving)
        data = ins.reads[0]
        stationary_free, moving_free = data.free_elements, data.partitions
        factor = TRANSPOSE_FP32_FACTOR if data.dtype == "float32" else 1
    else:
        stationary, moving = ins.reads[0], ins.reads[1]
        stationary_free = stationary.free_elements
        moving_free = moving.free_elements
        factor = MATMUL_FP32_FACTOR if moving.dtype == "float32" else 1
    multiply_moving = max(moving_free / MM_COLUMNS_PER_CYCLE, MM_INIT_CYCLES)
    load_stationary = stationary_free / (MM_COLUMNS_PER_CYCLE * LOAD_STATIONARY_SPEEDUP)
    return factor * max(multiply_moving, load_stationary)


def _perf_mode(ins):
    """VectorE performance-mode speedup for bf16/fp16 data (trainium2_arch.rst)."""
    data = ins.reads[:2] if ins.opcode == "tensor_tensor" else ins.reads[:1]
    operands = data + ins.writes[:1]
    if not operands or any(a.dtype not in _HALF_PRECISION for a in operands):
        return 1
    in_psum = [a.buffer == "psum" for a in operands]
    if ins.opcode == "tensor_tensor":
        return VECTOR_PERF_MODE_HALF if not any(in_psum[:2]) else 1
    if ins.opcode in ("tensor_copy", "tensor_scalar"):
        contiguous = all(_innermost_contiguous(a) for a in operands)
        if contiguous and not any(in_psum):
            return VECTOR_PERF_MODE_FAST
        if (not contiguous and not any(in_psum)) or (contiguous and sum(in_psum) == 1):
            return VECTOR_PERF_MODE_HALF
    return 1


def _vector_cycles(ins):
    n = ins.free_elements
    if ins.opcode == "reciprocal":
        per_element = VECTOR_RECIPROCAL_CYCLES
    else:
        inputs = 2 if ins.opcode in ("tensor_tensor", "scalar_tensor_tensor") else 1
        per_element = inputs / (VECTOR_ELEMS_PER_CYCLE * _perf_mode(ins))
    return VECTOR_FIXED_CYCLES + per_element * n


def _scalar_cycles(ins):
    extra = SCALAR_READ_ACCUMULATOR_CYCLES if ins.args.get("reads_out_regs") else 0
    return SCALAR_FIXED_CYCLES + ins.free_elements / SCALAR_ELEMS_PER_CYCLE + extra


def _gpsimd_cycles(ins):
    n = ins.free_elements
    if ins.opcode == "tensor_scalar":  # on GpSimd only for rsqrt
        per_element = GPSIMD_RSQRT_CYCLES
    else:
        per_element = (2 if ins.opcode == "tensor_tensor" else 1) / GPSIMD_ELEMS_PER_CYCLE
    return GPSIMD_FIXED_CYCLES + per_element * n


_CYCLES = {"tensor": _tensor_cycles, "vector": _vector_cycles, "scalar": _scalar_cycles, "gpsimd": _gpsimd_cycles}


def engine_us(ins: Instruction):
    """How long a compute-engine instruction keeps its engine busy, in microseconds."""
    return _CYCLES[ins.engine](ins) / (_GHZ[ins.engine] * 1e3)


# -- DMA ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """The work one DMA puts on the DMA engines.

    bytes: what it moves (the larger side, if it converts dtypes).
    work_bytes: engine time in bytes at full speed: at least the bytes moved (twice for HBM to
        HBM, which crosses the HBM interface twice) and at least DMA_DESCRIPTOR_BYTES per chunk.
    max_bytes_per_us: the most this transfer can get: 23 B/ns on each engine it spreads over.
    latency_us: fixed latency before data moves.
    descriptors: contiguous chunks; engines: DMA engines it spreads over.
    """
    bytes: int
    work_bytes: float
    max_bytes_per_us: float
    latency_us: float
    descriptors: int
    engines: int


def is_hbm(access: Access):
    return access.buffer in ("private_hbm", "shared_hbm")


def hbm_bytes(ins: Instruction):
    """(read, written) HBM bytes of one DMA instruction."""
    read = sum(a.nbytes for a in ins.reads if is_hbm(a))
    written = sum(a.nbytes for a in ins.writes if is_hbm(a))
    return read, written


def _contiguous_run(a: Access):
    """Elements in each contiguous chunk of an access (never across SBUF partitions)."""
    dims = [(s, n) for s, n in a.pattern if n > 1]
    if a.on_chip and a.pattern[0][1] > 1:
        dims = dims[1:]  # a partition is its own address range
    run = 1
    for stride, count in reversed(dims):
        if stride != run:
            break
        run *= count
    return run


def _innermost_contiguous(a: Access):
    free = [(s, n) for s, n in a.pattern[1:] if n > 1]
    return not free or free[-1][0] == 1


def _descriptors(src: Access, dst: Access):
    """Chunks a transfer breaks into: a chunk ends where either side's contiguous run ends."""
    n = src.elements
    rs, rd = _contiguous_run(src), _contiguous_run(dst)
    return n // rs + n // rd - n // math.lcm(rs, rd)


def transfer(ins: Instruction) -> Transfer:
    """What a dma_copy costs (see `Transfer`)."""
    src, dst = ins.reads[0], ins.writes[0]
    moved = max(src.nbytes, dst.nbytes)
    read, written = hbm_bytes(ins)
    descriptors = _descriptors(src, dst)
    work = max(moved, read + written, descriptors * DMA_DESCRIPTOR_BYTES)
    partitions = max([a.partitions for a in (src, dst) if a.on_chip], default=None)
    if partitions is None:  # HBM to HBM: estimate that the compiler spreads it over all engines
        engines = DMA_ENGINES
    else:
        engines = min(DMA_ENGINES, math.ceil(partitions / DMA_PARTITIONS_PER_ENGINE))
    return Transfer(bytes=moved, work_bytes=work, max_bytes_per_us=engines * ENGINE_BYTES_PER_US,
                    latency_us=DMA_FIXED_US, descriptors=descriptors, engines=engines)
