"""When each recorded instruction runs on a trn2 NeuronCore: a small event-driven simulation.

The model, in six rules:

1. Queues. Each compute engine (TensorE, VectorE, ScalarE, GpSimd) runs its instructions one at a
   time, in program order. A DMA goes to the queue of its trigger and descriptor generation
   (`dma_queue`): a hardware-DGE DMA a kernel gives a trigger engine (`dge_mode=hwdge`,
   `engine=nisa.engine.sync` or `.scalar`) to that engine's queue ("DMA SyncE", "DMA ScalarE"),
   a software-DGE DMA (`dge_mode=swdge`) to GpSimd's ("DMA GpSimd"), and every DMA whose trigger
   the compiler picks to one of `DMA_QUEUES` queues, round-robin in program order (the 1st, 5th,
   9th ... such DMA to "DMA q0", the 2nd, 6th ... to "DMA q1", and so on). A queue is in order: a
   transfer whose inputs are not ready holds up the ones behind it, as on the hardware. Transfers
   on different queues overlap. A ScalarE-triggered DMA is also an instruction in ScalarE's
   stream: the trigger takes its place in program order there (it takes no ScalarE time: the DGE
   runs beside the ScalarE pipeline), so it waits for ScalarE's earlier instructions and holds up
   its later ones until the DMA's inputs are ready.
2. Dependencies. An instruction waits for every earlier instruction whose memory it must not
   overtake: it reads what the other wrote (read after write), writes what the other read (write
   after read) or writes what the other wrote (write after write). Two accesses conflict when they
   share a storage element of the same allocation; and an on-chip allocation that takes memory an
   earlier, freed allocation had (`memory.Allocation.region`) waits, on every lane, for the last
   accesses to the old one, so the memory a kernel reuses bounds how far ahead it can load.
   Explicit `depends_on` edges count too. An indirect access (a gather or scatter by
   `scalar_offset` / `vector_offset`) touches rows the compiler cannot see, so it conflicts with
   every access of its allocation on its core when either of the two writes, except another
   indirect write: a scatter waits for every earlier read of its tensor and a gather for every
   earlier write, but two scatters are not ordered (an assumption: no public page says whether
   the compiler orders them; ordering them would serialize every scatter of a launch, and the
   kernels here never scatter to one row twice in a launch, kernels.check_pool_indices). Across
   the cores of a grid it adds no such waits (their streams are separate).
3. Compute engines. An instruction starts when its engine is free and its producers have ended
   (in the LIKELY estimate, `SEMAPHORE_US` later for a producer on another engine or DMA queue),
   and keeps the engine busy for `costs.engine_us(ins)`. Work the record does not show as
   instructions runs in the queues too: a ScalarE function-table load (LIKELY) before an
   activation that needs another table than the one loaded, which needs no data and so can run
   while the activation still waits for its inputs; GpSimd's descriptor generation before a
   `dge_mode=swdge` DMA, which that DMA waits for; and a ScalarE-triggered DMA's trigger (rule 1).
4. DMA. A transfer is triggered, in queue order, once its producers have ended; after a fixed
   latency its data starts to move, once the transfer ahead of it in the queue has finished. All
   transfers moving data on one core share that core's DMA bandwidth (`costs.dma_bytes_per_us`):
   each gets an equal share, but never more than the engines it spreads over can move (a transfer
   over few partitions uses few engines), and what one cannot use goes to the others ("max-min
   fair" sharing, the documented round robin between queues). Rates change only when a transfer
   starts or ends, so the simulation steps from event to event.
5. Cores. With an LNC launch grid every instruction carries its physical core. Each core has its
   own engines, DMA queues, DMA bandwidth (its own 16 DMA engines) and on-chip memory, and lanes
   are named per core ("c1 VectorE") when there is more than one.
6. Barriers. A `core_barrier` takes its place in its engine's queue like any instruction. It is
   recorded as writing its `data`, so by rule 2 it waits for its core's earlier accesses to `data`
   and its core's later accesses wait for it; accesses of the other cores neither wait for it nor
   it for them. The k-th barrier of every core ends when the last of them has started, plus the
   cross-core semaphore hand-off (`costs.CORE_BARRIER_US`, LIKELY): an early core's barrier keeps
   its engine busy until then, and blocks no other engine.

`schedule(..., band=...)` runs the rules with the constants of one estimate (`costs.BEST` or
`costs.LIKELY`).
"""
import functools
import heapq
import itertools
from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from . import costs
from .tensor import row_major

