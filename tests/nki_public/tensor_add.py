# Mirrors aws-neuron/aws-neuron-sdk nki/examples/tensor_addition/tensor_addition_nki_kernels.py
# (nki_tensor_add) and nki/examples/getting_started_baremetal.py (nki_tensor_add_kernel) at commit
# 81ce03ae261e12925e53437a0f690478e6366155. Written for this project, not copied.
# tensor_addition_nki_kernels.py is current API and is followed, except its
# os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = "trn1" line (nkicpu models trn2).
# getting_started_baremetal.py still uses the legacy nl.load / nl.add / nl.store; those are not
# followed: nki_tensor_add_kernel below follows the current-API version of the same kernel in the
# SDK quickstart (nki/get-started/quickstart-implement-run-kernel.rst, "add_kernel.py").
"""The SDK's first kernels: elementwise a + b, untiled and tiled over [128, 512]."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def nki_tensor_add_kernel(a_input, b_input):
    """a + b for inputs of at most 128 rows, in one tile."""
    assert a_input.shape == b_input.shape
    assert a_input.dtype == b_input.dtype
    assert a_input.shape[0] <= nl.tile_size.pmax
    a_tile = nl.ndarray(shape=a_input.shape, dtype=a_input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_tile, src=a_input)
    b_tile = nl.ndarray(shape=b_input.shape, dtype=b_input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b_tile, src=b_input)
    c_tile = nl.ndarray(shape=a_input.shape, dtype=a_input.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
    c_output = nl.ndarray(dtype=a_input.dtype, shape=a_input.shape, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=c_output, src=c_tile)
    return c_output


@nki.jit
def nki_tensor_add(a_input, b_input):
    """a + b for [M, N] inputs with M a multiple of 128 and N of 512, tile by tile."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    M, N = a_input.shape
    TILE_M, TILE_N = 128, 512
    assert a_input.shape == b_input.shape, f"Expected shapes {a_input.shape} and {b_input.shape} to match"
    assert a_input.dtype == b_input.dtype, f"Expected data types {a_input.dtype} and {b_input.dtype} to match"
    assert M % TILE_M == 0 and N % TILE_N == 0, f"Expected {a_input.shape} to tile by [{TILE_M}, {TILE_N}]"
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            a_tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=a_input.dtype, buffer=nl.sbuf)
            b_tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=b_input.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_tile,
                          src=a_input[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N])
            nisa.dma_copy(dst=b_tile,
                          src=b_input[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N])
            c_tile = nl.ndarray(shape=(TILE_M, TILE_N), dtype=a_input.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
            nisa.dma_copy(dst=c_output[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N],
                          src=c_tile)
    return c_output
