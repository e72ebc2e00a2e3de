"""`nc_matmul(is_transpose=True)`: TensorE transpose mode, called from `isa.nc_matmul`.

The SDK nc_matmul docs and trainium2_arch.rst ("Built-in Transpose Support"): TensorE transposes
an SBUF tile by loading it as the stationary and streaming an identity matrix as the moving; from
NeuronCore-v3 the transpose mode makes this bit-accurate (NaN/Inf move as they are) and writes
FP16/BF16 PSUM for FP16/BF16 input (fp32 for fp32). So dst = stationary.T, bit for bit, in the
stationary's dtype. What the mode does with a moving that is not an identity is not documented,
so it is not modeled; nor are FP8 inputs (16-bit PSUM output with zero upper bits), accumulation
or tiling in transpose mode.
"""
import numpy as np

from .errors import not_modeled, rule_error
from .isa_enums import check_enum, matmul_perf_mode
from .operands import check_dst, check_placement, matmul_buffers, one_psum_bank, psum_whole_words, record, write
from .tiles import tile_size as TILE  # nl.tile_size, not shadowed by tile_size= parameters

TRANSPOSE_DTYPES = ("bfloat16", "float16", "float32")


def matmul_transpose(dst, stationary, moving, accumulate, tile_position, tile_size, perf_mode, name):
    where = "nisa.nc_matmul(is_transpose=True)"
    if check_enum(perf_mode, "perf_mode", where) != matmul_perf_mode.none or tile_position or tile_size or accumulate:
        raise not_modeled("nc_matmul(is_transpose=True) with perf_mode, tiling or accumulate=True")
    matmul_buffers(where, dst, stationary, moving)
    if stationary.dtype.name not in TRANSPOSE_DTYPES:
        raise not_modeled(f"nc_matmul(is_transpose=True) of {stationary.dtype.name} (FP8 transposes to 16-bit PSUM)")
    if dst.dtype != stationary.dtype:
        raise rule_error("transpose-dtype", where, f"dst dtype must equal the stationary's dtype "
                                                   f"{stationary.dtype.name} in transpose mode, got {dst.dtype.name}")
    K, M = stationary.partitions, stationary.free_size
    if M > TILE.gemm_stationary_fmax:
        raise rule_error("matmul-stationary-free", where,
                         f"stationary free size must be <= {TILE.gemm_stationary_fmax}, got {M}")
    if moving.partitions != K or moving.free_size != K:
        raise rule_error("matmul-contraction", where, f"the moving of a transpose is a [{K}, {K}] identity (the "
                                                      f"stationary's partitions), got {list(moving.shape)}")
    eye = np.asarray(moving.numpy(), dtype=np.float32).reshape(K, K)
    if not np.array_equal(eye, np.eye(K, dtype=np.float32)):
        raise not_modeled("nc_matmul(is_transpose=True) with a moving that is not an identity matrix")
    if dst.partitions != M or dst.free_size != K:
        raise rule_error("matmul-dst-shape", where, f"dst must be [{M}, {K}] (the stationary transposed), got "
                                                    f"{list(dst.shape)}")
    one_psum_bank(dst, where)
    check_placement(dst, stationary, moving, (), (), where)
    psum_whole_words(dst, where)
    check_dst(dst, where)
    write(dst, stationary.numpy().reshape(K, M).T, cast=False)
    return record("nc_matmul", "tensor", [stationary, moving], [dst], K=K, M=M, N=K, is_transpose=True,
                   accumulate=False, tile_position=(), tile_size=(), moving_dtype=moving.dtype.name, name=name)
