"""What one instruction costs on a trn2 NeuronCore (NeuronCore-v3): the constants and the formulas.

Every number the cost model uses is a row of `TABLE`: its unit, where it comes from, which
estimate uses it, and where public trn2 measurements disagree with it. A source is a Neuron
documentation page (`doc:` paths are relative to the aws-neuron/aws-neuron-sdk repository, release
2.32), a public trn2 measurement (`measured:`), or, where both are silent, `estimate:` and the
reasoning.

The model gives two estimates, a band:

* `BEST`: the documented peak figures, read optimistically (LoadStationary hidden behind the
  previous matmul, DMA at 368 GB/s per core, no ScalarE table loads, no semaphore latency).
* `LIKELY`: calibrated against public trn2 measurements (the activation-table switch, the TensorE
  per-instruction floor, LoadStationary ~K cycles, the semaphore hand-offs, the achieved DMA rate).

A row's `band` says which estimate uses it: "both", "best", "likely", or "launch" (the standalone
launch preamble and epilogue, which a profile reports apart from the kernel's time). Each LIKELY
cost is at least its BEST counterpart, so the LIKELY time is not below the BEST one (the tests
check it on random instruction streams), and the BEST time is never below the HBM roofline
(bytes / 368 GB/s per core), by construction.

The formulas below turn an `Instruction` from the nkicpu record into engine time (compute engines)
or into the work a DMA transfer puts on the core's DMA engines. *When* each instruction runs is
decided by `nkicpu.schedule`; this module only says how long it takes.
"""
import math
from dataclasses import dataclass

from .errors import not_modeled
from .record import Access, Instruction

BEST, LIKELY = "best", "likely"
BANDS = (BEST, LIKELY)


@dataclass(frozen=True)
class Constant:
    name: str
    value: float
    unit: str
    source: str
    band: str               # "both", "best", "likely" or "launch"
    disagreement: str       # where public trn2 measurements disagree ("" if none is known)


TABLE = []


def _const(name, value, unit, source, band="both", disagreement=""):
    TABLE.append(Constant(name, value, unit, source, band, disagreement))
    return value


ARCH2 = "doc: nki/guides/architecture/trainium2_arch.rst"
ARCH1 = "doc: nki/guides/architecture/trainium_inferentia2_arch.rst"
SHARED = "doc: nki/api/nki.api.shared.rst"
DMA_BW = "doc: nki/deep-dives/nki-dma-bandwidth-guide.rst"
DMA_OVERVIEW = "doc: nki/get-started/about/nki-dma-overview.rst"
# Public trn2 captures (neuron-explorer) of a Qwen3.6 DeltaNet decode layer, the same block this
# project builds: per-instruction and per-DMA figures read off real profiles.
DELTANET_REF = "github.com/KevGomes1403/nki-moe-megakernel, nki_kernels/specs/deltanet_decode_opt.md (commit 0d4ef9a)"
DELTANET_LOG = f"measured: {DELTANET_REF}, trn2 neuron-explorer captures of a DeltaNet decode layer"
DELTANET = "nki-moe-megakernel deltanet_decode_opt.md"   # the same source, named again in a row

# -- clocks ------------------------------------------------------------------------------------
TENSOR_GHZ = _const("TENSOR_GHZ", 2.4, "GHz", f"{ARCH2}, table 'Compute Engine Specifications'",
                    disagreement="a capture under the hardware's utilization throttle ran matmuls 1.69x slower "
                                 f"(592 ns unthrottled, 1001 ns throttled; {DELTANET}); not modeled")
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
    "size', and it runs in the background of the previous MultiplyMoving, so a matmul costs the larger "
    "of the two; taken as exactly 4x", band=BEST,
    disagreement=f"measured matmuls cost (K + N) cycles per pass, LoadStationary not hidden ({DELTANET}): "
                 "2 x (128 + 512) cycles = 533 ns at 2.4 GHz for its fp32 in_proj matmuls, 592 ns measured "
                 "unthrottled (the measured matmul's shape is inferred)")
