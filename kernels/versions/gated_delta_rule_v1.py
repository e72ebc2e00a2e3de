"""Stage 4, version 1: the gated delta rule one (batch row, value head) pair at a time.

The plainest form: a pair's state S [dk, dv] loads with row i on partition i, its q and k load
as columns [dk, 1], and the formula runs in its written order on VectorE, ScalarE and TensorE.
"""
import nki
import nki.language as nl
import nki.isa as nisa

from ..gated_delta_rule import L2NORM_EPS, check_delta_rule_inputs


@nki.jit
def gated_delta_rule_v1(q, k, v, a, b, A_log, dt_bias, recurrent_state):
    """Stage 4 HBM to HBM, one (b, h) pair after another.

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
        - About 22 instructions and 10 DMAs per pair, each pair after the one before.

    Pseudocode:
        for b_, h in pairs:
            kq = l2norm([k[b_, h], q[b_, h] * dk ** -0.5])          # [dk, 2] columns
            eg, beta = exp(g[b_, h]), sigmoid(b[b_, h])              # on one partition
            S = recurrent_state[b_, h]                               # [dk, dv]
            delta = (v[b_, h] - eg * k^T S) * beta                   # a row [1, dv]
            S = eg * S + outer(k, delta)
            o[b_, h] = q^T S; new_state[b_, h] = S
    """
    check_delta_rule_inputs(q, k, v, a, b, A_log, dt_bias, recurrent_state)
    B, nv, dk = q.shape
    dv = v.shape[2]
    o = nl.ndarray((B, nv, dv), nl.bfloat16, buffer=nl.shared_hbm, name="o")
    new_state = nl.ndarray((B, nv, dk, dv), nl.float32, buffer=nl.shared_hbm, name="new_state")
    ones = nl.ndarray((dk, dk), nl.float32, name="ones")   # sums over partitions, broadcasts
    nisa.memset(ones, 1.0)
    for bi in range(B):
        for h in range(nv):
            ins = (q, k, v, a, b, A_log, dt_bias, recurrent_state)
            _pair(o, new_state, ins, bi, h, ones)
    return o, new_state


def _pair(o, new_state, ins, bi, h, ones):
    """One decode step of pair (bi, h): writes o[bi, h] and new_state[bi, h]."""
    q, k, v, a, b, A_log, dt_bias, recurrent_state = ins
    dk = q.shape[2]
    dv = v.shape[2]
    S = nl.ndarray((dk, dv), nl.float32, name="S")
    nisa.dma_copy(S, recurrent_state[bi, h])               # one 512 B row per partition
    qk = _normalized_kq(q, k, bi, h, ones)
    gates = _pair_gates(a, b, A_log, dt_bias, bi, h)       # [1, 2]: exp(g), beta
    # k^T S, q^T S as rows [2, dv]: the [k, q] columns are the stationary, S the moving
    kS = nl.ndarray((2, dv), nl.float32, buffer=nl.psum, name="kS_qS")
    nisa.nc_matmul(kS, qk, S)
    v_row = nl.ndarray((1, dv), v.dtype, name="v_row")
    nisa.dma_copy(v_row, v[bi, h:h + 1])
    delta = nl.ndarray((1, dv), nl.float32, name="delta")    # (v - exp(g) k^T S) beta
    nisa.tensor_scalar(delta, kS[0:1, :], op0=nl.multiply, operand0=gates[:, 0:1])
    nisa.tensor_tensor(delta, v_row, delta, op=nl.subtract)
    nisa.tensor_scalar(delta, delta, op0=nl.multiply, operand0=gates[:, 1:2])
    # k as a row [1, dk] for the outer product k delta^T (a matmul over one partition)
    k_ps = nl.ndarray((1, dk), nl.float32, buffer=nl.psum, name="k_row_psum")
    nisa.nc_transpose(k_ps, qk[:, 0:1], engine=nisa.engine.tensor)
    k_row = nl.ndarray((1, dk), nl.float32, name="k_row")
    nisa.tensor_copy(k_row, k_ps)
    outer = nl.ndarray((dk, dv), nl.float32, buffer=nl.psum, name="outer")
    nisa.nc_matmul(outer, k_row, delta)
    # exp(g) on every partition: ones[1, dk]^T @ gates
    g_ps = nl.ndarray((dk, 2), nl.float32, buffer=nl.psum, name="gates_bcast")
    nisa.nc_matmul(g_ps, ones[0:1, 0:dk], gates)
    eg = nl.ndarray((dk, 1), nl.float32, name="decay")
    nisa.tensor_copy(eg, g_ps[:, 0:1])
    S_new = nl.ndarray((dk, dv), nl.float32, name="S_new")
    nisa.scalar_tensor_tensor(S_new, data=S, op0=nl.multiply, operand0=eg, op1=nl.add,
                              operand1=outer)                # exp(g) S + k delta^T
    o_ps = nl.ndarray((1, dv), nl.float32, buffer=nl.psum, name="o_psum")
    nisa.nc_matmul(o_ps, qk[:, 1:2], S_new)                  # q^T S_new
    o_row = nl.ndarray((1, dv), nl.bfloat16, name="o_row")
    nisa.tensor_copy(o_row, o_ps)
    nisa.dma_copy(o[bi, h:h + 1], o_row)
    nisa.dma_copy(new_state[bi, h], S_new)


