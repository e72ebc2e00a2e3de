# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/core/subkernels/rmsnorm_tkg.py
# (rmsnorm_tkg, shard-on-BxS path: _rmsnorm_tkg_shard_on_bxs, _rmsnorm_tkg_llama_impl,
# _process_rmsnorm_tile) at commit d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for this
# project, not copied: the same NKI calls and keyword forms; the engine operands the library builds
# with TensorView.get_view() are written here as the explicit `.ap()` patterns it emits.
# Not mirrored: shard_on_h and SBUF-resident outputs (the cores exchange results with nisa.sendrecv,
# which nkicpu does not model), SBUF-resident inputs, use_heap_memory.
"""RMSNorm for token generation, output hidden-on-partitions for a following sharded matmul."""
import nki
import nki.isa as nisa
import nki.language as nl

from .norm_tkg_utils import check_and_shard_tokens, load_gamma_to_sbuf, load_input_to_sbuf

SHARDING_THRESHOLD = 18    # rmsnorm_tkg: with LNC=2, shard tokens across the two cores above this BxS
BXS_TILE = 512             # rmsnorm_tkg: tokens per tile (one fp32 PSUM bank of column sums)


@nki.jit
def rmsnorm_tkg(input, gamma, output, eps=1e-6, hidden_actual=None, hidden_dim_tp=False):
    """RMSNorm of decode tokens, written transposed into `output` and returned.

    Dimensions:
        B, S: batch, sequence; BxS = B * S tokens
        H: hidden size = H0 * H1, H0 = 128

    Args:
        input (nl.ndarray): [B, S, H] @ HBM, bf16 or fp32.
        gamma (nl.ndarray): [1, H] @ HBM.
        output (nl.ndarray): [H0, BxS, H1] @ HBM, written and returned (an aliased output).
        eps (float): added to mean(x^2).
        hidden_actual (int): the H the mean divides by when input is zero-padded (default H).
        hidden_dim_tp (bool): hidden index h = h1 * H0 + h0 (DMA-transpose loads) instead of
            h = shard * H0 * H2 + h0 * H2 + h2 with H2 = H1 / lnc.

    Returns:
        output.

    Notes:
        - Launched as kernel[2] (LNC=2), each core normalises half the tokens when BxS > 18 and is
          even; otherwise both cores compute everything (the library does the same).

    Pseudocode:
        x = input.reshape(BxS, H).astype(float32)
        y = x * gamma / sqrt(sum(x^2, axis=1) / hidden_actual + eps)[:, None]
        # lnc = 1 or hidden_dim_tp: output[h0, t, h1] = y[t, h] with the layout above
    """
    H, lnc, t0, t1 = check_and_shard_tokens(input, gamma, output, SHARDING_THRESHOLD)

    output_sb = nl.ndarray(output.shape, dtype=input.dtype, buffer=nl.sbuf, name="rmsnorm_output_sb")
    input_shard = input.flatten_dims(start_dim=0, end_dim=1).slice(dim=0, start=t0, end=t1)
    output_sb_shard = output_sb.slice(dim=1, start=t0, end=t1)
    _rmsnorm_impl(input_shard, gamma, output_sb_shard, num_H_shards=1 if hidden_dim_tp else lnc,
                  hidden_actual=hidden_actual or H, eps=eps, hidden_dim_tp=hidden_dim_tp)
    nisa.dma_copy(dst=output.slice(dim=1, start=t0, end=t1), src=output_sb_shard)
    return output


def _rmsnorm_impl(input_hbm, gamma, output_sb, num_H_shards, hidden_actual, eps, hidden_dim_tp):
    """Load [BxS, H] rows into output_sb (the output buffer doubles as the input tile), then
    normalise it in place, BXS_TILE tokens at a time."""
    H0, BxS, H1 = output_sb.shape
    x_sb = load_input_to_sbuf(input_hbm, output_sb, num_H_shards, hidden_dim_tp=hidden_dim_tp)
    gamma_sb = nl.ndarray((H0, H1), dtype=gamma.dtype, buffer=nl.sbuf, name="rmsnorm_gamma")
    load_gamma_to_sbuf(gamma, gamma_sb, num_H_shards, hidden_dim_tp=hidden_dim_tp)
    eps_sb = nl.ndarray((H0, 1), dtype=nl.float32, buffer=nl.sbuf, name="rmsnorm_eps")
    nisa.memset(eps_sb, value=eps)
    ones = nl.ndarray((H0, H0), dtype=nl.float32, buffer=nl.sbuf, name="rmsnorm_mm_reduced_const")
    nisa.memset(ones, value=1.0)

    for b0 in range(0, BxS, BXS_TILE):
        n = min(BXS_TILE, BxS - b0)
        gamma_b = gamma_sb.ap(pattern=[[H1, H0], [0, n], [1, H1]], offset=0, dtype=gamma_sb.dtype)
        _process_rmsnorm_tile(x_sb.slice(dim=1, start=b0, end=b0 + n), gamma_b,
                              output_sb.slice(dim=1, start=b0, end=b0 + n), eps_sb, ones, hidden_actual)


def _process_rmsnorm_tile(x, gamma_b, out, eps_sb, ones, hidden_actual):
    """out = (x * gamma) * rsqrt(colsum(x^2) / hidden_actual + eps), all intermediates fp32."""
    H0, n, H1 = x.shape
    square = nl.ndarray((H0, n, H1), dtype=nl.float32, buffer=nl.sbuf, name="rmsnorm_square")
    nisa.activation(square[...], op=nl.square, data=x)
    reduced = nl.ndarray((H0, n), dtype=nl.float32, buffer=nl.sbuf, name="rmsnorm_reduced_square")
    nisa.tensor_reduce(reduced[...], nl.add, square[...], axis=2)

    gamma_mult = nl.ndarray((H0, n, H1), dtype=nl.float32, buffer=nl.sbuf, name="rmsnorm_gamma_mult")
    nisa.tensor_tensor(gamma_mult, x, gamma_b, nl.multiply)

    # Cross-partition sum on TensorE: an all-ones stationary gives every partition the column sum.
    total = nl.ndarray((H0, n), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(stationary=ones, moving=reduced, dst=total)

    eps_b = eps_sb.ap(pattern=[[1, H0], [1, 1]], offset=0, dtype=nl.float32)
    nisa.activation(reduced[...], op=nl.rsqrt, data=total[...], scale=1.0 / hidden_actual, bias=eps_b)
    rstd_b = reduced.ap(pattern=[[n, H0], [1, n], [0, H1]], offset=0, dtype=nl.float32)
    nisa.tensor_tensor(out, gamma_mult, rstd_b, nl.multiply)