LOAD_STATIONARY_CYCLES_PER_ROW = _const(
    "LOAD_STATIONARY_CYCLES_PER_ROW", 1, "TensorE cycles / contraction row",
    f"{DELTANET_LOG}: 'the in_proj PE cost model (validated to 0.3%)' charges 128 + N cycles per matmul "
    "pass and 'LDWEIGHTS ... 128 rows' each; so LoadStationary takes ~K cycles (K = contraction rows) "
    "and adds to MultiplyMoving", band=LIKELY,
    disagreement=f"{ARCH1[5:]} says LoadStationary is up to 4x faster than MultiplyMoving and hidden "
                 "behind the previous one")
MATMUL_FP32_PASSES = _const(
    "MATMUL_FP32_PASSES", 2, "passes (LoadStationary + MultiplyMoving each)",
    f"{DELTANET_LOG}: 'Every fp32 nc_matmul lowers to 2 LDWEIGHTS + 2 MATMUL' (fp32_mode LOW_HIGH); "
    "nc_transpose is single-pass, fp32 too (the transpose mode is '2x faster for fp32', "
    f"{ARCH2[5:]}, 'Built-in Transpose Support')",
    disagreement=f"{ARCH1[5:]}, 'Tensor Engine' Cost Model: fp32 inputs cost roughly 4x bf16; 20 vs 79 "
                 "TFLOPS on NeuronCore-v3 (neuron-core-v3.rst) also reads as 4x")
TENSOR_FLOOR_US = _const(
    "TENSOR_FLOOR_US", 0.14, "us / TensorE instruction (minimum)",
    f"{DELTANET_LOG}: 'the measured per-instruction floor (~140 ns)' of TensorE instructions, measured "
    "on fp32 decode matmuls (B = 2 columns) of 2 passes each (MATMUL_FP32_PASSES). No public source "
    "gives a floor for single-pass instructions (bf16 matmuls, nc_transpose), so for them it is a "
    "band: BEST no floor beyond MM_INIT_CYCLES (64 cycles = 27 ns), LIKELY this fp32 figure unchanged "
    "(the conservative end; a bf16 matmul may well be faster)", band=LIKELY,
    disagreement="the documentation gives only MM_INIT_LATENCY, 64 cycles = 27 ns at 2.4 GHz; the same "
                 f"source prices 512 added fp32 instructions at 25-38 us, 49-74 ns each ({DELTANET})")

# -- VectorE -----------------------------------------------------------------------------------
VECTOR_FIXED_CYCLES = _const(
    "VECTOR_FIXED_CYCLES", 100, "VectorE cycles / instruction",
    f"{ARCH1}, 'Vector Engine' Cost Model: static instruction overhead of 100 engine cycles; "
    "doc: nki/deep-dives/nki_perf_guide.rst (~100 cycles)")
VECTOR_ELEMS_PER_CYCLE = _const(
    "VECTOR_ELEMS_PER_CYCLE", 1, "elements / cycle / partition / input",
    f"{ARCH1}, 'Vector Engine' Cost Model: one input ~N cycles, two inputs ~2N cycles. (The trn2 "
    "datapath row '256 input/output for other data types' would allow 2 for fp32; the perf-mode "
    "text says only bf16/fp16 speed up over v2, so fp32 stays at 1)",
    disagreement=f"agrees: [128, 512] and [1, 512] VectorE ops measured ~685 ns ({DELTANET}); "
                 "the model gives (100 + 512) / 0.96 GHz = 638 ns for a one-input fp32 op")
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
ACT_TABLE_SWITCH_US = _const(
    "ACT_TABLE_SWITCH_US", 1.283, "us / ScalarE function-table load",
    f"{DELTANET_LOG}: 'Activation table map: t0={{COPY,SQUARE,RECIPROCAL_SQRT}}, t1=SIGMOID, t2=SILU, "
    "t3=EXP, t4=SOFTPLUS. A swap costs 1283 ns', 'exactly 1283 ns whether throttled or not'. Charged "
    "when a ScalarE instruction needs another table than the one loaded (see ACT_TABLES)", band=LIKELY,
    disagreement=f"the documentation gives no table-switch cost ({SHARED}, 'nki-act-func', gives "
                 "only valid input ranges)")

