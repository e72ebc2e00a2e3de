# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/core/embeddings/rope.py
# (_compute_convert_to_interleaved_mat, _convert_from_interleaved, _convert_to_interleaved) at
# commit d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for this project, not copied: the same
# NKI calls and keyword forms. The library runs them inside its RoPE kernel for an interleaved
# input; here they are a kernel of their own that converts an interleaved tile to the contiguous
# layout and back.
"""RoPE layout conversion by TensorE: the head dim d of x[d, B, heads, S] reordered between
[e0, o0, e1, o1, ...] (interleaved) and [e0, e1, ..., o0, o1, ...] (contiguous) by one
permutation matrix, cut out of an identity with a strided read."""
import nki
import nki.isa as nisa
import nki.language as nl


def _compute_convert_to_interleaved_mat(x_sb):
    """[d, d] permutation P, P @ x interleaves: row i of the identity read at its even then odd columns."""
    d_head = x_sb.shape[0]
    half_d = d_head // 2
    assert d_head % 2 == 0, f"d_head must be even, got {d_head}"
    identity_sb = nl.shared_identity_matrix(d_head, dtype=x_sb.dtype)
    convert_to_interleaved_mat = nl.ndarray((d_head, d_head), dtype=x_sb.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=convert_to_interleaved_mat.reshape((d_head, 2, half_d)),
                     src=identity_sb.ap(pattern=[[d_head, d_head], [1, 2], [2, half_d]]),
                     engine=nisa.scalar_engine)
    return convert_to_interleaved_mat


def _convert_from_interleaved(x_sb, convert_to_interleaved_mat):
    """A new SBUF tile P.T @ x (nc_matmul contracts over partitions): the contiguous layout."""
    d_head, B, n_heads, S = x_sb.shape
    total_free_dim = B * n_heads * S
    fmax = nl.tile_size.gemm_moving_fmax
    x_converted_sb = nl.ndarray(x_sb.shape, dtype=x_sb.dtype, buffer=nl.sbuf)
    x_flat = x_sb.reshape((d_head, total_free_dim))
    x_out_flat = x_converted_sb.reshape((d_head, total_free_dim))
    for t_start in range(0, total_free_dim, fmax):
        t_size = min(fmax, total_free_dim - t_start)
        x_psum = nl.ndarray((d_head, t_size), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=x_psum, stationary=convert_to_interleaved_mat, moving=x_flat[:, nl.ds(t_start, t_size)])
        nisa.activation(dst=x_out_flat[:, nl.ds(t_start, t_size)], op=nl.copy, data=x_psum)
    return x_converted_sb


def _convert_to_interleaved(x_sb, convert_to_interleaved_mat):
    """x_sb <- P @ x_sb in place: P transposed first, as nc_matmul computes stationary.T @ moving."""
    d_head, B, n_heads, S = x_sb.shape
    convert_from_interleaved_sb = nl.ndarray((d_head, d_head), dtype=convert_to_interleaved_mat.dtype, buffer=nl.sbuf)
    convert_from_interleaved_psum = nl.ndarray((d_head, d_head), dtype=convert_to_interleaved_mat.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=convert_from_interleaved_psum, data=convert_to_interleaved_mat)
    nisa.tensor_copy(dst=convert_from_interleaved_sb, src=convert_from_interleaved_psum, engine=nisa.scalar_engine)
    total_free_dim = B * n_heads * S
    fmax = nl.tile_size.gemm_moving_fmax
    x_flat = x_sb.reshape((d_head, total_free_dim))
    for t_start in range(0, total_free_dim, fmax):
        t_size = min(fmax, total_free_dim - t_start)
        x_psum = nl.ndarray((d_head, t_size), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=x_psum, stationary=convert_from_interleaved_sb, moving=x_flat[:, nl.ds(t_start, t_size)])
        nisa.tensor_copy(dst=x_flat[:, nl.ds(t_start, t_size)], src=x_psum, engine=nisa.scalar_engine)
    return x_sb


@nki.jit
def rope_layout_convert(x):
    """x: [d, B, heads, S] @ HBM, interleaved head dim. Returns (contiguous, interleaved again)."""
    x_sb = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x_sb, src=x)
    convert_to_interleaved_mat = _compute_convert_to_interleaved_mat(x_sb)
    contiguous_sb = _convert_from_interleaved(x_sb, convert_to_interleaved_mat)
    contiguous = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=contiguous, src=contiguous_sb)
    interleaved = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=interleaved, src=_convert_to_interleaved(contiguous_sb, convert_to_interleaved_mat))
    return contiguous, interleaved
