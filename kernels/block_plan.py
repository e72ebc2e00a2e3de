"""What the shapes decide for the fused decode step, computed once, before any instruction.

Every fused composition step (3 to 7) starts its body by building its plan: a BlockPlan from its 11
arguments (the dims, every argument checked, one program taking every head), then the choices its
idea adds, each from a function below. The body's phases read the plan's fields; no field is
named after a step, and the shipped kernel, gdn_block_tkg, sets them all.
"""
import nki.isa as nisa
import nki.language as nl

from .checks import expect
from .conv1d_decode import channel_groups, window_chunks
from .gated_delta_rule import PREPARED_PAIR_BYTES, first_chunk_pairs, ring_holds_state
from .gdn_block_checks import block_dims, check_block_dtypes
from .in_proj import BF16_BYTES, MAX_BATCH, MIN_SLICE_RUN_BYTES

# SBUF per partition the fused kernel's activations may take: the rest of the usable SBUF (224 KiB
# less 16 KiB the runtime reserves) holds the delta rule's state ring (64 KiB) and the stages'
# temporaries (checked with nkicpu's capacity accounting up to Qwen3-Next-80B TP1 at B = 256).
ACTIVATION_SBUF_BYTES = 120 * 1024
# Sequences the pool form takes: kernels/slots.py holds each sequence's slot offsets on a partition
# of its own ([B, 1] and [B, T] vector offsets).
POOL_MAX_BATCH = 128
# PSUM banks gated_delta_rule_block may hold at once (its notes): z's sums may stay open through
# the recurrence only where one column group of them fits the other banks.
RECURRENCE_PSUM_BANKS = 6
# SBUF per partition the tokens' prepared first chunks may hold at once (prepare_gates,
# prepare_qk); past it (B * T large: the state streams anyway) each token prepares its own. The
# rest of the kernel fits beside it up to B * T = 256 at Qwen3-Next-80B TP4 (nkicpu's capacity
# accounting).
TOKENS_AHEAD_SBUF_BYTES = 8 * 1024