# The function tables of ScalarE, from the measured map in ACT_TABLE_SWITCH_US's source. ScalarE
# tensor_copy and tensor_scalar (multiply/add) run the identity function, counted with copy
# (estimate). A function outside the map (tanh, gelu, log, ...) is taken to need a table of its own,
# so a change to or from it always pays a switch (estimate: the conservative choice).
ACT_TABLES = {"copy": "copy/square/rsqrt", "square": "copy/square/rsqrt", "rsqrt": "copy/square/rsqrt",
              "sigmoid": "sigmoid", "silu": "silu", "exp": "exp", "softplus": "softplus"}

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

# -- synchronisation -----------------------------------------------------------------------------
SEMAPHORE_US = _const(
    "SEMAPHORE_US", 0.2, "us / cross-engine wait",
    f"{DELTANET_LOG}: a consumer's EVENT_SEMAPHORE blocks 243 / 197 ns after its producer's transfer. "
    "Charged when a compute instruction waits for a producer on another engine or DMA queue (a DMA's "
    "wait is inside DMA_FIXED_US)", band=LIKELY,
    disagreement="the documentation gives no compute-to-compute semaphore latency; its one figure is "
                 "DMA_FIXED_US")
CORE_BARRIER_US = _const(
    "CORE_BARRIER_US", 0.35, "us / core_barrier round (cross-core hand-off)",
    "estimate: a core_barrier is a remote semaphore update to the other core and a local semaphore wait "
    "(doc: nki/api/nki/isa/__init__.py, core_barrier); no public source times one. SEMAPHORE_US measures a "
    "hand-off between two engines of one core, not across cores. The one public cross-core figure is a "
    f"4 KiB sendrecv transfer between the two cores of an LNC=2 launch, 354 ns end to end ({DELTANET}), "
    "which also ends in a semaphore update on the receiving core; its 4 KiB take ~15 ns of it at "
    "DMA_ACHIEVED_GBPS, so a hand-off without data is taken to cost about the same, 0.35 us. Charged from "
    "the start of the last core's k-th barrier to the end of every core's k-th barrier (nkicpu/schedule.py, "
    "rule 6)", band=LIKELY)

# -- DMA ---------------------------------------------------------------------------------------
DMA_ENGINES = _const("DMA_ENGINES", 16, "DMA engines / NeuronCore", f"{DMA_BW}, table; {DMA_OVERVIEW}")
DMA_ENGINE_BYTES_PER_NS = _const(
    "DMA_ENGINE_BYTES_PER_NS", 23, "B/ns per DMA engine", f"{DMA_BW}, table (TRN2 23 B/ns x 16 = 368 GB/s)",
    band=BEST, disagreement=f"{DMA_OVERVIEW[5:]} gives 27.2 GB/s per engine; see DMA_ACHIEVED_GBPS")
DMA_PARTITIONS_PER_ENGINE = _const(
    "DMA_PARTITIONS_PER_ENGINE", 8, "SBUF partitions / DMA engine",
    f"{DMA_OVERVIEW}, 'Performance Considerations': each engine moves eight partitions, so a "
    "transfer over P partitions uses ceil(P/8) engines (its [4, 4096] example uses one)")
DMA_FIXED_US = _const(
    "DMA_FIXED_US", 1.3, "us / transfer",
    f"{DMA_BW}, 'Why Large Contiguous DMA Payloads Are Required': descriptor setup, synchronization "
    "and semaphore-to-start latency ~1300 ns per transfer. Modeled as latency: it delays the "
    "transfer but uses no bandwidth, so transfers queued back to back overlap it",
    disagreement=f"a 4 KiB cross-core sendrecv transfer measured 354 ns ({DELTANET})")
