"""z's projection beside the recurrence: how the fused kernel overlaps the last weight stream with
the delta rule, through the points stage 4 hands its caller (gated_delta_rule_block's `beside`).

Where z goes after the recurrence (block_plan.z_after_state), its weight chunks stream while the
state computes, and the order of the DMA queues and of TensorE decides when each lands and is
used: engines and queues run in program order.
"""
import nki.language as nl

from .rmsnorm_gated import rmsnorm_rstd

# z's weight chunks whose matmuls go between the conv stage and the recurrence where every weight
# streams on one queue: more hold back the recurrence's first TensorE work where z has few chunks,
# fewer leave TensorE idle during the conv stage (chosen by a sweep of the shipped kernel's modeled
# time over 0 .. 12 at the book's target shards; step 6's chapter shows 0 .. 4 for step 6).
Z_CHUNKS_BEFORE_RECURRENCE = 2


class WeightsBeside(nl.NKIObject):
    """z's weight stream (an in_proj.ColumnStream) beside the recurrence: the four methods
    gated_delta_rule_tokens and gated_delta_rule_block call, in program order.

    Fields:
        z: the stream; issue_loads: its DMAs go where the first token's state loads are issued
        (its tiles allocated, not issued: the weights are on the compiler's queues), so that they
        run ahead of the state stores; fill: a chunk's matmuls go where TensorE would wait on the
        recurrence's VectorE and ScalarE work; queue: the weights' queue, which takes the last
        token's state stores behind z's chunks.
    """

    def __init__(self, z, issue_loads, fill, queue):
        self.z = z
        self.issue_loads = issue_loads
        self.fill = fill
        self.queue = queue
        self.last = False

    def token_starts(self, t, T):
        self.last = t == T - 1

    def state_loads_issued(self):
        if self.issue_loads:
            self.z.issue_loads()
            self.issue_loads = False

    def tensor_idle(self):
        # never z's last chunk: it lands last, and its matmuls and eviction here would hold the
        # recurrence's remaining in-order work behind it
        if self.fill and self.z.next < self.z.n_chunks - 1:
            self.z.sum(1)

    def store_queue(self):
        if self.last:
            return self.queue
        return None


def z_beside(z, z_last, queue, fill):
    """The recurrence's `beside` for z's stream: None where z goes first; where every weight is on
    `queue`, its chunks issued already, a chunk's matmuls in TensorE's waits if `fill` and the
    state stores behind the chunks; else z's DMAs issued by the recurrence after its first state
    loads (their tiles allocated here)."""
    if not z_last:
        return None
    if queue is None:
        z.allocate_loads()
        return WeightsBeside(z, True, False, None)
    return WeightsBeside(z, False, fill, queue)


def start_z(z, z_last, queue, hold):
    """z's stream before the conv. Where z goes first: every chunk's matmuls (hold: its last sums
    wait in PSUM until continue_z, so that VectorE, in order, reaches the conv without waiting for
    z's last weight byte). Where it goes last with every weight on `queue`: its chunks' DMAs,
    behind the other weights'."""
    if not z_last:
        z.sum(z.n_chunks, hold)
    elif queue is not None:
        z.allocate_loads()
        z.issue_loads(queue)


def continue_z(z, z_last, queue):
    """z's stream after the conv: its held sums evicted where it went first; its first
    Z_CHUNKS_BEFORE_RECURRENCE chunks' matmuls where it goes last on one queue (TensorE has no
    other work until the recurrence)."""
    if not z_last:
        z.evict()
    elif queue is not None:
        z.sum(Z_CHUNKS_BEFORE_RECURRENCE)


def finish_z(z, z_last, o=None, ones=None):
    """z's stream after the recurrence, where z goes last: its remaining chunks' matmuls. Given o
    and the ones tile, its last sums are held while the norm's rsqrt of o is issued (ScalarE then
    runs it before silu(z), whose function table loads while TensorE and VectorE finish z), and
    that rsqrt is returned (rmsnorm_gated_tile's rstd); else None."""
    if not z_last:
        return None
    if o is None:
        z.sum(z.n_chunks)
        return None
    z.sum(z.n_chunks, hold=True)
    rstd = rmsnorm_rstd(o, ones[0:o.shape[0], 0:o.shape[0]])
    z.evict()
    return rstd
