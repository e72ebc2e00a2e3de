# Mirrors aws-neuron/nki-library src/nkilib_src/nkilib/core/subkernels/layernorm_tkg.py
# (layernorm_tkg, shard-on-BxS path: _layernorm_tkg_shard_on_bxs, _layernorm_tkg_impl,
# _process_layernorm_tile) at commit d2ad3a579498d1888aa8740af97fd325dd5f2740. Written for this
# project, not copied: the same NKI calls and keyword forms; the engine operands the library builds
# with TensorView.get_view() are written here as the explicit `.ap()` patterns it emits.
# Not mirrored: shard_on_h and SBUF-resident outputs (the cores exchange results with nisa.sendrecv,
# which nkicpu does not model), SBUF-resident inputs, use_heap_memory.
"""LayerNorm for token generation, output hidden-on-partitions for a following sharded matmul."""
import nki
import nki.isa as nisa
import nki.language as nl

from .norm_tkg_utils import check_and_shard_tokens, load_gamma_to_sbuf, load_input_to_sbuf

SHARDING_THRESHOLD = 10    # layernorm_tkg: with LNC=2, shard tokens across the two cores above this BxS
BXS_TILE = 512             # layernorm_tkg: tokens per tile (one fp32 PSUM bank of column sums)


@nki.jit
def layernorm_tkg(input, gamma, output, beta=None, eps=1e-6):
    """LayerNorm of decode tokens, written transposed into `output` and returned.

    Dimensions:
        B, S: batch, sequence; BxS = B * S tokens
        H: hidden size = H0 * H1, H0 = 128

    Args:
        input (nl.ndarray): [B, S, H] @ HBM, bf16 or fp32.
        gamma (nl.ndarray): [1, H] @ HBM.
        output (nl.ndarray): [H0, BxS, H1] @ HBM, written and returned (an aliased output).
        beta (nl.ndarray): [1, H] @ HBM or None.
        eps (float): added to the variance.

    Returns:
        output.

    Notes:
        - Variance as E[x^2] - E[x]^2; both means come from one TensorE matmul each against a
          [H0, H0] stationary filled with 1/H.
        - Launched as kernel[2] (LNC=2), each core normalises half the tokens when BxS > 10 and is
          even; otherwise both cores compute everything.

    Pseudocode:
        x = input.reshape(BxS, H).astype(float32)
        mean = x.mean(axis=1); var = (x * x).mean(axis=1) - mean ** 2
        y = (x - mean[:, None]) * gamma / sqrt(var + eps)[:, None] + beta
        # output[h0, t, shard * H2 + h2] = y[t, shard * H0 * H2 + h0 * H2 + h2], H2 = H1 / lnc
    """
    H, lnc, t0, t1 = check_and_shard_tokens(input, gamma, output, SHARDING_THRESHOLD)

    output_sb = nl.ndarray(output.shape, dtype=input.dtype, buffer=nl.sbuf, name="layernorm_output_sb")
    output_sb_shard = output_sb.slice(dim=1, start=t0, end=t1)
    _layernorm_impl(input.flatten_dims(start_dim=0, end_dim=1).slice(dim=0, start=t0, end=t1), gamma, beta,
                    output_sb_shard, num_H_shards=lnc, hidden_actual=H, eps=eps)
    nisa.dma_copy(dst=output.slice(dim=1, start=t0, end=t1), src=output_sb_shard)
    return output


