# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/core/mlp/mlp_cte/mlp_cte_norm.py
# (apply_rms_norm_to_source_tensor_tile, apply_layer_norm_to_source_tensor_tile, with the zero-bias
# and epsilon [P, 1] vectors of mlp_cte_constants.py) at commit d2ad3a579498d1888aa8740af97fd325dd5f2740.
# Written for this project, not copied: the same NKI calls and keyword forms (activation_reduce,
# a [P, 1] tile as activation scale, bn_stats per 512-element tile into nl.ds columns, bn_aggr,
# tensor_scalar with two [P, 1] operands on nisa.vector_engine), in a small standalone kernel
# instead of the library's MLP tiling and allocator.
"""Token-major normalisation of the NKI library's context-encoding MLP: tokens on partitions,
statistics along the free dim (ScalarE square-and-reduce for RMSNorm, VectorE bn_stats / bn_aggr
for LayerNorm)."""
import nki
import nki.isa as nisa
import nki.language as nl

BN_STATS_ELEMENTS_PER_TILE = 6     # mlp_cte_constants.py: bn_stats output per partition
BN_AGGR_ELEMENTS_PER_TILE = 2      # mlp_cte_constants.py: bn_aggr output (mean, variance)


@nki.jit
def mlp_cte_norm(hidden, layer_norm=False, eps=1e-6):
    """RMSNorm or LayerNorm (no weights: the MLP folds gamma into its matmuls) of each token.

    Dimensions:
        T: tokens, 128 per tile on partitions; H: hidden size (free dim)

    Args:
        hidden (nl.ndarray): [T, H] @ HBM, bf16 or fp32.
        layer_norm (bool): LayerNorm if True, else RMSNorm.
        eps (float): added to the mean square (RMSNorm) or the variance (LayerNorm).

    Returns:
        output (nl.ndarray): [T, H] @ shared HBM, hidden.dtype.

    Pseudocode:
        x = hidden.astype(float32)
        RMSNorm:   out = x / sqrt(mean(x^2, axis=1) + eps)[:, None]
        LayerNorm: out = (x - mean(x, axis=1)[:, None]) / sqrt(var(x, axis=1) + eps)[:, None]
    """
    T, H = hidden.shape
    P = nl.tile_size.pmax
    output = nl.ndarray((T, H), dtype=hidden.dtype, buffer=nl.shared_hbm)
    zero_bias = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="bias_vector_sbuf")
    nisa.memset(dst=zero_bias, value=0.0)
    eps_vector = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="epsilon_bias_vector_sbuf")
    nisa.memset(dst=eps_vector, value=eps)
    for t0 in range(0, T, P):
        p = min(P, T - t0)
        source = nl.ndarray((P, H), dtype=hidden.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=source[0:p, 0:H], src=hidden[t0:t0 + p, 0:H])
        out = nl.ndarray((P, H), dtype=hidden.dtype, buffer=nl.sbuf)
        if layer_norm:
            _layer_norm_tile(source, out, p, eps_vector)
        else:
            _rms_norm_tile(source, out, p, zero_bias, eps_vector)
        nisa.dma_copy(dst=output[t0:t0 + p, 0:H], src=out[0:p, 0:H])
    return output


def _rms_norm_tile(source, out, p, zero_bias, eps_vector):
    """Sum of squares in ScalarE's accumulator, rsqrt(sum / H + eps), then x times that [P, 1] scale."""
    P, H = source.shape
    square = nl.ndarray((P, H), dtype=nl.float32, buffer=nl.sbuf, name="square_result_sbuf")
    square_accum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf, name="square_accum_result_sbuf")
    nisa.activation_reduce(dst=square[0:p, 0:H], op=nl.square, data=source[0:p, 0:H], reduce_op=nl.add,
                           reduce_res=square_accum[0:p, 0:1], bias=zero_bias[0:p, 0:1])
    nisa.activation(dst=square_accum[0:p, 0:1], op=nl.rsqrt, data=square_accum[0:p, 0:1], bias=eps_vector[0:p, 0:1],
                    scale=float(1.0 / H))
    nisa.activation(dst=out[0:p, 0:H], op=nl.copy, data=source[0:p, 0:H], scale=square_accum[0:p, 0:1],
                    bias=zero_bias[0:p, 0:1])


def _layer_norm_tile(source, out, p, eps_vector):
    """bn_stats per 512 hidden elements, one bn_aggr, rsqrt(var + eps), then (x - mean) * rstd."""
    P, H = source.shape
    fmax = nl.tile_size.bn_stats_fmax
    n_tiles = -(-H // fmax)
    stats = nl.ndarray((P, n_tiles * BN_STATS_ELEMENTS_PER_TILE), dtype=nl.float32, buffer=nl.sbuf,
                       name="bn_stats_result_sbuf")
    aggr = nl.ndarray((P, BN_AGGR_ELEMENTS_PER_TILE), dtype=nl.float32, buffer=nl.sbuf, name="bn_aggr_result_sbuf")
    for i in range(n_tiles):
        nisa.bn_stats(dst=stats[0:p, nl.ds(i * BN_STATS_ELEMENTS_PER_TILE, BN_STATS_ELEMENTS_PER_TILE)],
                      data=source[:p, nl.ds(i * fmax, min(fmax, H - i * fmax))])
    nisa.bn_aggr(dst=aggr[0:p, 0:BN_AGGR_ELEMENTS_PER_TILE], data=stats[0:p, 0:n_tiles * BN_STATS_ELEMENTS_PER_TILE])
    nisa.activation(dst=aggr[0:p, 1:2], op=nl.rsqrt, data=aggr[0:p, 1:2], bias=eps_vector[0:p, 0:1])
    nisa.tensor_scalar(dst=out[0:p, 0:H], data=source[0:p, 0:H], op0=nl.subtract, op1=nl.multiply,
                       operand0=aggr[0:p, 0:1], operand1=aggr[0:p, 1:2], engine=nisa.vector_engine)