DMA_DESCRIPTOR_BYTES = _const(
    "DMA_DESCRIPTOR_BYTES", 2450, "B of engine time / descriptor (minimum), runs < 512 B",
    "estimate: read off the figure in doc: nki/get-started/about/nki-dma-overview.rst "
    "(nki/img/overviews/nki-dma-intro-1.jpg, throughput vs bytes per partition at 128 partitions): "
    "throughput grows in proportion to bytes per partition up to ~2.4 KiB (512 B: 21%, 1 KiB: 42%, "
    "2 KiB: 81%, 4 KiB: 97% of the 32 KiB value), i.e. each contiguous chunk costs at least "
    "~2450 B / 23 B/ns = 107 ns of engine time; " + DMA_BW + " gives the same thresholds in words. "
    "Used for runs shorter than DMA_LONG_RUN_BYTES, where no trn2 measurement contradicts it",
    disagreement="trn2 streams of 512-1024 B runs measured 240 GB/s, 90% of the 4 KiB-run rate, where the "
                 f"figure gives 21-42% of peak ({DELTANET}); hence DMA_LONG_RUN_BYTES")
DMA_LONG_RUN_BYTES = _const(
    "DMA_LONG_RUN_BYTES", 512, "B per contiguous run",
    f"{DELTANET_LOG}: the shortest runs measured (512-1024 B) already move at 240 GB/s. From this run "
    "length on, a descriptor costs its bytes plus DMA_DESCRIPTOR_OVERHEAD_BYTES (LIKELY; nothing more in "
    "BEST) instead of DMA_DESCRIPTOR_BYTES. The step at 512 B is a model artifact: runs between 256 B "
    "and 512 B are unmeasured")
DMA_DESCRIPTOR_OVERHEAD_BYTES = _const(
    "DMA_DESCRIPTOR_OVERHEAD_BYTES", 76, "B of engine time / descriptor, runs >= 512 B",
    f"estimate: fit to {DELTANET_REF}: one 6.36 MB weight stream took 26.3 us as 10,240 descriptors "
    "(512-1024 B runs) and 23.9 us as 1,664 (4 KiB runs); span = bytes / R + descriptors x c gives "
    "c = 0.28 ns per descriptor and R = 271 GB/s, i.e. c x R = 76 B of engine time per descriptor",
    band=LIKELY)
DMA_ACHIEVED_GBPS = _const(
    "DMA_ACHIEVED_GBPS", 271, "GB/s per NeuronCore (all 16 engines)",
    "estimate: the descriptor-free rate R of the fit in DMA_DESCRIPTOR_OVERHEAD_BYTES; the measured "
    f"streams ran at 240 GB/s (512-1024 B runs) and 267 GB/s (4 KiB runs) ({DELTANET})",
    band=LIKELY, disagreement="368 GB/s peak (HBM_ROOFLINE_GBPS). Whole kernels ran slower: an LNC=2 DeltaNet "
                              "layer moved 17.19 MB (both cores) in 82-95 us of wall time including ~16 us of "
                              "launch preamble and epilogue, quoted as 181-211 GB/s; per core over the kernel "
                              f"body alone that is 17.19 MB / 2 / (66-79 us) = 109-130 GB/s ({DELTANET})")
DMA_QUEUES = _const(
    "DMA_QUEUES", 4, "queues",
    f"{DMA_OVERVIEW}, 'DMA Queues': a DMA's queue 'is typically tied to the trigger engine and the method "
    "of descriptor generation'; transfers in a queue run in order, different queues share the engines "
    "round robin. A kernel picks the trigger of a hardware-DGE DMA (dge_mode=hwdge, engine=sync or "
    "scalar; doc: nki/deep-dives/nki-dge.rst), and a software-DGE DMA is GpSimd's: each of these "
    "gets its trigger's queue. Where the compiler picks (dge_mode unknown or none, or hwdge without "
    "engine=), estimate: it spreads the DMAs over this many in-order queues, round-robin")
DMA_TRANSPOSE_HBM_EFFICIENCY = _const(
    "DMA_TRANSPOSE_HBM_EFFICIENCY", 0.9, "x DMA throughput (HBM to SBUF)",
    f"{ARCH2}, 'DMA Transpose': 'up to 90% DMA throughput utilization'; all 16 engines cooperate")
DMA_TRANSPOSE_SBUF_EFFICIENCY = _const(
    "DMA_TRANSPOSE_SBUF_EFFICIENCY", 0.5, "x DMA throughput (SBUF to SBUF)",
    f"{ARCH2}, 'SBUF2SBUF DMA transpose': 'up to 50% of DMA throughput'")