ENGINE_LANES = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimd"}
TRIGGER_QUEUES = {"sync": "DMA SyncE", "scalar": "DMA ScalarE", "gpsimd": "DMA GpSimd"}  # a DMA's queue per trigger engine


@dataclass
class Slot:
    """When one instruction ran. For a DMA, start/end are when its data moved.

    A slot with `work` set is work the record does not show (a ScalarE table load, a GpSimd
    descriptor generation); `index` is then the instruction it was done for."""
    index: int
    lane: str
    ready_us: float      # when its last producer ended (0 if none), plus any semaphore latency
    start_us: float
    end_us: float
    deps: tuple          # indices of the instructions it waited for
    transfer: costs.Transfer = None  # a DMA's cost
    work: str = None     # e.g. "ACT_TABLE_LOAD exp"
    trigger_us: float = None  # a DMA: when its queue triggered it (its fixed latency runs from here)


def lane_name(core, lane, cores):
    """A lane as shown: "VectorE" on a single core, "c1 VectorE" when there are several."""
    return f"c{core} {lane}" if cores > 1 else lane


def core_count(instructions):
    return max((i.core for i in instructions), default=0) + 1


def dma_trigger(ins):
    """The engine a kernel chose to trigger a DMA ("sync", "scalar", "gpsimd"), or None when the
    compiler picks it: `engine=` of a `dge_mode=hwdge` DMA, GpSimd for `dge_mode=swdge` (it writes
    the descriptors; doc: nki/deep-dives/nki-dge.rst), which a vector_offset DMA at dge_mode unknown
    gets too (`costs.dge_mode`)."""
    mode = costs.dge_mode(ins)
    if mode == "swdge":
        return "gpsimd"
    trigger = ins.args.get("trigger", "unknown")
    return trigger if mode == "hwdge" and trigger in ("sync", "scalar") else None


def dma_queue(ins, k):
    """The queue of a DMA (rule 1); `k` counts the DMAs before it on its core whose trigger the
    compiler picks."""
    trigger = dma_trigger(ins)
    return f"DMA q{k % costs.DMA_QUEUES}" if trigger is None else TRIGGER_QUEUES[trigger]


def lanes(instructions):
    """The queue (timeline lane) of every instruction: its engine, or its DMA queue (`dma_queue`)."""
    cores = core_count(instructions)
    compiler_placed = defaultdict(itertools.count)
    result = []
    for i in instructions:
        if i.engine != "dma":
            lane = ENGINE_LANES[i.engine]
        else:
            lane = dma_queue(i, next(compiler_placed[i.core]) if dma_trigger(i) is None else 0)
        result.append(lane_name(i.core, lane, cores))
    return result


# -- dependencies --------------------------------------------------------------------------------

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
    strides = row_major(shape)
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


class _Reuse:
    """Memory an on-chip allocation takes over from earlier ones (rule 2).

    Per core and buffer, the allocations placed so far with their address ranges; per allocation,
    its last access on each lane. When allocation B is first touched, its predecessors are the last
    accesses, lane by lane, of every earlier allocation whose range meets B's; an allocation whose
    range lies inside B's is dropped from the list, since whoever meets it meets B, and B's
    accesses come after its. Each lane's first access to B waits for the predecessors; the lane's
    later ones follow it in order.
    """

    def __init__(self, regions):
        self.regions = regions                   # allocation id -> (buffer, ((first byte, end byte), ...))
        self.placed = {}                         # (core, buffer) -> [allocation id]
        self.last = {}                           # allocation id -> {lane: last instruction touching it}
        self.before = {}                         # allocation id -> (predecessors, lanes that waited)

    def waits(self, index, core, lane, alloc):
        """The instructions this access to `alloc` (by instruction `index` on `lane`) waits for."""
        if alloc not in self.regions:
            return ()
        if alloc not in self.before:
            buffer, pieces = self.regions[alloc]
            placed = self.placed.setdefault((core, buffer), [])
            before = set()
            for old in placed:
                if any(f < e2 and f2 < e for f, e in self.regions[old][1] for f2, e2 in pieces):
                    before.update(self.last[old].values())
            placed[:] = [old for old in placed
                         if not all(any(f2 <= f and e <= e2 for f2, e2 in pieces) for f, e in self.regions[old][1])]
            placed.append(alloc)
            self.before[alloc] = (before, set())
            self.last[alloc] = {}
        self.last[alloc][lane] = index
        before, waited = self.before[alloc]
        if lane in waited:
            return ()
        waited.add(lane)
        return before


