# Mirrors aws-neuron/aws-neuron-sdk nki/examples/transpose2d/transpose2d_nki_kernels.py
# (tensor_transpose2D_kernel_) at commit 81ce03ae261e12925e53437a0f690478e6366155. Written for this
# project, not copied. The example is current API and is followed, except its module-level
# `import numpy as np` (used only by its __main__ demo).
"""Transpose the [rows, cols] matrix flattened in every partition's row, one column copy at a time."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def tensor_transpose2D_kernel(in_tensor, shape2D):
    """out[p, c * rows + r] = in[p, r * cols + c] with (rows, cols) = shape2D (a Python tuple).

    in_tensor: [P, rows * cols] @ HBM, P <= 128, any dtype (the SDK demo uses int8).
    """
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, _ = in_tensor.shape
    in_tile = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=in_tile, src=in_tensor)
    sz_f1, sz_f2 = shape2D
    out_tile = nl.ndarray(shape=(sz_p, sz_f2 * sz_f1), dtype=in_tensor.dtype, buffer=nl.sbuf)
    for i_f1 in nl.affine_range(sz_f1):
        for i_f2 in nl.affine_range(sz_f2):
            nisa.tensor_copy(dst=out_tile[:, nl.ds(i_f2 * sz_f1 + i_f1, 1)],
                             src=in_tile[:, nl.ds(i_f1 * sz_f2 + i_f2, 1)])
    nisa.dma_copy(dst=out_tensor, src=out_tile)
    return out_tensor