DGE_ISSUE_US = _const(
    "DGE_ISSUE_US", 0.6, "us / DMA instruction",
    f"{ARCH2}, 'Descriptor Generation Engine (DGE)': 'Each DGE-based DMA instruction takes about 600 ns'. "
    "Added to a DMA's latency: dge_mode=hwdge in both estimates, dge_mode=unknown (the compiler "
    "chooses; trn2 recommends hardware DGE) in LIKELY only; dge_mode=none (descriptors written ahead "
    "by the runtime) pays nothing. The two DGE instances are not modeled as a shared resource")
SWDGE_GPSIMD_US = _const(
    "SWDGE_GPSIMD_US", 0.66, "us of GpSimd / DMA instruction",
    f"{DELTANET_LOG}: software-DGE descriptor generation (DMA_DIRECT2D on GpSimd) took 1.32 us for two "
    "weight DMAs. Charged as GpSimd time before each dge_mode=swdge DMA, in both estimates",
    disagreement=f"21.75 us for 20 DMAs of 10,240 short runs (1.09 us per DMA) in another capture ({DELTANET}): "
                 "the cost grows with the descriptors, which the model ignores")
HBM_ROOFLINE_GBPS = _const(
    "HBM_ROOFLINE_GBPS", DMA_ENGINES * DMA_ENGINE_BYTES_PER_NS, "GB/s per NeuronCore",
    f"{DMA_BW}: 16 engines x 23 B/ns = 368 GB/s, all a core's DMA engines can move; the chip's "
    "2.9 TB/s HBM (doc: about-neuron/arch/neuron-hardware/trainium2.rst) over 8 cores is 362 GB/s, "
    "within 2%. With LNC=2 each of the two cores has its own 16 engines; their shared HBM stack "
    "(doc: about-neuron/arch/neuron-features/logical-neuroncore-config.rst, 'each bank is shared by two "
    "physical NeuronCore-v3') moves 2.9 TB/s / 4 = 725 GB/s ('3TB/s' in the architecture guide: 750), "
    "within 1.5% of 2 x 368, so the roofline of n cores is bytes / (n x 368 GB/s). The DMA model "
    "shares at most this per core, so no modeled time is below the roofline",
    disagreement=f"weight streams reached 240-267 GB/s ({DELTANET}; DMA_ACHIEVED_GBPS)")

# -- the standalone launch (reported apart from the kernel's time) -------------------------------
LAUNCH_PREAMBLE_US = _const(
    "LAUNCH_PREAMBLE_US", 13, "us / standalone kernel launch",
    f"{DELTANET_LOG}: 'NEFF/runtime preamble' [0, 12.6 us] of a capture, and a 13.1 us "
    "'instruction-stream head' in another, 'constant across every arm, not reachable from kernel "
    "source'", band="launch",
    disagreement="the documentation gives none; neuron-explorer's total_time includes it")
LAUNCH_EPILOGUE_US = _const(
    "LAUNCH_EPILOGUE_US", 3, "us / standalone kernel launch",
    f"{DELTANET_LOG}: 'epilogue / cross-core barrier' [78.3, 81.7 us] = 3.39 us at the end of a capture",
    band="launch", disagreement="the documentation gives none")

BYTES_PER_US = HBM_ROOFLINE_GBPS * 1e3          # GB/s -> bytes per microsecond, the roofline rate
LAUNCH_US = LAUNCH_PREAMBLE_US + LAUNCH_EPILOGUE_US


def roofline_us(nbytes, cores=1, gbps=HBM_ROOFLINE_GBPS):
    """HBM bytes over `cores` cores' DMA bandwidth at `gbps` per core, µs: the HBM roofline, or at
    DMA_ACHIEVED_GBPS the least time the LIKELY estimate can give the same bytes."""
    return nbytes / (cores * gbps * 1e3)

_GHZ = {"tensor": TENSOR_GHZ, "vector": VECTOR_GHZ, "scalar": SCALAR_GHZ, "gpsimd": GPSIMD_GHZ}
_HALF_PRECISION = {"bfloat16", "float16"}


def _check_band(band):
    if band not in BANDS:
        raise ValueError(f"nkicpu.costs: band must be one of {BANDS}, got {band!r}")


