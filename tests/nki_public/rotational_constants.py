# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/core/topk/rotational_topk.py
# (_topk_rotated_core: its shared constants, the rotation matrix moved to SBUF, and one stage's
# rotate and insert) and rotational_topk_utils.py (rotate, insert) at commit
# d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for this project, not copied: the same NKI
# calls and keyword forms. Not mirrored: the stage's top-k search (topk_core) and index gather
# (nisa.nc_n_gather); here the stage rotates the first local_top_k columns it is given.
"""One stage of the rotational top-k: values spread over n_stages partitions per token, each
stage's picks rotated to the next partition of their token by a matmul with a constant
block-circulant permutation, and appended after the stage's columns."""
import nki
import nki.isa as nisa
import nki.language as nl


def rotate(dst, tensor, rotation_matrix):
    """dst = rotation_matrix.T @ tensor, one matmul per gemm_moving_fmax columns."""
    f_max = nl.tile_size.gemm_moving_fmax
    free_size = tensor.shape[1]
    n_tiles = (free_size + f_max - 1) // f_max
    for i in nl.affine_range(n_tiles):
        tile_slice = nl.ds(i * f_max, min(f_max, free_size - i * f_max))
        nisa.nc_matmul(dst[:, tile_slice], rotation_matrix, tensor[:, tile_slice])


def insert(tensor, values, offset=0):
    """tensor[:, offset:offset + values.shape[1]] = values, on ScalarE."""
    num_values_to_insert = values.shape[1]
    nisa.tensor_copy(dst=tensor[:, nl.ds(offset, num_values_to_insert)], src=values, engine=nisa.scalar_engine)


@nki.jit
def rotate_stage(inp, rotation_matrix_file, global_indices_file, local_top_k_per_stage):
    """inp: [n_stages * BxS, stage_free_size] @ HBM, the n_stages rows of a token consecutive.

    Returns (values, indices), each [n_stages * BxS, stage_free_size + local_top_k_per_stage]:
    inp and the global index of each element (from the .npy constant global_indices_file), then
    their first local_top_k_per_stage columns rotated by the matrix in rotation_matrix_file.
    """
    total_partition_dim, stage_free_size = inp.shape
    concatenated_stage_free_dim = stage_free_size + local_top_k_per_stage

    rotate_hbm = nl.shared_constant(rotation_matrix_file)
    values = nl.ndarray((total_partition_dim, concatenated_stage_free_dim), dtype=inp.dtype)
    indices = nl.ndarray((total_partition_dim, concatenated_stage_free_dim), dtype=nl.float32)
    nisa.memset(dst=indices, value=0)
    nisa.dma_copy(dst=indices[:, :stage_free_size], src=nl.shared_constant(global_indices_file))
    nisa.dma_copy(dst=values[:, :stage_free_size], src=inp)

    partition_slice = nl.ds(0, total_partition_dim)
    free_slice = nl.ds(0, total_partition_dim)
    rotation = nl.ndarray(rotate_hbm.shape, dtype=inp.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rotation, src=rotate_hbm[partition_slice, free_slice])
    rotation_f32 = nl.ndarray(rotate_hbm.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=rotation_f32, src=rotation)

    picks = nl.ds(0, local_top_k_per_stage)
    rotated_index = nl.ndarray((total_partition_dim, local_top_k_per_stage), dtype=nl.float32, buffer=nl.psum)
    rotated = nl.ndarray((total_partition_dim, local_top_k_per_stage), dtype=nl.float32, buffer=nl.psum)
    rotate(dst=rotated_index, tensor=indices[:, picks], rotation_matrix=rotation_f32)
    rotate(dst=rotated, tensor=values[:, picks], rotation_matrix=rotation)
    insert(tensor=values, values=rotated, offset=stage_free_size)
    insert(tensor=indices, values=rotated_index, offset=stage_free_size)

    values_out = nl.ndarray(values.shape, dtype=values.dtype, buffer=nl.shared_hbm)
    indices_out = nl.ndarray(indices.shape, dtype=indices.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=values_out, src=values)
    nisa.dma_copy(dst=indices_out, src=indices)
    return values_out, indices_out
