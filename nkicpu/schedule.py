"""When each recorded instruction runs on a trn2 NeuronCore: a small event-driven simulation.

The model, in four rules:

1. Queues. Each compute engine (TensorE, VectorE, ScalarE, GpSimd) runs its instructions one at a
   time, in program order. DMA transfers go to `DMA_QUEUES` queues, assigned round-robin in
   program order (the 1st, 5th, 9th ... `dma_copy` to "DMA q0", the 2nd, 6th ... to "DMA q1", and
   so on). A queue is in order too: a transfer whose inputs are not ready holds up the ones behind
   it, as on the hardware. Transfers on different queues overlap.
2. Dependencies. An instruction waits for every earlier instruction whose memory it must not
   overtake: it reads what the other wrote (read after write), writes what the other read (write
   after read) or writes what the other wrote (write after write). Two accesses conflict when they
   share a storage element of the same allocation. Explicit `depends_on` edges count too.
3. Compute engines. An instruction starts when its engine is free and its producers have ended,
   and keeps the engine busy for `costs.engine_us(ins)`.
4. DMA. A transfer is triggered, in queue order, once its producers have ended; after a fixed
   latency its data starts to move, once the transfer ahead of it in the queue has finished. All
   transfers moving data share the core's DMA bandwidth (368 GB/s): each gets an equal share, but
   never more than the engines it spreads over can move (a transfer over few partitions uses few
   engines), and what one cannot use goes to the others ("max-min fair" sharing). Rates change
   only when a transfer starts or ends, so the simulation steps from event to event.
"""
import functools
import heapq
import itertools
from collections import deque
from dataclasses import dataclass

import numpy as np

from . import costs

ENGINE_LANES = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimd"}


@dataclass
class Slot:
    """When one instruction ran. For a DMA, start/end are when its data moved."""
    index: int
    lane: str
    ready_us: float      # when its last producer ended (0 if none)
    start_us: float
    end_us: float
    deps: tuple          # indices of the instructions it waited for
    transfer: costs.Transfer = None  # a DMA's cost


def lanes(instructions):
    """The queue (timeline lane) of every instruction: its engine, or a DMA queue round-robin."""
    dma = itertools.count()
    return [ENGINE_LANES[i.engine] if i.engine != "dma" else f"DMA q{next(dma) % costs.DMA_QUEUES}"
            for i in instructions]


# -- dependencies --------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _row_major(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _merged(pattern):
    """The [stride, count] steps of an access without size-1 and broadcast (stride-0) steps, each
    step merged into the next inner one when together they are contiguous: one storage set, fewer steps."""
    merged = []
    for stride, count in reversed(pattern):      # innermost first
        if count == 1 or stride == 0:
            continue
        if merged and stride == merged[-1][0] * merged[-1][1]:
            merged[-1][1] *= count
        else:
            merged.append([stride, count])
    return [tuple(step) for step in reversed(merged)]