def dma_bytes_per_us(band):
    """All of one core's DMA engines together, in bytes per microsecond."""
    _check_band(band)
    return BYTES_PER_US if band == BEST else DMA_ACHIEVED_GBPS * 1e3


# -- compute engines ---------------------------------------------------------------------------

def _tensor_cycles(ins, band):
    """One pass is a LoadStationary (the stationary's K rows) and a MultiplyMoving (N columns)."""
    if ins.opcode == "nc_transpose":  # a matmul of data (stationary) against an identity (moving)
        data = ins.reads[0]
        rows, stationary_free, moving_free = data.partitions, data.free_elements, data.partitions
        passes = 1                    # transpose mode: one pass, fp32 too (MATMUL_FP32_PASSES)
    else:
        stationary, moving = ins.reads[0], ins.reads[1]
        rows, stationary_free, moving_free = stationary.partitions, stationary.free_elements, moving.free_elements
        transpose = ins.args.get("is_transpose", False)   # transpose mode: one pass, as nc_transpose
        passes = MATMUL_FP32_PASSES if moving.dtype == "float32" and not transpose else 1
    multiply_moving = max(moving_free / MM_COLUMNS_PER_CYCLE, MM_INIT_CYCLES)
    if band == BEST:  # LoadStationary in the background of the previous MultiplyMoving
        load_stationary = stationary_free / (MM_COLUMNS_PER_CYCLE * LOAD_STATIONARY_SPEEDUP)
        return passes * max(multiply_moving, load_stationary)
    return passes * (rows * LOAD_STATIONARY_CYCLES_PER_ROW + multiply_moving)


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


# VectorE instructions that stream two full tiles per output element (VECTOR_ELEMS_PER_CYCLE is per
# input); every other VectorE instruction streams one. tensor_tensor_scan reads data0 and data1;
# tensor_copy_predicated reads src and predicate (estimate: the docs give no cost for either).
VECTOR_TWO_INPUT_OPS = ("tensor_tensor", "scalar_tensor_tensor", "tensor_tensor_scan", "tensor_copy_predicated")


def _vector_cycles(ins, band):
    n = ins.free_elements
    if ins.opcode == "reciprocal":
        per_element = VECTOR_RECIPROCAL_CYCLES
    else:
        inputs = 2 if ins.opcode in VECTOR_TWO_INPUT_OPS else 1
        per_element = inputs / (VECTOR_ELEMS_PER_CYCLE * _perf_mode(ins))
    return VECTOR_FIXED_CYCLES + per_element * n


def _scalar_cycles(ins, band):
    extra = SCALAR_READ_ACCUMULATOR_CYCLES if ins.args.get("reads_out_regs") else 0
    return SCALAR_FIXED_CYCLES + ins.free_elements / SCALAR_ELEMS_PER_CYCLE + extra


def _gpsimd_cycles(ins, band):
    n = ins.free_elements
    if ins.opcode == "tensor_scalar":  # on GpSimd only for rsqrt
        per_element = GPSIMD_RSQRT_CYCLES
    else:
        per_element = (2 if ins.opcode == "tensor_tensor" else 1) / GPSIMD_ELEMS_PER_CYCLE
    return GPSIMD_FIXED_CYCLES + per_element * n


_CYCLES = {"tensor": _tensor_cycles, "vector": _vector_cycles, "scalar": _scalar_cycles, "gpsimd": _gpsimd_cycles}


def engine_us(ins: Instruction, band=LIKELY):
    """How long a compute-engine instruction keeps its engine busy, in microseconds. A core_barrier:
    the cross-core hand-off after the last core's barrier of its round has started (CORE_BARRIER_US;
    nothing in BEST, which charges no semaphore latency); nkicpu/schedule.py holds it until then."""
    _check_band(band)
    if ins.opcode == "core_barrier":
        return CORE_BARRIER_US if band == LIKELY else 0.0
    us = _CYCLES[ins.engine](ins, band) / (_GHZ[ins.engine] * 1e3)
    if ins.engine == "tensor" and band == LIKELY:
        return max(us, TENSOR_FLOOR_US)
    return us


