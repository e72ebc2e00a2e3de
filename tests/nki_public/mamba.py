# Mirrors aws-neuron/aws-neuron-sdk nki/examples/fused_mamba/mamba_nki_kernels.py (mamba_v1) at
# commit 81ce03ae261e12925e53437a0f690478e6366155. Written for this project, not copied: the same
# NKI calls and keyword forms, and its loop order (batch, channel tile, state).
"""The Mamba-v1 selective scan: per channel and state, h_t = exp(delta_t * A) * h_(t-1) +
delta_t * u_t * B_t along the sequence, and y_t = sum over states of C_t * h_t. Channels are on
partitions; B and C rows are broadcast to all of them with nl.broadcast_to."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def mamba_v1(delta, u, A, B, C):
    """delta, u: [batch, channels, seq]; A: [channels, state]; B, C: [batch, state, seq].
    Returns y: [batch, channels, seq]; channels a multiple of 128."""
    batch_size, channels, seq_len = delta.shape
    output = nl.ndarray((batch_size, channels, seq_len), dtype=delta.dtype, buffer=nl.shared_hbm)
    _, state_size = A.shape
    assert channels % 128 == 0
    channel_psize = nl.tile_size.pmax
    n_channel_tile = channels // channel_psize

    for i_batch in nl.affine_range(batch_size):
        for i_channel_tile in nl.affine_range(n_channel_tile):
            channel_start = i_channel_tile * channel_psize
            scanC_accum = nl.zeros((channel_psize, seq_len), dtype=delta.dtype)
            for i_state in nl.affine_range(state_size):
                delta_slice = delta[i_batch, channel_start:channel_start + channel_psize, 0:seq_len]
                delta_i = nl.ndarray(delta_slice.shape, dtype=delta_slice.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=delta_i, src=delta_slice)
                A_slice = A[channel_start:channel_start + channel_psize, i_state:i_state + 1]
                A_i = nl.ndarray(A_slice.shape, dtype=A_slice.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=A_i, src=A_slice)

                # exp(delta * A): A_i is the per-partition scale of the activation
                deltaA = nl.ndarray((channel_psize, seq_len), dtype=delta.dtype, buffer=nl.sbuf)
                nisa.activation(dst=deltaA, op=nl.exp, data=delta_i, scale=A_i)

                u_slice = u[i_batch, channel_start:channel_start + channel_psize, 0:seq_len]
                u_i = nl.ndarray(u_slice.shape, dtype=u_slice.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=u_i, src=u_slice)
                B_slice = B[i_batch, i_state:i_state + 1, 0:seq_len]
                B_i = nl.ndarray(B_slice.shape, dtype=B_slice.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=B_i, src=B_slice)

                # delta * u * B, B's one row on every channel partition
                deltaU = nl.ndarray((channel_psize, seq_len), dtype=delta.dtype, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=deltaU, data1=delta_i, data2=u_i, op=nl.multiply)
                B_i_bcast = nl.broadcast_to(B_i, (channel_psize, seq_len))
                deltaBu = nl.ndarray((channel_psize, seq_len), dtype=delta.dtype, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=deltaBu, data1=deltaU, data2=B_i_bcast, op=nl.multiply)

                # h_t = deltaA_t * h_(t-1) + deltaBu_t along the sequence
                scan_res = nl.ndarray((channel_psize, seq_len), dtype=delta.dtype, buffer=nl.sbuf)
                nisa.tensor_tensor_scan(dst=scan_res, data0=deltaA, data1=deltaBu, initial=0.0,
                                        op0=nl.multiply, op1=nl.add)

                C_slice = C[i_batch, i_state:i_state + 1, 0:seq_len]
                C_i = nl.ndarray(C_slice.shape, dtype=C_slice.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=C_i, src=C_slice)

                # C * h, summed over the states
                C_i_bcast = nl.broadcast_to(C_i, (channel_psize, seq_len))
                scanC = nl.ndarray((channel_psize, seq_len), dtype=delta.dtype, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=scanC, data1=scan_res, data2=C_i_bcast, op=nl.multiply)
                nisa.tensor_tensor(dst=scanC_accum, data1=scanC_accum, data2=scanC, op=nl.add)

            nisa.dma_copy(dst=output[i_batch, channel_start:channel_start + channel_psize, 0:seq_len],
                          src=scanC_accum)
    return output