class _Dynamic:
    """One HBM allocation's accesses on one core, for the waits of indirect accesses (rule 2): a
    read waits for every earlier write it may meet, a write for every earlier access it may meet,
    where an indirect access may meet any access of the allocation; two indirect writes wait for
    no each other (rule 2)."""

    def __init__(self):
        self.reads, self.writes = [], []   # (index, indirect) of every access so far

    def waits(self, dynamic, is_write):
        found = [i for i, d in self.writes if (dynamic or d) and not (dynamic and d and is_write)]
        if is_write:
            found += [i for i, d in self.reads if dynamic or d]
        return found

    def add(self, index, dynamic, is_write):
        (self.writes if is_write else self.reads).append((index, dynamic))


def dependencies(instructions, shapes=None, regions=None, dynamic_waits=True):
    """For each instruction, the sorted indices of the earlier instructions it must wait for.

    Waits implied by others may be left out (A waits for B, B for C: A need not list C), and so
    may waits implied by the order of a lane (rule 1).
    shapes: allocation id -> shape (`Capture.allocations` holds them); it only makes the search
    faster, the answer is the same without it.
    regions: allocation id -> (buffer, ((first byte, end byte), ...)) of on-chip allocations
    (`Capture.allocations` holds them): memory reuse across allocations (rule 2). Without it,
    allocations never share memory.
    dynamic_waits: False leaves out rule 2's waits for indirect accesses: the schedule if the rows
    they touch were known when they are scheduled (a what-if; the compiler cannot know them).
    """
    shapes = shapes or {}
    footprints = {}
    barriers = {}      # (core, allocation id) -> _Entry of that core's barriers on it (rule 6)
    reuse = _Reuse(regions or {})
    # Indirect accesses (rule 2): only the allocations they touch keep per-core lists of accesses.
    indexed = {a.alloc for ins in instructions for a in ins.reads + ins.writes
               if a.dynamic is not None and dynamic_waits}
    dynamic = {}                                 # (allocation, core) -> _Dynamic
    result = []
    for ins, lane in zip(instructions, lanes(instructions)):
        accesses = [(a, False) for a in ins.reads] + [(a, True) for a in ins.writes]
        boxes = [None if a.dynamic is not None else _box(a, shapes.get(a.alloc)) for a, _ in accesses]
        deps = set(ins.depends_on)
        barrier = ins.opcode == "core_barrier"
        for (a, is_write), box in zip(accesses, boxes):
            if a.alloc in indexed:
                state = dynamic.setdefault((a.alloc, ins.core), _Dynamic())
                deps.update(state.waits(box is None, is_write))
            if box is not None:
                if a.alloc in footprints:
                    found = footprints[a.alloc].conflicts(a, box, is_write)
                    if barrier:    # a barrier orders only its own core's accesses
                        found = {d for d in found if instructions[d].core == ins.core}
                    deps |= found
                lo, hi, exact = box
                deps.update(e.index for e in barriers.get((ins.core, a.alloc), ())
                            if e.meets(lo, hi) and (exact and e.exact or _overlap(a, e.access)))
            deps.update(reuse.waits(ins.index, ins.core, lane, a.alloc))
        for (a, is_write), box in zip(accesses, boxes):
            if a.alloc in indexed:
                dynamic[a.alloc, ins.core].add(ins.index, box is None, is_write)
            if box is None:                      # its pattern is not where it went: no footprint
                continue
            if barrier:        # kept apart: another core's accesses never meet it
                lo, hi, exact = box
                kept = barriers.setdefault((ins.core, a.alloc), [])
                kept[:] = [e for e in kept if not (exact and e.inside(lo, hi))] + [_Entry(ins.index, a, lo, hi, exact)]
                continue
            if a.alloc not in footprints:
                footprints[a.alloc] = _Footprints(shapes.get(a.alloc))
            footprints[a.alloc].add(ins.index, a, box, is_write)
        deps.discard(ins.index)
        result.append(tuple(sorted(deps)))
    return result