def act_table(ins: Instruction):
    """The ScalarE function table an instruction needs (see ACT_TABLES), or None off ScalarE (and for
    a core_barrier on ScalarE, which computes nothing)."""
    if ins.engine != "scalar" or ins.opcode == "core_barrier":
        return None
    function = ins.args["op"] if ins.opcode == "activation" else "copy"
    return ACT_TABLES.get(function, function)


# -- DMA ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transfer:
    """The work one DMA puts on the DMA engines.

    bytes: what it moves (the larger side, if it converts dtypes).
    work_bytes: engine time in bytes at full speed: at least the bytes moved (twice for HBM to
        HBM, which crosses the HBM interface twice) and at least what its descriptors cost
        (DMA_DESCRIPTOR_BYTES each below DMA_LONG_RUN_BYTES); a DMA transpose divides it by its
        documented efficiency.
    max_bytes_per_us: the most this transfer can get: its share of the engines it spreads over.
    latency_us: fixed latency before data moves (DMA_FIXED_US, plus DGE_ISSUE_US if it pays it).
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


def _descriptor_work(descriptors, moved, band):
    """Engine work of `descriptors` chunks moving `moved` bytes, taken as equal chunks."""
    run = moved / descriptors
    if run < DMA_LONG_RUN_BYTES:
        return descriptors * max(run, DMA_DESCRIPTOR_BYTES)
    return moved + (descriptors * DMA_DESCRIPTOR_OVERHEAD_BYTES if band == LIKELY else 0)


def dge_mode(ins: Instruction):
    """The DGE mode a DMA runs with: its `dge_mode`, except that a vector_offset (gather / scatter) DMA
    left at unknown runs with swdge: "If you specify dge_mode=unknown (the default) with
    vector_offset, the compiler will automatically select swdge" (SDK nki/deep-dives/nki-dge.rst,
    'How .ap() Affects DGE Mode')."""
    mode = ins.args.get("dge_mode", "unknown")
    if mode == "unknown" and any(a.dynamic == "vector" for a in ins.reads + ins.writes):
        return "swdge"
    return mode


def dge_latency_us(ins: Instruction, band=LIKELY):
    """The descriptor-generation latency a DMA pays before its transfer (see DGE_ISSUE_US)."""
    mode = dge_mode(ins)
    return DGE_ISSUE_US if mode == "hwdge" or (mode == "unknown" and band == LIKELY) else 0.0


def transfer(ins: Instruction, band=LIKELY) -> Transfer:
    """What a dma_copy or dma_transpose costs (see `Transfer`)."""
    _check_band(band)
    if ins.opcode not in ("dma_copy", "dma_transpose"):
        raise not_modeled(f"the cost of DMA instruction {ins.opcode}")
    src, dst = ins.reads[0], ins.writes[0]
    moved = max(src.nbytes, dst.nbytes)
    read, written = hbm_bytes(ins)
    engine_rate = dma_bytes_per_us(band) / DMA_ENGINES
    if ins.opcode == "dma_transpose":
        # All 16 engines cooperate (trainium2_arch.rst, 'DMA Transpose'); the transposed side's
        # element-wise pattern is the hardware's business, so only the source's runs count.
        descriptors = src.elements // _contiguous_run(src)
        efficiency = DMA_TRANSPOSE_HBM_EFFICIENCY if is_hbm(src) else DMA_TRANSPOSE_SBUF_EFFICIENCY
        work = max(moved, read + written, _descriptor_work(descriptors, moved, band)) / efficiency
        engines = DMA_ENGINES
    else:
        descriptors = _descriptors(src, dst)
        work = max(moved, read + written, _descriptor_work(descriptors, moved, band))
        partitions = max([a.partitions for a in (src, dst) if a.on_chip], default=None)
        if partitions is None:  # HBM to HBM: estimate that the compiler spreads it over all engines
            engines = DMA_ENGINES
        else:
            engines = min(DMA_ENGINES, math.ceil(partitions / DMA_PARTITIONS_PER_ENGINE))
    return Transfer(bytes=moved, work_bytes=work, max_bytes_per_us=engines * engine_rate,
                    latency_us=DMA_FIXED_US + dge_latency_us(ins, band), descriptors=descriptors,
                    engines=engines)
