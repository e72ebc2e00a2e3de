"""Stage 4, version 2: every (b, h) pair of a chunk in one instruction, the state unfolded.

q, k, v, the gates, delta and o lie channel-major, [d, pairs], as in the final kernel, so one
instruction serves a whole chunk. The state streams in sub-chunks, one [dk, dv] pair per
partition tile (row i on partition i: 512 B DMA runs at dv = 128), through ONE buffer: a
sub-chunk loads, computes and stores before the next one loads.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from ..delta_rule_pairs import PMAX, QUADRANT
from ..gated_delta_rule import (check_delta_rule_inputs, delta_and_output, kq_products,
                                load_delta_rule_inputs, rstd_qk, scale_qk, square_qk, sum_kq,
                                sum_qk_squares)
from .delta_rule_fold import (block_diagonal_qk, broadcast_gates, decay_diagonals, fold_constants,
                              fold_decay, fold_ones, move_state, outer_operands, rank1_update,
                              spread_gates, state_products, stream_steps)
from ..layout import store_rows


@nki.jit
def gated_delta_rule_v2(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """Stage 4 HBM to HBM: pairs batched channel-major, the state unfolded, one state buffer.

    Dimensions:
        B: batch; nv: value heads (<= 128); dk: head_k_dim (<= 128); dv: head_v_dim (<= 128)

    Args:
        As gated_delta_rule_kernel: q, k [B, nv, dk], v [B, nv, dv], a, b [B, nv] bf16;
        A_log, dt_bias [nv] fp32; recurrent_state [B, nv, dk, dv] fp32, read only.

    Returns:
        o (nl.ndarray): [B, nv, dv] @ shared HBM, bf16.
        new_state (nl.ndarray): [B, nv, dk, dv] @ shared HBM, fp32.

    Notes:
        - Checks as gated_delta_rule_kernel (AssertionError naming the argument).
        - fold (1, R): one state row per partition, R = 128 // dk pairs per tile (a divisor
          of 32).

    Pseudocode:
        as gated_delta_rule_kernel, sub-chunk after sub-chunk:
            load S; [S^T k, S^T q]; delta, o; S = exp(g) S + k delta^T; store S
    """
    check_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    R = PMAX // q.shape[2]
    while QUADRANT % R:
        R -= 1
    return batched_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state, (1, R), 1, 0)


def batched_kernel(q, k, v, a, b, A_log, dt_bias, recurrent_state, fold, slots, ahead):
    """The stage HBM to HBM, the state in `fold` (F, R) layout, sub-chunk i in buffer i % slots,
    its load issued `ahead` sub-chunks before it computes (versions 2 and 3: 1 slot, 0 ahead).

    Program order is the schedule: a load issued after the store before it queues behind it.
    """
    B, nv, dk = q.shape
    dv = v.shape[2]
    o = nl.ndarray((B, nv, dv), nl.bfloat16, buffer=nl.shared_hbm, name="o")
    new_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm, name="new_state")
    qT, kT, vT, a_sb, b_sb, A_sb, dt_sb = load_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias)
    o_sb = nl.ndarray((dv, B, nv), nl.bfloat16, name="o_sb")
    ones = fold_ones(dk, dv, nv)                          # [P, P], P >= the state's partitions
    assert ones.shape[0] >= fold[1] * (dk // fold[0]), "fold: more partitions than fold_ones"
    consts = fold_constants(dk, fold, ones)
    gates = _gates(a_sb, b_sb, A_sb, dt_sb)               # exp(g), beta: [nv, 2, B]
    steps = stream_steps(B, nv, fold)
    F, R = fold
    tiles = -(-steps[0][3] // R)
    S = nl.ndarray((R * (dk // F), slots, tiles, F * dv), nl.float32, name="state")
    ins = (qT, kT, vT, gates, o_sb.dtype, consts, fold)
    chunk = {}
    for i in range(ahead):
        move_state(S, recurrent_state, steps, i, fold, load=True)
    for i in range(len(steps)):
        b0, bc, s0, mc = steps[i]
        if s0 == 0:                                       # a chunk starts: its per-pair inputs
            chunk = _prepare_chunk({"b0": b0, "bc": bc}, ins)
        move_state(S, recurrent_state, steps, i + ahead, fold, load=True)   # none past the end
        kvsq = state_products(S, chunk["x"], steps, i, fold)             # S^T [k, q]
        delta = delta_and_output(chunk, kvsq, s0, mc)
        lhs, rhs = outer_operands(chunk["qk"], delta, s0, consts)
        diag = decay_diagonals(chunk["decay"], s0, mc, fold, consts)
        rank1_update(S, i, lhs, rhs, diag, fold)           # S = exp(g) S + k delta^T
        move_state(S, new_state, steps, i, fold, load=False)
        if s0 + mc == bc * nv:                             # the chunk's last sub-chunk
            nisa.tensor_copy(o_sb[:, b0:b0 + bc, :], chunk["o"].reshape_dim(1, (bc, nv)))
    store_rows(o.reshape((B * nv, dv)), o_sb.reshape((dv, B * nv)))
    return o, new_state


def _gates(a, b, A_log, dt_bias):
    """exp(g), g = -exp(A_log) * softplus(a + dt_bias), and beta = sigmoid(b): [nv, 2, B] fp32.

    Heads on partitions, so A_log and dt_bias are ScalarE's per-partition scale and bias.
    """
    nv, B = a.shape
    sp = nl.ndarray((nv, B), nl.float32, name="softplus")
    nisa.activation(sp, op=nl.softplus, data=a, bias=dt_bias)               # softplus(a + dt_bias)
    neg_A = nl.ndarray((nv, 1), nl.float32, name="neg_A")
    nisa.activation(neg_A, op=nl.exp, data=A_log)
    nisa.tensor_scalar(neg_A, neg_A, op0=nl.multiply, operand0=-1.0)       # -exp(A_log)
    gates = nl.ndarray((nv, 2, B), nl.float32, name="gates")
    nisa.activation(gates[:, 0, :], op=nl.exp, data=sp, scale=neg_A)       # exp(g)
    nisa.activation(gates[:, 1, :], op=nl.sigmoid, data=b)                 # beta, fp32
    return gates


def _prepare_chunk(c, ins):
    """What every pair of chunk c (batch rows c["b0"] .. c["b0"] + c["bc"] - 1, n = bc * nv pairs)
    needs before its state streams; returns c.

    ins = (q, k, v, gates, o dtype, fold constants, fold). Adds to c: v, o [dv, n] the chunk's v
    and output; gbc [P, 2, >= n] exp(g), beta per pair on every partition; qk [dk, n, 2]
    l2norm(k), l2norm(q) dk**-0.5; decay [R * Pd, tiles] folded; kq PSUM [dv, n] k . q; x the
    block-diagonal [k, q].
    """
    q, k, v, gates, o_dtype, consts, fold = ins
    dv, nv, _ = v.shape
    b0, bc = c["b0"], c["bc"]
    spread = spread_gates(gates, b0, bc, consts)
    squares = square_qk(q, k, b0, bc, nv)
    c["v"] = nl.ndarray((dv, bc * nv), v.dtype, name="v_pairs")
    nisa.tensor_copy(c["v"].reshape_dim(1, (bc, nv)), v[:, :, b0:b0 + bc].permute((0, 2, 1)),
                     engine=nisa.engine.gpsimd)
    c["o"] = nl.ndarray((dv, bc * nv), o_dtype, name="o_pairs")
    tiles = -(-bc * nv // fold[1])
    c["gbc"] = broadcast_gates(spread, tiles * fold[1], consts)
    c["qk"] = _normalize_qk(squares, q, k, b0, bc, nv, consts)
    c["decay"] = fold_decay(c["gbc"], fold, q.shape[0], consts, tiles)
    c["kq"] = _k_dot_q(c["qk"], dv, consts)
    c["x"] = block_diagonal_qk(c["qk"], fold, consts)
    return c


def _normalize_qk(sq, q, k, b0, bc, nv, consts):
    """l2norm of k and q over dk (partitions), q also times dk**-0.5: [dk, n, 2] fp32, [.., 0] = k.

    sq holds their squares (square_qk). A pair's [k, q] columns are adjacent: a 2-column moving
    tile for S^T [k, q]. Three steps, one engine each: the final kernel issues them apart.
    """
    return scale_qk(rstd_qk(sum_qk_squares(sq, consts)), q, k, b0, bc, nv)


def _k_dot_q(qk, dv, consts):
    """k . q of every pair, on every one of dv partitions: PSUM [dv, n] (a ones-matmul over dk)."""
    return sum_kq(kq_products(qk), dv, consts)
