# Mirrors aws-neuron/aws-neuron-sdk nki/test/test_psum_modulo_alloc.py (allocated_loop_transpose)
# at commit 81ce03ae261e12925e53437a0f690478e6366155. Written for this project, not copied. The
# source is legacy NKI (neuronxcc.nki, nl.arange index grids, nl.par_dim, modulo allocation,
# `out[...] = nisa.nc_matmul(...)`, an HBM identity loaded with nl.load); here the same steps are
# current API: nl.shared_identity_matrix gives the identity in SBUF, in the input's dtype, and the
# matmul writes its dst.
"""A transpose through TensorE: each [128, 128] block times the identity, copied out of PSUM."""
import nki
import nki.isa as nisa
import nki.language as nl

BLOCK = 128   # one TensorE pass: 128 contraction partitions, 128 stationary columns


@nki.jit
def allocated_loop_transpose(a_ptr, tp_ptr):
    """tp_ptr[M, N] = a_ptr[N, M].T, written block by block and returned (an aliased output)."""
    N, M = a_ptr.shape
    _M, _N = tp_ptr.shape
    assert _N == N and _M == M
    assert N % BLOCK == 0 and M % BLOCK == 0

    identity = nl.shared_identity_matrix(n=BLOCK, dtype=a_ptr.dtype)
    for n0 in nl.affine_range(N // BLOCK):
        for m0 in nl.affine_range(M // BLOCK):
            a_local = nl.load(a_ptr[n0 * BLOCK:(n0 + 1) * BLOCK, m0 * BLOCK:(m0 + 1) * BLOCK])
            a_local_transpose = nl.ndarray((BLOCK, BLOCK), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=a_local_transpose, stationary=a_local, moving=identity)   # a_local.T @ I
            a_t_sbuf = nl.copy(a_local_transpose, dtype=a_ptr.dtype)
            nl.store(tp_ptr[m0 * BLOCK:(m0 + 1) * BLOCK, n0 * BLOCK:(n0 + 1) * BLOCK], value=a_t_sbuf)
    return tp_ptr