def _layernorm_impl(input_hbm, gamma, beta, output_sb, num_H_shards, hidden_actual, eps):
    H0, BxS, H1 = output_sb.shape
    x_sb = load_input_to_sbuf(input_hbm, output_sb, num_H_shards)
    gamma_sb = nl.ndarray((H0, H1), dtype=gamma.dtype, buffer=nl.sbuf, name="layernorm_gamma")
    load_gamma_to_sbuf(gamma, gamma_sb, num_H_shards)
    beta_sb = None
    if beta != None:  # noqa: E711  NKI 0.3.0 rejects `is` / `is not` in kernels (release notes)
        beta_sb = nl.ndarray((H0, H1), dtype=beta.dtype, buffer=nl.sbuf, name="layernorm_beta")
        load_gamma_to_sbuf(beta, beta_sb, num_H_shards)

    zero_bias = nl.ndarray((H0, 1), dtype=nl.float32, buffer=nl.sbuf, name="layernorm_zero_bias")
    nisa.memset(zero_bias, value=0.0)
    eps_sb = nl.ndarray((H0, 1), dtype=nl.float32, buffer=nl.sbuf, name="layernorm_eps")
    nisa.memset(eps_sb, value=eps)
    mean_const = nl.ndarray((H0, H0), dtype=nl.float32, buffer=nl.sbuf, name="layernorm_mm_reduced_const")
    nisa.memset(dst=mean_const, value=(1.0 / hidden_actual))

    for b0 in range(0, BxS, BXS_TILE):
        n = min(BXS_TILE, BxS - b0)
        broadcast = [[H1, H0], [0, n], [1, H1]]     # a [H0, H1] weight repeated for n tokens
        _process_layernorm_tile(
            x_sb.slice(dim=1, start=b0, end=b0 + n),
            gamma_sb.ap(pattern=broadcast, offset=0, dtype=gamma_sb.dtype),
            output_sb.slice(dim=1, start=b0, end=b0 + n),
            None if beta_sb == None else beta_sb.ap(pattern=broadcast, offset=0, dtype=beta_sb.dtype),  # noqa: E711
            zero_bias, eps_sb, mean_const)


def _process_layernorm_tile(x, gamma_b, out, beta_b, zero_bias, eps_sb, mean_const):
    """out = (x - E[x]) * gamma * rsqrt(E[x^2] - E[x]^2 + eps) + beta; statistics in fp32."""
    H0, n, H1 = x.shape
    square = nl.ndarray((H0, n, H1), dtype=nl.float32, buffer=nl.sbuf, name="layernorm_square")
    nisa.activation(dst=square[...], op=nl.square, data=x, bias=zero_bias)

    # Column sums of x^2 and x packed side by side in one [H0, 2n] tile (the library sends it
    # to the other core in one sendrecv when sharding on H).
    packed = nl.ndarray((H0, n * 2), dtype=nl.float32, buffer=nl.sbuf, name="layernorm_packed_reduced_sum")
    sum_sq = packed.slice(dim=1, start=0, end=n)
    sum_x = packed.slice(dim=1, start=n, end=n * 2)
    nisa.tensor_reduce(dst=sum_sq, op=nl.add, data=square[...], axis=2)
    nisa.tensor_reduce(dst=sum_x, op=nl.add, data=x, axis=2)

    mean_sq = nl.ndarray((H0, n), dtype=nl.float32, buffer=nl.psum)
    mean = nl.ndarray((H0, n), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=mean_sq, stationary=mean_const, moving=sum_sq)
    nisa.nc_matmul(dst=mean, stationary=mean_const, moving=sum_x)

    # x - E[x], with E[x] read from PSUM through a stride-0 pattern over H1.
    nisa.tensor_tensor(out, x, mean.ap(pattern=[[n, H0], [1, n], [0, H1]], offset=0, dtype=nl.float32), nl.subtract)

    # var = E[x^2] - E[x]^2, reusing the packed halves; then 1 / sqrt(var + eps).
    nisa.activation(dst=sum_sq, op=nl.square, data=mean[...], bias=zero_bias)
    nisa.tensor_tensor(sum_x, mean_sq[...], sum_sq, nl.subtract)
    rstd = sum_sq
    nisa.activation(dst=rstd, op=nl.rsqrt, data=sum_x, bias=eps_sb)

    nisa.tensor_tensor(out, out, gamma_b, nl.multiply)
    rstd_b = packed.ap(pattern=[[n * 2, H0], [1, n], [0, H1]], offset=0, dtype=nl.float32)
    nisa.tensor_tensor(out, out, rstd_b, nl.multiply)
    if beta_b != None:  # noqa: E711
        nisa.tensor_tensor(out, out, beta_b, nl.add)