def _normalized_kq(q, k, bi, h, ones):
    """[l2norm(k), l2norm(q) dk**-0.5] of pair (bi, h) as columns: [dk, 2] fp32."""
    dk = q.shape[2]
    raw = nl.ndarray((dk, 2), q.dtype, name="kq_raw")
    nisa.dma_copy(raw[:, 0:1], k[bi, h].reshape((dk, 1)))   # 2 bytes per partition
    nisa.dma_copy(raw[:, 1:2], q[bi, h].reshape((dk, 1)))
    sq = nl.ndarray((dk, 2), nl.float32, name="kq_squares")
    nisa.activation(sq, op=nl.square, data=raw)
    ss = nl.ndarray((dk, 2), nl.float32, buffer=nl.psum, name="kq_sumsq")
    nisa.nc_matmul(ss, ones, sq)                             # the sums on every partition
    rstd = nl.ndarray((dk, 2), nl.float32, name="kq_rstd")
    nisa.activation(rstd, op=nl.rsqrt, data=ss, bias=L2NORM_EPS)
    nisa.tensor_scalar(rstd[:, 1:2], rstd[:, 1:2], op0=nl.multiply, operand0=dk ** -0.5)
    qk = nl.ndarray((dk, 2), nl.float32, name="kq")
    nisa.tensor_tensor(qk, raw, rstd, op=nl.multiply)
    return qk


def _pair_gates(a, b, A_log, dt_bias, bi, h):
    """exp(g) and beta of pair (bi, h) on one partition: [1, 2] fp32."""
    x = nl.ndarray((1, 4), nl.float32, name="gate_inputs")   # a, b, A_log, dt_bias
    nisa.dma_copy(x[:, 0:1], a[bi, h:h + 1].reshape((1, 1)))
    nisa.dma_copy(x[:, 1:2], b[bi, h:h + 1].reshape((1, 1)))
    nisa.dma_copy(x[:, 2:3], A_log[h:h + 1].reshape((1, 1)))
    nisa.dma_copy(x[:, 3:4], dt_bias[h:h + 1].reshape((1, 1)))
    sp = nl.ndarray((1, 1), nl.float32, name="softplus")
    nisa.activation(sp, op=nl.softplus, data=x[:, 0:1], bias=x[:, 3:4])
    neg_A = nl.ndarray((1, 1), nl.float32, name="neg_A")
    nisa.activation(neg_A, op=nl.exp, data=x[:, 2:3])
    nisa.tensor_scalar(neg_A, neg_A, op0=nl.multiply, operand0=-1.0)
    gates = nl.ndarray((1, 2), nl.float32, name="gates")
    nisa.activation(gates[:, 0:1], op=nl.exp, data=sp, scale=neg_A)
    nisa.activation(gates[:, 1:2], op=nl.sigmoid, data=x[:, 1:2])
    return gates