def max_columns(H, nk, nv):
    """The most activation columns (B * T) the fused step takes at these dims: in_proj's MAX_BATCH
    (a column group's token chunks each accumulate in a PSUM bank of their own) or the columns
    whose bf16 activations, 2 * (4 * nk + 5 * nv + H / 128) bytes per partition each, fit
    ACTIVATION_SBUF_BYTES, whichever is smaller."""
    return min(MAX_BATCH, ACTIVATION_SBUF_BYTES // activation_column_bytes(H, nk, nv))


def activation_column_bytes(H, nk, nv):
    """SBUF bytes per partition one activation column takes on chip: hidden (H / 128 values per
    partition), q | k, v and their conv outputs, z, o, y and a | b, all bf16."""
    return 2 * (4 * nk + 5 * nv + H // nl.tile_size.pmax)


class BlockPlan(nl.NKIObject):
    """The dims and choices of one fused decode step.

    Fields:
        B, T, N: sequences, tokens per sequence, and the columns of every activation tile
            (N = B * T: token t of sequence b in column b * T + t); N_max: the most columns the
            dims admit (max_columns); B_max: the most sequences of T tokens they admit (with
            pooled, at most POOL_MAX_BATCH).
        H, nk, nv, dk, dv, K, G, key_dim: the layer's dims (gdn_block_checks.block_dims),
            G = nv / nk, key_dim = nk * dk.
        h0, nh: this program's value heads h0 .. h0 + nh - 1; k0, nkh: the key heads they read.
        q0, nq: the key heads whose q and k columns this program projects.
        z_last: z projected after the recurrence, its weights streaming under the recurrence.
        weight_queue: the engine whose hardware-DGE queue carries every weight DMA in TensorE's
            order (nisa.engine.sync), or None: the compiler's queues.
        window_queue: the same for the conv windows' stores.
        windows_ahead: the conv windows loaded with the small inputs, ahead of the weights.
        gates_ahead: every token's gates prepared as soon as a and b are projected.
        slots: the pool form's (kernels.slots.Slots), or None: the states are the seed API's
            tensors.
        later_loads: a later stage's weight loads (SBUF tile, HBM source, ...) issued behind
            in_proj's weights (the layer's out_proj, kernels/gdn_layer.py); none in the block.
    """

    def __init__(self, hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state, A_log,
                 dt_bias, norm_weight, recurrent_state, max_tokens, pooled=False):
        B, H, nk, nv, dk, dv, K = block_dims(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b,
                                             conv_weight, conv_state, A_log, dt_bias, norm_weight,
                                             recurrent_state, max_tokens, pooled)
        check_block_dtypes(hidden, W_in_qkv, W_in_z, W_in_a, W_in_b, conv_weight, conv_state,
                           A_log, dt_bias, norm_weight, recurrent_state, pooled)
        self.B, self.H, self.nk, self.nv, self.dk, self.dv, self.K = B, H, nk, nv, dk, dv, K
        self.T = hidden.shape[1]
        self.N = B * self.T
        self.G = nv // nk
        self.key_dim = nk * dk
        self.N_max = max_columns(H, nk, nv)
        self.B_max = self.N_max // self.T
        pool_text = ""
        if pooled:
            self.B_max = min(self.B_max, POOL_MAX_BATCH)
            pool_text = (f"; and B <= {POOL_MAX_BATCH} in the pool form, whose slot offsets hold "
                         f"one sequence per partition")
        expect(B <= self.B_max, "hidden",
               f"at most B = {self.B_max} sequences of T = {self.T} tokens (B * T <= "
               f"{self.N_max}: the smaller of in_proj's {MAX_BATCH}, chunks of 128 tokens each "
               f"accumulating in its own PSUM bank, and the batch whose on-chip activations, "
               f"2 * B * T * (4 * nk + 5 * nv + H / 128) bytes per partition, fit "
               f"{ACTIVATION_SBUF_BYTES // 1024} KiB beside the state stream{pool_text})",
               f"B = {B}")
        self.h0, self.nh, self.k0, self.nkh = 0, nv, 0, nk
        self.q0, self.nq = 0, nk
        self.z_last = False
        self.weight_queue = None
        self.window_queue = None
        self.windows_ahead = False
        self.gates_ahead = False
        self.slots = None
        self.later_loads = []


def split_heads(p):
    """This program's share of an LNC launch grid: nv / programs value heads (h0 ..) and the key
    heads they read (value head h reads h // G); its own key heads' q and k columns where those
    slices of a weight row are runs of at least MIN_SLICE_RUN_BYTES, else every key head's."""
    n = nl.num_programs(axes=0)
    expect(p.nv % n == 0, "recurrent_state",
           f"num_v_heads a multiple of the {n} programs of the launch grid", p.nv)
    p.nh = p.nv // n
    p.h0 = nl.program_id(axis=0) * p.nh
    p.k0 = p.h0 // p.G
    p.nkh = (p.h0 + p.nh - 1) // p.G + 1 - p.k0
    if p.nkh < p.nk and p.nkh * p.dk * BF16_BYTES >= MIN_SLICE_RUN_BYTES:
        p.q0, p.nq = p.k0, p.nkh


def z_after_state(p):
    """Whether z goes after the recurrence: where the state's HBM passes (read once and written
    once, plus a round trip between two tokens where the recurrence's ring cannot keep it) are
    under half of z's weight bytes, so that z's weights fill the DMA queues while the delta rule
    computes."""
    passes = 2
    if not ring_holds_state(p.B, p.nh):
        passes = 2 * p.T
    state_bytes = passes * p.B * p.nh * p.dk * p.dv * 4
    return 2 * state_bytes < p.H * p.nh * p.dv * BF16_BYTES


def one_weight_queue(p):
    """nisa.engine.sync where z goes last and one column group of its sums fits the PSUM banks the
    recurrence leaves (its sums stay open through the recurrence), else None."""
    pmax = nl.tile_size.pmax
    z_banks = -(-p.N // pmax) * -(-p.nh * p.dv // nl.tile_size.psum_bank_fmax)
    if p.z_last and z_banks <= nl.tile_size.psum_num_banks - RECURRENCE_PSUM_BANKS:
        return nisa.engine.sync
    return None


def windows_fit_ahead(p):
    """Whether each conv group's window is one chunk of conv1d_decode.window_chunks (at most
    WINDOW_FREE_MAX elements per partition), so that loaded ahead it leaves the activations room."""
    tiles = [2 * p.nkh, p.nh]
    if p.nkh * p.dk < p.key_dim:
        tiles = [p.nkh, p.nh]
    for i in range(len(tiles)):
        if len(window_chunks(tiles[i], p.N, p.K)) > 1:
            return False
    return True


def gates_fit_ahead(p):
    """Whether every token's first chunk, prepared ahead, fits TOKENS_AHEAD_SBUF_BYTES."""
    return p.T * first_chunk_pairs(p.B, p.nh) * PREPARED_PAIR_BYTES <= TOKENS_AHEAD_SBUF_BYTES


def block_outputs(p, every_token=False, conv_state=None, recurrent_state=None):
    """The step's results in shared HBM: out [B, T, nv * dv] bf16, the conv windows [B, conv_dim,
    K] bf16 and the recurrent states [B, nv, dk, dv] fp32 after the last token, or with
    every_token [B, T, ...] after each token; with p.slots, the pools conv_state and
    recurrent_state themselves, written in place."""
    out = nl.ndarray((p.B, p.T, p.nv * p.dv), nl.bfloat16, buffer=nl.shared_hbm, name="out")
    if p.slots is not None:
        return out, conv_state, recurrent_state
    windows = (p.B, 2 * p.key_dim + p.nv * p.dv, p.K)
    states = (p.B, p.nv, p.dk, p.dv)
    if every_token:
        windows = (p.B, p.T) + windows[1:]
        states = (p.B, p.T) + states[1:]
    new_conv_state = nl.ndarray(windows, nl.bfloat16, buffer=nl.shared_hbm, name="new_conv_state")
    new_state = nl.ndarray(states, nl.float32, buffer=nl.shared_hbm, name="new_recurrent_state")
    return out, new_conv_state, new_state


def activation_tiles(p):
    """The tiles the projections write and the conv reads, channel-major, and the conv's channel
    groups (conv1d_decode.channel_groups): (qk [dk, 2, nq, N], q heads then k heads; v
    [dv, nh, N]; the conv outputs qk_c [dk, 2, nkh, N] and v_c [dv, nh, N]; groups)."""
    qk = nl.ndarray((p.dk, 2, p.nq, p.N), nl.bfloat16, name="qk_proj")
    v = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="v_proj")
    qk_c = nl.ndarray((p.dk, 2, p.nkh, p.N), nl.bfloat16, name="qk_conv")
    v_c = nl.ndarray((p.dv, p.nh, p.N), nl.bfloat16, name="v_conv")
    groups = channel_groups(qk_c, qk, v_c, v, p.k0, p.key_dim, 2 * p.key_dim + p.h0 * p.dv)
    return qk, v, qk_c, v_c, groups
