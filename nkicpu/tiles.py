"""`nl.tile_size`: the trn2 tile-size constants (the SDK 2.32 stub's nl.tile_size), in a module of
their own so that nki.language and the instructions that check against them (nki.isa) both import
them.
"""
from . import memory
from .memory import PMAX


class TileSize:
    """trn2 tile-size constants (the SDK 2.32 stub's nl.tile_size): the home of the TensorE and
    VectorE limits; the memory sizes come from `nkicpu.memory`."""
    pmax = PMAX
    psum_bank_fmax_bytes = memory.PSUM_BANK_BYTES
    psum_bank_fmax = psum_fmax = memory.PSUM_BANK_BYTES // 4   # fp32 elements in one bank
    psum_num_banks = memory.PSUM_NUM_BANKS
    gemm_stationary_fmax = 128                                 # the PE array's columns
    gemm_moving_fmax = psum_bank_fmax                          # a matmul's output row fills one bank
    bn_stats_fmax = 512
    sbuf_size_bytes = PMAX * memory.SBUF_PARTITION_BYTES
    sbuf_fmax_bytes = memory.SBUF_PARTITION_BYTES
    sbuf_fmax = memory.SBUF_PARTITION_BYTES // 4
    # "Usable SBUF free dimension per partition" (the tile_size docs): what is left for a kernel
    # after the runtime's reserved region, the figure nkicpu's sbuf-capacity rule holds kernels to.
    total_available_sbuf_size = memory.SBUF_USABLE_BYTES
    # Byte alignment of a free-dim address: the values the NKI front end's tracer binds for every
    # NeuronCore generation (github.com/leanprover/KLR, KLR/Trace.lean `kernelEnv`, at 1ca4ae0);
    # PSUM's 4 is its 4-byte word (isa.py, _psum_whole_words).
    psum_min_align = 4
    sbuf_min_align = 1


tile_size = TileSize()
