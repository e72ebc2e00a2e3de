"""The whole GDN layer in one launch, `gdn_layer_tkg`: input RMSNorm, the block, out_proj.

The decoder layer runs input_layernorm, then the gated delta-net (in_proj .. RMSNormGated, then
out_proj), then adds the residual. gdn_block_tkg_pool stops before out_proj, so a serving stack
would launch the norm, the block and out_proj apart, the activations through HBM between them.
Here the tokens are normalised on chip (kernels/input_rmsnorm.py), the block's phases run on them
as in the pool form (kernels/gdn_block.py), and the gated norm's output goes straight into
out_proj (kernels/out_proj.py), whose weights stream behind in_proj's while the recurrence
computes. What leaves the chip is this rank's partial sum of the output projection; the
all-reduce across tensor-parallel ranks and the residual add are the caller's.
"""
import nki
import nki.language as nl

from .block_plan import activation_column_bytes
from .gdn_block import block_phases, ready_first_plan
from .gdn_block_checks import check_layer_args, check_slot_args
from .in_proj import BF16_BYTES, load_tokens
from .input_rmsnorm import input_rmsnorm, load_norm_row
from .out_proj import OutProj, out_proj
from .slots import Slots

# SBUF per partition that z's preallocated weight chunks, the activations and W_out's early chunks
# share where every weight streams on one queue: the rest of the usable SBUF holds the state ring
# and the stages' temporaries (checked with nkicpu's capacity accounting at every sweep shard,
# B = 1 .. 64 and T up to 8, one core and two).
OUT_AHEAD_SBUF_BYTES = 144 * 1024


@nki.jit
def gdn_layer_tkg(hidden, input_norm_weight, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight,
                  conv_state_pool, A_log, dt_bias, norm_weight, recurrent_state_pool, W_out,
                  read_indices, write_indices):
    """One decode step of a Qwen3.5 / Qwen3-Next gated delta-net layer on one tensor-parallel
    rank, from the residual stream to this rank's share of out_proj, on state pools read and
    written in place by slot (gdn_block_tkg_pool's).

    Dimensions:
        As gdn_block_tkg: B, T (1 .. 8), H, nk, nv, dk, dv, K of this rank's shard;
        value_dim = nv * dv.

    Args:
        hidden: [B, T, H] @ HBM, bf16: the layer's input (the residual stream, on every rank).
        input_norm_weight: [H] @ HBM, fp32: input_layernorm.weight as transformers stores it
            (zero-centred: the norm multiplies by 1 + w).
        W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state_pool, A_log, dt_bias,
            norm_weight, recurrent_state_pool, read_indices, write_indices: as
            gdn_block_tkg_pool, for this rank's heads.
        W_out: [value_dim, H] @ HBM, bf16: out_proj.weight.T, the rows of this rank's value
            heads.

    Returns:
        partial: [B, T, H] @ shared HBM, fp32: this rank's out_proj sum, before the all-reduce
            (fp32: the sums leave PSUM exact, and ranks added in fp32 round once, as one rank's
            would); a padding row's rows exactly 0.
        conv_state_pool, recurrent_state_pool: the pools (the same tensors), as
            gdn_block_tkg_pool's.

    Notes:
        - The input norm is transformers' Qwen3NextRMSNorm / Qwen3_5RMSNorm: fp32 statistics,
          eps 1e-6 (rmsnorm_gated.RMSNORM_EPS, every Qwen3.5 and Qwen3-Next config's), rounded
          to bf16 once; it runs on the tokens on chip, before any projection.
        - Nothing between the input norm and out_proj leaves the chip. W_out's first chunks, as
          many as out_weights_ahead leaves room for, are issued behind in_proj's weights and land
          while the recurrence computes; the rest stream after them.
        - gdn_layer_tkg[2] (LNC=2): each program projects its own value heads over every column;
          the two sums are added through partial itself after a core barrier (out_proj.py).
        - Check the indices on the host first (kernels.check_pool_indices), as for the pool form.

    Pseudocode:
        x = rmsnorm(hidden, 1 + input_norm_weight)                  # bf16
        y, pools = gdn_block_tkg_pool(x, ..., read_indices, write_indices)
        partial = y.astype(float32) @ W_out.astype(float32)
    """
    p = ready_first_plan(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state_pool,
                         A_log, dt_bias, norm_weight, recurrent_state_pool, pooled=True)
    check_layer_args(input_norm_weight, W_out, p.H, p.nv * p.dv)
    check_slot_args(read_indices, write_indices, p.B, p.T)
    p.slots = Slots(read_indices, write_indices, recurrent_state_pool.shape[0], p)
    op = OutProj(W_out, p.h0, p.nh, p.dv, p.N, out_weights_ahead(p))
    p.later_loads = op.ahead
    partial = nl.ndarray((p.B, p.T, p.H), nl.float32, buffer=nl.shared_hbm, name="partial")
    x = input_rmsnorm(load_tokens(hidden), load_norm_row(input_norm_weight))
    y = block_phases(p, x, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state_pool, A_log,
                     dt_bias, norm_weight, recurrent_state_pool, conv_state_pool,
                     recurrent_state_pool)
    out_proj(partial.reshape((p.N, p.H)), y, op, p.weight_queue)
    return partial, conv_state_pool, recurrent_state_pool


def out_weights_ahead(p):
    """SBUF bytes per partition W_out's early chunks may take. Only where every weight streams on
    one queue (block_plan.one_weight_queue: z goes last, its chunks all allocated before the
    conv), so that they follow z's on that queue, and within OUT_AHEAD_SBUF_BYTES less z's
    chunks and this batch's activations (the normalised copy of hidden counted); elsewhere the
    weight streams when out_proj runs."""
    if p.weight_queue is None:
        return 0
    z_bytes = p.H * p.nh * p.dv * BF16_BYTES // nl.tile_size.pmax
    used = p.N * (activation_column_bytes(p.H, p.nk, p.nv) + 2 * (p.H // nl.tile_size.pmax))
    return max(0, OUT_AHEAD_SBUF_BYTES - z_bytes - used)
