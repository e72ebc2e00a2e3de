# Mirrors aws-neuron/aws-neuron-sdk nki/examples/average_pool2d/average_pool2d_nki_kernels.py
# (tensor_avgpool_kernel) and nki/examples/index-case-3.py (tensor_maxpool_kernel_) at commit
# 81ce03ae261e12925e53437a0f690478e6366155. Written for this project, not copied: the same calls
# and the same 5-D access pattern over the input tile. Not followed: the unused
# `from nki.typing import tensor` import.
"""2-D pooling with the channels on partitions: a strided [C, Hout, Wout, pool, pool] view of the
input tile, reduced over its last two dims by nl.sum (average) or nl.max."""
import nki
import nki.isa as nisa
import nki.language as nl


def _pool_view(in_tile, sz_hin, sz_win, sz_pool):
    """in_tile [C, H, W] seen as [C, H / pool, W / pool, pool, pool]: each window's elements last."""
    sz_p = in_tile.shape[0]
    return in_tile.ap([
        [sz_hin * sz_win, sz_p],                    # partition step
        [sz_pool * sz_win, sz_hin // sz_pool],      # to the next row of windows
        [sz_pool, sz_win // sz_pool],               # to the next window in a row
        [sz_win, sz_pool],                          # rows inside a window
        [1, sz_pool],                               # columns inside a window
    ])


@nki.jit
def tensor_avgpool_kernel(in_tensor, pool_size):
    """[C, H, W] -> [C, H / pool_size, W / pool_size]: the mean of each window."""
    sz_cin, sz_hin, sz_win = in_tensor.shape
    sz_hout = sz_hin // pool_size
    sz_wout = sz_win // pool_size
    out_tensor = nl.ndarray((sz_cin, sz_hout, sz_wout), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    in_tile = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=in_tile, src=in_tensor)
    sum_tile = nl.sum(_pool_view(in_tile, sz_hin, sz_win, pool_size), axis=[3, 4])
    out_tile = nl.ndarray(sum_tile.shape, dtype=sum_tile.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=out_tile, data=sum_tile, op0=nl.multiply, operand0=1.0 / (pool_size * pool_size))
    nisa.dma_copy(dst=out_tensor, src=out_tile)
    return out_tensor


@nki.jit
def tensor_maxpool_kernel(in_tensor, sz_pool):
    """[C, H, W] -> [C, H / sz_pool, W / sz_pool]: the largest element of each window."""
    sz_p, sz_hin, sz_win = in_tensor.shape
    sz_hout, sz_wout = sz_hin // sz_pool, sz_win // sz_pool
    out_tensor = nl.ndarray((sz_p, sz_hout, sz_wout), dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    in_tile = nl.load(in_tensor)
    out_tile = nl.max(_pool_view(in_tile, sz_hin, sz_win, sz_pool), axis=[3, 4])
    nl.store(out_tensor, value=out_tile)
    return out_tensor