# -- the simulation ------------------------------------------------------------------------------

def _fair_rates(moving, caps, total):
    """Share one core's DMA bandwidth `total` among its transfers moving data: max-min fair with caps."""
    rates, left = {}, total
    ordered = sorted(moving, key=lambda i: caps[i])
    for k, i in enumerate(ordered):
        rates[i] = min(caps[i], left / (len(ordered) - k))
        left -= rates[i]
    return rates


class _Simulation:
    """Nodes 0 .. n-1 are the instructions; nodes from n on are the work the record does not show."""

    def __init__(self, instructions, deps, lane_of, band):
        self.ins = instructions
        self.band = band
        self.deps = deps
        self.lane_of = list(lane_of)
        self.work = {}                                   # extra node -> (name, instruction, us)
        edges = [list(d) for d in deps]
        order = self._program_order(edges)
        self.waiting = [len(e) for e in edges]           # producers that have not ended yet
        self.consumers = [[] for _ in edges]
        for i, es in enumerate(edges):
            for d in es:
                self.consumers[d].append(i)
        self.queues = {}                                 # lane -> nodes not yet started
        for i in order:
            self.queues.setdefault(self.lane_of[i], deque()).append(i)
        self.dma_lanes = {self.lane_of[i] for i, x in enumerate(instructions) if x.engine == "dma"}
        self.busy = {lane: False for lane in self.queues}  # engine running / DMA queue moving data
        self.arrived = {lane: deque() for lane in self.queues}  # DMAs past their latency, in order
        self.transfers = {i: costs.transfer(x, band) for i, x in enumerate(instructions) if x.engine == "dma"}
        self.rate = costs.dma_bytes_per_us(band)
        self.remaining = {}                              # DMA moving data -> work bytes left
        self.ready = [0.0] * len(edges)
        self.start = [None] * len(edges)
        self.trigger = {}
        self.end = [None] * len(edges)
        self.timers = []                                 # heap of (time, order, kind, node)
        self.order = itertools.count()
        self.now = 0.0
        self.barrier_round = self._barrier_rounds()      # barrier -> its round: every core's k-th barrier

    def _barrier_rounds(self):
        """Rule 6: the k-th core_barrier of every core, for each of a core's barriers."""
        mine = defaultdict(list)
        for i, ins in enumerate(self.ins):
            if ins.opcode == "core_barrier":
                mine[ins.core].append(i)
        if not mine:
            return {}
        counts = [len(mine[core]) for core in range(core_count(self.ins))]
        if len(set(counts)) > 1:
            raise ValueError(f"nkicpu.schedule: core_barrier calls per core (from core 0): {counts}; every core "
                             f"of a launch grid must call it as often")
        return {i: group for group in zip(*mine.values()) for i in group}

    def _program_order(self, edges):
        """All nodes in program order, each instruction after the unseen work done for it."""
        cores = core_count(self.ins)
        loaded = {}                                      # ScalarE lane -> function table in it
        order = []
        for i, ins in enumerate(self.ins):
            extra = []
            table = costs.act_table(ins)
            if table is not None:
                lane = self.lane_of[i]
                if self.band == costs.LIKELY and loaded.get(lane) != table:
                    extra.append((lane, f"ACT_TABLE_LOAD {table}", costs.ACT_TABLE_SWITCH_US, []))
                loaded[lane] = table
            if ins.engine == "dma" and costs.dge_mode(ins) == "swdge":
                extra.append((lane_name(ins.core, "GpSimd", cores), "SWDGE descriptors", costs.SWDGE_GPSIMD_US, []))
            if ins.engine == "dma" and dma_trigger(ins) == "scalar":   # in ScalarE's stream, after its producers
                extra.append((lane_name(ins.core, "ScalarE", cores), "DMA trigger", 0.0, list(edges[i])))
            for lane, name, us, waits_for in extra:
                node = len(edges)
                edges.append(waits_for)
                self.lane_of.append(lane)
                self.work[node] = (name, i, us)
                if ins.engine == "dma":
                    edges[i].append(node)                # the DMA waits for its descriptors / trigger
                order.append(node)
            order.append(i)
        return order

    def run(self):
        self._start_what_can()
        while self.timers or self.remaining:
            self._advance()
            self._start_what_can()
        stuck = [i for i, e in enumerate(self.end) if e is None]
        if stuck:
            raise RuntimeError(f"nkicpu.schedule: instructions {stuck[:5]} never became ready; a depends_on "
                               f"edge to a later instruction made a cycle")
        slots = [Slot(i, self.lane_of[i], self.ready[i], self.start[i], self.end[i], self.deps[i],
                      self.transfers.get(i), trigger_us=self.trigger.get(i)) for i in range(len(self.ins))]
        slots += [Slot(i, self.lane_of[node], self.ready[node], self.start[node], self.end[node], (), work=name)
                  for node, (name, i, _) in self.work.items()]
        return slots

    def _timer(self, time, kind, i):
        heapq.heappush(self.timers, (time, next(self.order), kind, i))

    def _duration(self, node):
        return self.work[node][2] if node in self.work else costs.engine_us(self.ins[node], self.band)

    def _start_what_can(self):
        for lane, queue in self.queues.items():
            if lane in self.dma_lanes:
                while queue and self.waiting[queue[0]] == 0:   # trigger in order
                    i = queue.popleft()
                    self.trigger[i] = self.now
                    self._timer(self.now + self.transfers[i].latency_us, "arrive", i)
                if not self.busy[lane] and self.arrived[lane]:
                    i = self.arrived[lane].popleft()
                    self.busy[lane] = True
                    self.start[i] = self.now
                    self.remaining[i] = self.transfers[i].work_bytes
            elif not self.busy[lane] and queue and self.waiting[queue[0]] == 0 and self.ready[queue[0]] <= self.now:
                i = queue.popleft()
                self.busy[lane] = True
                self.start[i] = self.now
                group = self.barrier_round.get(i, (i,))
                if all(self.start[j] is not None for j in group):   # a barrier ends with its round's last start
                    for j in group:
                        self._timer(self.now + self._duration(j), "end", j)

    def _advance(self):
        """Move time to the next event: a timer, or the first moving transfer to finish."""
        by_core = defaultdict(list)
        for i in self.remaining:
            by_core[self.ins[i].core].append(i)
        rates = {}
        for moving in by_core.values():
            rates.update(_fair_rates(moving, {i: self.transfers[i].max_bytes_per_us for i in moving}, self.rate))
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
            elif kind == "end":
                self._finish(i, t)
            # "wake": a consumer's semaphore latency is over; nothing else to do

    def _finish(self, i, t):
        self.end[i] = t
        self.busy[self.lane_of[i]] = False
        for c in self.consumers[i]:
            self.waiting[c] -= 1
            self.ready[c] = max(self.ready[c], t + self._semaphore_us(i, c))
            if self.waiting[c] == 0 and self.ready[c] > t:
                self._timer(self.ready[c], "wake", c)

    def _semaphore_us(self, producer, consumer):
        """LIKELY: a compute instruction waiting for another lane pays the hand-off (a DMA's is in its latency)."""
        if self.band != costs.LIKELY or consumer >= len(self.ins) or self.ins[consumer].engine == "dma":
            return 0.0
        return costs.SEMAPHORE_US if self.lane_of[producer] != self.lane_of[consumer] else 0.0


def schedule(instructions, shapes=None, band=costs.LIKELY, deps=None, regions=None):
    """Start and end time (microseconds) of every instruction under one estimate (`costs.BEST` or
    `costs.LIKELY`): a list of `Slot`s, the instructions' in program order, then the unseen work's.

    deps: `dependencies(instructions, shapes, regions)`, if already computed (it is the same for both
    estimates).
    """
    if deps is None:
        deps = dependencies(instructions, shapes, regions)
    return _Simulation(instructions, deps, lanes(instructions), band).run()
