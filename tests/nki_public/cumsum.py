# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/core/cumsum/cumsum.py at commit
# d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for this project, not copied: the same
# nisa.tensor_tensor_scan over an all-ones data0 (h = 1 * h + x), the carry of each free tile's last
# column into the next tile's `initial`, and its row tiles of 128; plain loops instead of the
# library's TiledRange / nl.sequential_range helpers.
"""Cumulative sum along the last dimension with a VectorE scan."""
import nki
import nki.isa as nisa
import nki.language as nl

F_TILE_SIZE = 2048     # cumsum: free elements per scan


@nki.jit
def cumsum(x):
    """Cumulative sum of x along its last dimension.

    Dimensions:
        outer: product of all dims but the last (rows, 128 per tile); H: the last dim

    Args:
        x (nl.ndarray): [..., H] @ HBM, any float dtype.

    Returns:
        y (nl.ndarray): like x @ HBM, y[..., i] = sum(x[..., :i + 1]).

    Notes:
        - The scan keeps its running sum in fp32; the carry between free tiles of 2048 goes
          through the output tile, so it is rounded to x.dtype there.

    Pseudocode:
        for each row tile, for each free tile: y = tensor_tensor_scan(ones, x, carry, multiply, add)
        carry = y[:, -1]
    """
    H = x.shape[-1]
    outer = x.size // H
    x2 = x.reshape((outer, H))
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    y2 = y.reshape((outer, H))
    P = nl.tile_size.pmax
    num_f_tiles = (H + F_TILE_SIZE - 1) // F_TILE_SIZE
    for p0 in range(0, outer, P):
        rows = min(P, outer - p0)
        carry = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=carry, value=0.0)
        ones = nl.ndarray((P, F_TILE_SIZE), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
        for f in range(num_f_tiles):
            f0 = f * F_TILE_SIZE
            width = min(F_TILE_SIZE, H - f0)
            data = nl.ndarray((P, F_TILE_SIZE), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=data[0:rows, 0:width], src=x2[p0:p0 + rows, f0:f0 + width])
            result = nl.ndarray((P, F_TILE_SIZE), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=result[0:rows, 0:width], data0=ones[0:rows, 0:width],
                                    data1=data[0:rows, 0:width], initial=carry[0:rows, 0:1],
                                    op0=nl.multiply, op1=nl.add)
            nisa.dma_copy(dst=y2[p0:p0 + rows, f0:f0 + width], src=result[0:rows, 0:width])
            if f + 1 < num_f_tiles:
                nisa.tensor_copy(dst=carry[0:rows, 0:1], src=result[0:rows, width - 1:width])
    return y