def _box(access, shape):
    """The access as a box in its allocation's coordinates: (low corner, high corner, exact).

    Most accesses are slices, possibly reshaped: each step walks one dimension of the allocation,
    or several whole dimensions, without wrapping, so the access is exactly a box. Otherwise the
    box is a conservative bound (the rows it spans, every column) and `exact` is False. With no
    shape known, the allocation is one flat dimension.
    """
    first, last = access.span()
    if shape is None:
        steps = _merged(access.pattern)
        return (first,), (last,), not steps or steps == [(1, last - first + 1)]
    strides = _row_major(shape)
    dim_of = {strides[d]: d for d in range(len(shape)) if shape[d] > 1}
    corner, rest = [], access.offset
    for stride in strides:
        q, rest = divmod(rest, stride)
        corner.append(q)
    lo, hi, used = list(corner), list(corner), set()
    for stride, count in _merged(access.pattern):
        while count > 1:
            d = dim_of.get(stride)
            if d is None or d in used or (corner[d] + count > shape[d] and (corner[d] or count % shape[d])):
                bound_hi = [last // strides[0]] + [n - 1 for n in shape[1:]]
                return (first // strides[0],) + (0,) * (len(shape) - 1), tuple(bound_hi), False
            used.add(d)
            if corner[d] + count <= shape[d]:
                hi[d] = corner[d] + count - 1
                break
            hi[d] = shape[d] - 1                 # whole dimension d, and the rest in the next outer one
            stride, count = stride * shape[d], count // shape[d]
    return tuple(lo), tuple(hi), True


@functools.lru_cache(maxsize=256)
def _runs(access):
    """The access as contiguous runs of storage: sorted run starts, and the run length."""
    steps = _merged(access.pattern)
    run = steps[-1][1] if steps and steps[-1][0] == 1 else 1
    starts = np.array([access.offset], dtype=np.int64)
    for stride, count in (steps[:-1] if run > 1 else steps):
        starts = (starts[:, None] + np.arange(count, dtype=np.int64) * stride).ravel()
    return np.unique(starts), run


def _overlap(a, b):
    """Exactly: do two accesses to one allocation share a storage element? (Run by run, so a large
    access of long contiguous runs costs little.)"""
    (sa, ra), (sb, rb) = _runs(a), _runs(b)
    k = np.searchsorted(sb, sa + ra - 1, side="right") - 1   # the last run of b starting before each run of a ends
    hit = k >= 0
    return bool(np.any(sb[k[hit]] + rb - 1 >= sa[hit]))


@dataclass
class _Entry:
    index: int
    access: object
    lo: tuple
    hi: tuple
    exact: bool

    def meets(self, lo, hi):
        for a, b, low, high in zip(self.lo, self.hi, lo, hi):
            if a > high or b < low:
                return False
        return True

    def inside(self, lo, hi):
        for a, b, low, high in zip(self.lo, self.hi, lo, hi):
            if a < low or b > high:
                return False
        return True


class _Footprints:
    """The earlier accesses to one allocation that a new access may have to wait for.

    They are filed in buckets along the allocation's last dimension, so a small slice is compared
    only with accesses near it (an access spanning many buckets is filed once, as "wide"), and
    reads apart from writes, since two reads never conflict. A write that covers an earlier access
    replaces it: whoever conflicts with the old access also conflicts with the write, which itself
    waited for the old access, so no ordering is lost.
    """

    BUCKETS = 256
    WIDE = 8        # an access spanning more buckets than this is filed as wide

    def __init__(self, shape):
        self.width = -(-shape[-1] // self.BUCKETS) if shape else None
        self.reads, self.writes = {}, {}     # bucket (None: wide) -> entries

    def _keys(self, lo, hi):
        if self.width is None:
            return [None]
        first, last = lo[-1] // self.width, hi[-1] // self.width
        return [None] if last - first >= self.WIDE else list(range(first, last + 1))

    def _lists(self, kind, keys):
        """The bucket lists an access with these keys can meet (a wide one meets them all)."""
        return list(kind) if keys == [None] else keys + [None]

    def conflicts(self, access, box, is_write):
        lo, hi, exact = box
        keys = self._keys(lo, hi)
        found, seen = set(), set()
        for kind in ((self.reads, self.writes) if is_write else (self.writes,)):
            for key in self._lists(kind, keys):
                for e in kind.get(key, ()):
                    if id(e) in seen or e.index in found:
                        continue
                    seen.add(id(e))
                    if e.meets(lo, hi) and (exact and e.exact or _overlap(access, e.access)):
                        found.add(e.index)
        return found

    def add(self, index, access, box, is_write):
        lo, hi, exact = box
        keys = self._keys(lo, hi)
        if is_write and exact:  # an entry inside this box is filed under no key outside these lists
            for kind in (self.reads, self.writes):
                for key in self._lists(kind, keys):
                    if key in kind:
                        kind[key] = [e for e in kind[key] if not e.inside(lo, hi)]
        entry = _Entry(index, access, lo, hi, exact)
        for key in keys:
            (self.writes if is_write else self.reads).setdefault(key, []).append(entry)


def dependencies(instructions, shapes=None):
    """For each instruction, the sorted indices of the earlier instructions it must wait for.

    Waits implied by others may be left out (A waits for B, B for C: A need not list C).
    shapes: allocation id -> shape (`Capture.allocations` holds them); it only makes the search
    faster, the answer is the same without it.
    """
    shapes = shapes or {}
    footprints = {}
    result = []
    for ins in instructions:
        accesses = [(a, False) for a in ins.reads] + [(a, True) for a in ins.writes]
        boxes = [_box(a, shapes.get(a.alloc)) for a, _ in accesses]
        deps = set(ins.depends_on)
        for (a, is_write), box in zip(accesses, boxes):
            if a.alloc in footprints:
                deps |= footprints[a.alloc].conflicts(a, box, is_write)
        for (a, is_write), box in zip(accesses, boxes):
            if a.alloc not in footprints:
                footprints[a.alloc] = _Footprints(shapes.get(a.alloc))
            footprints[a.alloc].add(ins.index, a, box, is_write)
        deps.discard(ins.index)
        result.append(tuple(sorted(deps)))
    return result


# -- the simulation ------------------------------------------------------------------------------

def _fair_rates(moving, caps):
    """Share the core's DMA bandwidth among the transfers moving data: max-min fair with caps."""
    rates, left = {}, costs.BYTES_PER_US
    ordered = sorted(moving, key=lambda i: caps[i])
    for k, i in enumerate(ordered):
        rates[i] = min(caps[i], left / (len(ordered) - k))
        left -= rates[i]
    return rates


class _Simulation:
    def __init__(self, instructions, deps, lane_of):
        self.ins = instructions
        self.deps = deps
        self.lane_of = lane_of
        self.waiting = [len(d) for d in deps]            # producers that have not ended yet
        self.consumers = [[] for _ in instructions]
        for i, ds in enumerate(deps):
            for d in ds:
                self.consumers[d].append(i)
        self.queues = {}                                 # lane -> instructions not yet started
        for i, lane in enumerate(lane_of):
            self.queues.setdefault(lane, deque()).append(i)
        self.busy = {lane: False for lane in self.queues}  # engine running / DMA queue moving data
        self.arrived = {lane: deque() for lane in self.queues}  # DMAs past their latency, in order
        self.transfers = {i: costs.transfer(x) for i, x in enumerate(instructions) if x.engine == "dma"}
        self.remaining = {}                              # DMA moving data -> work bytes left
        self.ready = [0.0] * len(instructions)
        self.start = [None] * len(instructions)
        self.end = [None] * len(instructions)
        self.timers = []                                 # heap of (time, order, kind, index)
        self.order = itertools.count()
        self.now = 0.0

    def run(self):
        self._start_what_can()
        while self.timers or self.remaining:
            self._advance()
            self._start_what_can()
        stuck = [i for i, e in enumerate(self.end) if e is None]
        if stuck:
            raise RuntimeError(f"nkicpu.schedule: instructions {stuck[:5]} never became ready; a depends_on "
                               f"edge to a later instruction made a cycle")
        return [Slot(i, self.lane_of[i], self.ready[i], self.start[i], self.end[i], self.deps[i],
                     self.transfers.get(i)) for i in range(len(self.ins))]

    def _timer(self, time, kind, i):
        heapq.heappush(self.timers, (time, next(self.order), kind, i))

    def _start_what_can(self):
        for lane, queue in self.queues.items():
            if lane.startswith("DMA"):
                while queue and self.waiting[queue[0]] == 0:   # trigger in order
                    i = queue.popleft()
                    self._timer(self.now + self.transfers[i].latency_us, "arrive", i)
                if not self.busy[lane] and self.arrived[lane]:
                    i = self.arrived[lane].popleft()
                    self.busy[lane] = True
                    self.start[i] = self.now
                    self.remaining[i] = self.transfers[i].work_bytes
            elif not self.busy[lane] and queue and self.waiting[queue[0]] == 0:
                i = queue.popleft()
                self.busy[lane] = True
                self.start[i] = self.now
                self._timer(self.now + costs.engine_us(self.ins[i]), "end", i)

    def _advance(self):
        """Move time to the next event: a timer, or the first moving transfer to finish."""
        caps = {i: self.transfers[i].max_bytes_per_us for i in self.remaining}
        rates = _fair_rates(self.remaining, caps)
        finish = {i: self.now + left / rates[i] for i, left in self.remaining.items()}
        t = min(list(finish.values()) + ([self.timers[0][0]] if self.timers else []))
        for i in list(self.remaining):
            if finish[i] <= t:
                del self.remaining[i]
                self._finish(i, t)
            else:
                self.remaining[i] -= rates[i] * (t - self.now)
        self.now = t
        while self.timers and self.timers[0][0] <= t:
            _, _, kind, i = heapq.heappop(self.timers)
            if kind == "arrive":
                self.arrived[self.lane_of[i]].append(i)
            else:
                self._finish(i, t)

    def _finish(self, i, t):
        self.end[i] = t
        self.busy[self.lane_of[i]] = False
        for c in self.consumers[i]:
            self.waiting[c] -= 1
            self.ready[c] = max(self.ready[c], t)


def schedule(instructions, shapes=None):
    """Start and end time (microseconds) of every instruction, as a list of `Slot`s in program order."""
    return _Simulation(instructions, dependencies(instructions, shapes), lanes(instructions)).run()
