"""A kernel's profile: total time, per-engine busy fraction, HBM traffic and the HBM roofline.

`profile(kernel)(*arrays)` runs the kernel on the CPU model, schedules its instruction record
with the trn2 cost model (`nkicpu.schedule`, `nkicpu.costs`) and returns a `Profile` labelled
"modeled (trn2 cost model)". A modeled profile is a band: `best_us` (documented peak figures)
and `total_us`, the likely time (calibrated against public trn2 measurements), whose timeline the
events hold. Both are at least the HBM roofline. The standalone launch preamble and epilogue are
`launch_us`, apart from the kernel's time, so that a comparison of fused and staged kernels counts
launches explicitly. `Profile.from_events` wraps an event list from anywhere else, such as a real
Neuron Explorer capture reduced by `nkicpu.explorer`, so that the same summary, plots and traces
show real data under its own label. A modeled number is never called measured.

Read from a profile or a capture at the end: the critical path of the likely timeline, where a
launch's time goes (DMA moving or not, its HBM scratch chain, what the cores of a grid share), and
what each DMA carries, in the caller's words, for a timeline's colours.
"""
import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np

from . import costs
from .schedule import ENGINE_LANES, core_count, dependencies, dma_trigger, lane_name, lanes, schedule

MODELED = "modeled (trn2 cost model)"

_LANE_ORDER = ["TensorE", "TensorE load", "VectorE", "ScalarE", "GpSimd", "SyncE"]


def split_core(lane):
    """("c1", "VectorE") for "c1 VectorE"; ("", lane) for a lane without a core."""
    head, _, rest = lane.partition(" ")
    return (head, rest) if re.fullmatch(r"c\d+", head) and rest else ("", lane)


def lane_cores(events):
    """How many physical cores an event list's lanes name ("c0 ...", "c1 ..."); 1 if none does."""
    return len({split_core(e["lane"])[0] for e in events} - {""}) or 1


def is_dma_lane(lane):
    """Whether a lane is a DMA queue ("DMA q0", "c1 DMA ScalarE")."""
    return split_core(lane)[1].startswith("DMA")


def ordered_lanes(names):
    """Per core, engines first in a fixed order, then DMA queues (q2 before q10), then anything else."""
    def natural(text):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]

    def key(name):
        core, lane = split_core(name)
        if lane in _LANE_ORDER:
            return (natural(core), 0, _LANE_ORDER.index(lane), [])
        return (natural(core), 1 if lane.startswith("DMA") else 2, 0, natural(lane))
    return sorted(set(names), key=key)


def event_end(e):
    return e["start_us"] + e["dur_us"]


def covered_us(spans):
    """The time covered by at least one of the (start, end) spans (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _busy_us(events):
    """Per lane, the time covered by at least one event."""
    spans = {}
    for e in events:
        spans.setdefault(e["lane"], []).append((e["start_us"], event_end(e)))
    return {lane: covered_us(intervals) for lane, intervals in spans.items()}


@dataclass
class Profile:
    outputs: object
    total_us: float             # modeled: the LIKELY estimate (the events' timeline); measured: the capture's
    busy: dict                  # lane -> fraction of total_us the lane is busy, lanes in display order
    hbm_read_bytes: int         # None when the source does not say
    hbm_write_bytes: int
    roofline_us: float          # HBM bytes / (cores x HBM_ROOFLINE_GBPS); None when the bytes are unknown
    events: list = field(repr=False)  # dicts: lane, name, start_us, dur_us, args
    instructions: int = 0
    label: str = MODELED
    best_us: float = None       # modeled: the BEST estimate, best_us <= total_us; None for a capture
    launch_us: float = None     # modeled: standalone launch preamble + epilogue, not in total_us
    cores: int = 1              # physical NeuronCores (2 for an LNC=2 launch grid)

    @classmethod
    def from_events(cls, events, label, outputs=None, hbm_read_bytes=None, hbm_write_bytes=None, lanes=(),
                    cores=1):
        """A profile of any event list (times in microseconds from 0). `lanes` adds idle lanes to show."""
        total = max((e["start_us"] + e["dur_us"] for e in events), default=0.0)
        covered = _busy_us(events)
        busy = {lane: (covered.get(lane, 0.0) / total if total > 0 else 0.0)
                for lane in ordered_lanes(list(covered) + list(lanes))}
        known = hbm_read_bytes is not None and hbm_write_bytes is not None
        roofline = costs.roofline_us(hbm_read_bytes + hbm_write_bytes, cores) if known else None
        return cls(outputs=outputs, total_us=total, busy=busy, hbm_read_bytes=hbm_read_bytes,
                   hbm_write_bytes=hbm_write_bytes, roofline_us=roofline, events=list(events),
                   instructions=len(events), label=label, cores=cores)

    def band(self):
        """"best 1.23 – likely 4.56 µs" for a modeled profile, "total 4.56 µs" for a capture."""
        if self.best_us is None:
            return f"total {self.total_us:.2f} µs"
        return f"best {self.best_us:.2f} – likely {self.total_us:.2f} µs"

    def summary(self):
        cores = f" on {self.cores} cores" if self.cores > 1 else ""
        lines = [f"{self.label}: {self.instructions} instructions{cores}"]
        if self.best_us is None:
            lines.append(f"  total          {self.total_us:10.3f} us")
        else:
            lines += [f"  total          {self.total_us:10.3f} us   likely; the band is best {self.best_us:.3f} "
                      f"- likely {self.total_us:.3f} us",
                      f"  launch         {self.launch_us:10.3f} us   standalone preamble + epilogue, not in the total"]
        if self.roofline_us is None:
            lines.append("  HBM roofline          n/a (HBM bytes unknown)")
        else:
            if self.roofline_us <= 0:
                ratio = "no HBM traffic"
            elif self.best_us is None:
                ratio = f"total = {self.total_us / self.roofline_us:.2f}x the roofline"
            else:
                ratio = (f"likely = {self.total_us / self.roofline_us:.2f}x, best = "
                         f"{self.best_us / self.roofline_us:.2f}x the roofline")
            lines += [f"  HBM roofline   {self.roofline_us:10.3f} us   ({ratio}; {costs.HBM_ROOFLINE_GBPS:g} GB/s"
                      + (f" x {self.cores} cores)" if self.cores > 1 else ")"),
                      f"  HBM bytes      read {self.hbm_read_bytes:,}, written {self.hbm_write_bytes:,}"]
        lines.append("  busy")
        lines += [f"    {lane:<14}{frac:6.1%}" for lane, frac in self.busy.items()]
        return "\n".join(lines)


def _name(ins):
    op = ins.args.get("op")
    return ins.args.get("name") or (f"{ins.opcode} {op}" if op else ins.opcode)


def _work_event(slot):
    """Work the record does not show (a ScalarE table load, GpSimd descriptor generation)."""
    return {"lane": slot.lane, "name": slot.work, "start_us": slot.start_us, "dur_us": slot.end_us - slot.start_us,
            "args": {"opcode": slot.work.split()[0], "for_index": slot.index, "ready_us": slot.ready_us,
                     "deps": []}}


def _event(ins, slot):
    args = {"index": ins.index, "opcode": ins.opcode, "ready_us": slot.ready_us, "deps": list(slot.deps)}
    if ins.opcode == "core_barrier":
        args["barrier_round"] = ins.args["round"]       # the k-th barrier of every core ends together
    if slot.transfer:
        t = slot.transfer
        read, written = costs.hbm_bytes(ins)
        args.update(src=ins.reads[0].buffer, dst=ins.writes[0].buffer, bytes=t.bytes, hbm_read_bytes=read,
                    hbm_write_bytes=written, descriptors=t.descriptors, engines=t.engines,
                    latency_us=t.latency_us, trigger_us=slot.trigger_us)
    else:
        args.update(partitions=ins.partitions, free_elements=ins.free_elements)
    return {"lane": slot.lane, "name": _name(ins), "start_us": slot.start_us,
            "dur_us": slot.end_us - slot.start_us, "args": args}


def profile_instructions(instructions, shapes=None, outputs=None, regions=None):
    """The modeled `Profile` of an instruction record: the LIKELY timeline in the events, the BEST end in best_us.

    The events list the instructions in program order (event k is instruction k), then the work
    the record does not show. shapes, regions: see `nkicpu.schedule.dependencies`."""
    deps = dependencies(instructions, shapes, regions)
    likely = schedule(instructions, band=costs.LIKELY, deps=deps)
    best = schedule(instructions, band=costs.BEST, deps=deps)
    n = len(instructions)
    events = [_event(ins, slot) for ins, slot in zip(instructions, likely)] + [_work_event(s) for s in likely[n:]]
    traffic = [costs.hbm_bytes(ins) for ins in instructions if ins.engine == "dma"]
    cores = core_count(instructions)
    idle = [lane_name(core, lane, cores) for core in range(cores) for lane in ENGINE_LANES.values()]
    prof = Profile.from_events(events, MODELED, outputs=outputs, hbm_read_bytes=sum(r for r, _ in traffic),
                               hbm_write_bytes=sum(w for _, w in traffic), lanes=idle, cores=cores)
    return dataclasses.replace(prof, instructions=n, best_us=max((s.end_us for s in best), default=0.0),
                               launch_us=costs.LAUNCH_US)


def _shapes(capture):
    return {alloc: info.shape for alloc, info in capture.allocations.items()}


def _regions(capture):
    return {alloc: (info.buffer, info.region) for alloc, info in capture.allocations.items() if info.region}


def capture_slots(capture, band=costs.LIKELY):
    """The cost model's schedule of a capture in one band: a slot per instruction (slot k is
    instruction k) with lane, start_us and end_us, then the work the record does not show."""
    return schedule(capture.instructions, _shapes(capture), band=band, regions=_regions(capture))


def profile_capture(capture):
    """Schedule a `nkicpu.Capture` with the trn2 cost model."""
    return profile_instructions(capture.instructions, _shapes(capture), capture.outputs, _regions(capture))


def profile(kernel):
    """`profile(kernel)(*numpy_arrays)`: run on the CPU model and return the modeled `Profile`."""
    from . import capture  # imported late so that nkicpu/__init__.py may import this module

    def run(*args, **kwargs):
        return profile_capture(capture(kernel)(*args, **kwargs))
    return run


# -- the critical path of a modeled timeline (the stage chapters' "what bounds it" tables) ---------

# part key -> row label
PATH_PARTS = {"latency": "DMA fixed latency", "moving": "DMA data moving", "tensor": "TensorE",
              "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimd",
              "tables": "ScalarE table loads", "handoffs": "semaphore hand-offs"}


_ENGINE_OF = {lane: engine for engine, lane in ENGINE_LANES.items()}   # "TensorE" -> "tensor"


def critical_path(p, eps=1e-9):
    """The likely timeline's critical path as (event, part, µs) steps, earliest first. From the
    event that ends last, each step goes back to what the event waited for last: the event that
    ended as it started on its own lane, or its producer whose end (plus a hand-off from another
    lane) set its start. The wait between the two is a DMA's latency or a hand-off. A core_barrier
    is a hand-off: one that waited for another core's barrier of its round counts from that
    barrier's start (the hand-off), and the path goes on from there."""
    lanes = {}
    for e in p.events:
        lanes.setdefault(e["lane"], []).append(e)
    ahead = {id(e): f for lane in lanes.values() for e in lane for f in lane
             if f is not e and f["dur_us"] > 0 and abs(event_end(f) - e["start_us"]) < eps}
    rounds = {}
    for e in p.events:
        if "barrier_round" in e["args"]:
            rounds.setdefault(e["args"]["barrier_round"], []).append(e)
    steps, e, entered = [], max(p.events, key=event_end), False
    while e is not None:
        a, dma = e["args"], is_dma_lane(e["lane"])
        if "barrier_round" in a and not entered:          # a barrier: from the last of its round to start
            last = max(rounds[a["barrier_round"]], key=lambda f: f["start_us"])
            if last["start_us"] > e["start_us"] + eps:
                steps.append((e, PATH_PARTS["handoffs"], event_end(e) - last["start_us"]))
                e, entered = last, True           # on from when that barrier started
                continue
            steps.append((e, PATH_PARTS["handoffs"], e["dur_us"]))
        elif not entered:
            part = ("moving" if dma else "tables" if e["name"].startswith("ACT_TABLE_LOAD")
                    else _ENGINE_OF[split_core(e["lane"])[1]])
            steps.append((e, PATH_PARTS[part], e["dur_us"]))
        entered = False
        producers = [p.events[d] for d in a["deps"]]
        if id(e) in ahead and (not producers or e["start_us"] > a["ready_us"] + a.get("latency_us", 0) + eps):
            e = ahead[id(e)]                                   # it waited for its lane
            continue
        handoff = 0.0 if dma else costs.SEMAPHORE_US
        producer = max(producers, key=lambda d: event_end(d) + (handoff if d["lane"] != e["lane"] else 0),
                       default=None)
        wait = e["start_us"] - (event_end(producer) if producer else 0.0)
        if wait > eps:
            steps.append((e, PATH_PARTS["latency"] if dma else PATH_PARTS["handoffs"], wait))
        e = producer
    return steps[::-1]


def critical_path_parts(p):
    """Part key -> [steps, µs] of the critical path; the µs add up to the likely total."""
    parts = {key: [0, 0.0] for key in PATH_PARTS}
    key_of = {label: key for key, label in PATH_PARTS.items()}
    for _, label, us in critical_path(p):
        parts[key_of[label]][0] += 1
        parts[key_of[label]][1] += us
    assert abs(sum(us for _, us in parts.values()) - p.total_us) < 1e-6
    return parts


# -- where a launch's time goes: DMA moving or not, HBM scratch, what the cores of a grid share ----

def no_dma_spans(p):
    """The stretches of a profile's (likely) timeline in which no DMA moves any data: [(start, end)]."""
    spans, reach = [], 0.0
    for start, end in sorted((e["start_us"], event_end(e)) for e in p.events if is_dma_lane(e["lane"])):
        if start > reach:
            spans.append((reach, start))
        reach = max(reach, end)
    if p.total_us > reach:
        spans.append((reach, p.total_us))
    return spans


def dma_parts(capture, band=costs.LIKELY):
    """A single core's launch's modeled time under one estimate, in three parts (µs) that add up to it:

    full_rate   its HBM bytes at the estimate's DMA rate (`costs.dma_bytes_per_us`)
    below_rate  the rest of the time some DMA moves data (descriptor overheads, queues left idle)
    no_dma      the time no DMA moves any data: compute and fixed latencies in the open

    `core_parts` splits each core of an LNC grid's launch.
    """
    parts = core_parts(capture, band)
    if len(parts) != 1:
        raise ValueError(f"dma_parts: the capture is a launch on {len(parts)} cores; use core_parts")
    return parts[0]


def core_parts(capture, band=costs.LIKELY):
    """`dma_parts` of every physical core of a launch, by program id, plus its "total". Each core
    has its own DMA queues and bandwidth (`nkicpu.schedule`, rule 5), so its time splits on its
    own: its total is when its last instruction ends, its bytes those its own DMAs move."""
    slots = capture_slots(capture, band)
    parts = []
    for core in range(core_count(capture.instructions)):
        # a work slot's index is the instruction it was done for, so it counts on that one's core
        mine = [s for s in slots if capture.instructions[s.index].core == core]
        total = max(s.end_us for s in mine)
        moving = covered_us([(s.start_us, s.end_us) for s in mine if s.transfer])
        nbytes = sum(sum(costs.hbm_bytes(i)) for i in capture.instructions if i.engine == "dma" and i.core == core)
        full = nbytes / costs.dma_bytes_per_us(band)
        parts.append({"total": total, "full_rate": full, "below_rate": moving - full, "no_dma": total - moving})
    return parts


# -- lower bounds that hold for every order of a capture's instructions ---------------------------

BOUNDS = ("bytes", "engine", "chain", "last_dma")


def _alone_us(ins, band):
    """How long an instruction takes with nothing else running: a compute instruction its engine
    time; a DMA its fixed latency, then its work at the core's full DMA rate or its own cap."""
    if ins.engine != "dma":
        return costs.engine_us(ins, band)
    t = costs.transfer(ins, band)
    return t.latency_us + t.work_bytes / min(t.max_bytes_per_us, costs.dma_bytes_per_us(band))


def lower_bounds(capture, band=costs.LIKELY):
    """Lower bounds (µs) on a launch's modeled time in one estimate that hold for every schedule of
    its recorded instructions that keeps their dependencies (`nkicpu.schedule.dependencies`:
    read/write conflicts and memory reuse), under the model's rules 3-5; the order of each lane
    (rule 1) is not assumed. One dict per physical core, from that core's work:

    bytes     its HBM bytes at the estimate's full DMA rate (`costs.dma_bytes_per_us`)
    engine    over its compute engines, the most of: the earliest any of the engine's instructions
              can start + their summed time + the least chain that must follow one of them; or
              their summed time + the ScalarE table loads (LIKELY, one per function table used:
              the engine starts with none loaded) or GpSimd descriptor generations
              (`dge_mode=swdge`) every order pays
    chain     the longest dependency path through one of its instructions: each at its time alone
              (a DMA: fixed latency, then its work at full rate or its cap), plus a semaphore
              hand-off where the estimate charges one (LIKELY, a compute instruction waiting on
              another lane)
    last_dma  some DMA moves data last: for its DMAs ordered by the chain that must follow them,
              the k first ones' earliest data start + their work at full rate + the k-th one's
              chain after it, the most over k (with all k, at least `bytes` + a fixed latency)
    floor     the largest of them
    last_dma_parts  last_dma's terms at the k that gives it: {"start", "work", "after" (µs),
              "dmas": k, "last": the k-th DMA's instruction index}

    A lower bound, not a schedule: a launch can sit above all of them. On several cores each
    bounds the launch's time, so the launch's floor is the largest core floor.
    """
    ins = capture.instructions
    deps = dependencies(ins, _shapes(capture), _regions(capture))
    lane = lanes(ins)
    rate = costs.dma_bytes_per_us(band)
    alone = [_alone_us(i, band) for i in ins]

    def handoff(p, c):
        return costs.SEMAPHORE_US if band == costs.LIKELY and ins[c].engine != "dma" and lane[p] != lane[c] else 0.0

    start = [0.0] * len(ins)                   # earliest start: every producer's end + hand-off
    for c, ds in enumerate(deps):
        if ins[c].engine == "dma" and dma_trigger(ins[c]) == "gpsimd":   # after its descriptors
            start[c] = costs.SWDGE_GPSIMD_US
        for p in ds:
            start[c] = max(start[c], start[p] + alone[p] + handoff(p, c))
    after = [0.0] * len(ins)                   # the longest chain that must follow its end
    for c in reversed(range(len(ins))):
        for p in deps[c]:
            after[p] = max(after[p], handoff(p, c) + alone[c] + after[c])

    result = []
    for core in range(core_count(ins)):
        mine = [k for k in range(len(ins)) if ins[k].core == core]
        dma = [k for k in mine if ins[k].engine == "dma"]
        engine = 0.0
        for name in ENGINE_LANES.values():
            on = [k for k in mine if split_core(lane[k])[1] == name]
            busy = sum(alone[k] for k in on)
            unseen = 0.0
            if name == "ScalarE" and band == costs.LIKELY:
                unseen = len({costs.act_table(ins[k]) for k in on} - {None}) * costs.ACT_TABLE_SWITCH_US
            if name == "GpSimd":
                unseen = sum(dma_trigger(ins[k]) == "gpsimd" for k in dma) * costs.SWDGE_GPSIMD_US
            engine = max(engine, busy + unseen)
            if on:
                engine = max(engine, min(start[k] for k in on) + busy + min(after[k] for k in on))
        last, work, moving, parts = 0.0, 0.0, float("inf"), None
        for n, k in enumerate(sorted(dma, key=lambda k: -after[k])):
            t = costs.transfer(ins[k], band)
            work += t.work_bytes
            moving = min(moving, start[k] + t.latency_us)
            if moving + work / rate + after[k] > last:
                last = moving + work / rate + after[k]
                parts = {"start": moving, "work": work / rate, "after": after[k], "dmas": n + 1,
                         "last": k}
        b = {"bytes": sum(sum(costs.hbm_bytes(ins[k])) for k in dma) / rate, "engine": engine,
             "chain": max((start[k] + alone[k] + after[k] for k in mine), default=0.0), "last_dma": last}
        b["floor"] = max(b.values())
        b["last_dma_parts"] = parts
        result.append(b)
    return result


def scratch_chain(capture, p):
    """The HBM scratch of a single launch and its modeled profile `p`: (transfers, bytes, transfers
    on the longest chain, their fixed latencies in µs, likely). A scratch transfer is a DMA to or
    from an HBM tensor the kernel allocated for itself (private_hbm); the chain follows the
    dependencies the scheduler found, and the longest one has the most scratch latency on it."""
    scratch = {a for a, info in capture.allocations.items() if info.buffer == "private_hbm"}
    is_scratch = [i.engine == "dma" and any(a.alloc in scratch for a in i.reads + i.writes)
                  for i in capture.instructions]
    chain = []          # per instruction: (latency, transfers) of the heaviest chain ending at it
    for k, e in enumerate(p.events[:len(capture.instructions)]):
        up = max((chain[d] for d in e["args"]["deps"]), default=(0.0, 0))
        chain.append((up[0] + e["args"]["latency_us"], up[1] + 1) if is_scratch[k] else up)
    latency, on_chain = max(chain)
    nbytes = sum(i.writes[0].nbytes for i, s in zip(capture.instructions, is_scratch) if s)
    return sum(is_scratch), nbytes, on_chain, latency


def _touched_by_several(accesses):
    """How many elements of one allocation more than one core touches; `accesses`: [(core, Access)]."""
    cores = sorted({core for core, _ in accesses})
    touched = np.zeros((len(cores), max(a.span()[1] for _, a in accesses) + 1), dtype=bool)
    for core, a in accesses:
        touched[cores.index(core), a.indices()] = True
    return int((touched.sum(axis=0) > 1).sum())


def shared_reads(capture):
    """{kernel argument (position or keyword): its bytes that more than one program of a launch
    grid reads}. Each program's DMAs read them for itself, so the launch moves them once per program."""
    key_of = {alloc: key for key, alloc in capture.arguments.items()}
    accesses = {}
    for i in capture.instructions:
        if i.engine == "dma":
            for a in i.reads:
                if a.alloc in key_of:
                    accesses.setdefault(a.alloc, []).append((i.core, a))
    return {key_of[alloc]: _touched_by_several(acc) * acc[0][1].itemsize for alloc, acc in accesses.items()}


def shared_writes(capture, tensor):
    """How many elements of the kernel's tensor named `tensor` more than one program writes (nkicpu
    rejects such a write unless it leaves the bits the other program wrote: the lnc-race rule)."""
    ids = {alloc for alloc, info in capture.allocations.items() if info.name == tensor}
    if len(ids) != 1:
        raise ValueError(f"shared_writes: expected one tensor named {tensor!r}, got {len(ids)}")
    return _touched_by_several([(i.core, a) for i in capture.instructions for a in i.writes
                                if a.alloc in ids and i.opcode != "core_barrier"])   # a barrier writes nothing


# -- what each DMA of a capture carries, for a timeline's colours (`plot_timeline(dma_kinds=...)`) --

def dma_kinds(capture, arguments, outputs=None):
    """{instruction index: kind} for a capture's DMAs, in the caller's words.

    arguments  {kernel argument (a key of `capture.arguments`: position or keyword): kind}
    outputs    {name of a shared_hbm tensor the kernel allocates (an output), or a kernel argument
               it writes in place (its key, as in `arguments`): kind}

    A DMA that reads a mapped argument gets that argument's kind; else one that writes a kernel
    output (a shared_hbm tensor the kernel allocated, or an argument it writes) gets the kind
    `outputs` gives it, or "stores"; else one that reads another argument gets "small loads".
    Any other DMA (on chip to on chip, to or from HBM scratch) gets no kind. The entries run kind
    by kind, in the order the kinds are named (`arguments`, `outputs`, "small loads", "stores"):
    a timeline colours kinds in order of first appearance, so the same call on two versions of a
    kernel gives their kinds the same colours.
    """
    outputs = outputs or {}
    unknown = set(arguments) - set(capture.arguments)
    if unknown:
        raise ValueError(f"dma_kinds: no kernel argument {sorted(map(str, unknown))} "
                         f"(the arguments: {list(capture.arguments)})")
    shared = {alloc: info.name for alloc, info in capture.allocations.items() if info.buffer == "shared_hbm"}
    unknown = set(outputs) - set(shared.values()) - set(capture.arguments)
    if unknown:
        raise ValueError(f"dma_kinds: no shared_hbm tensor named {sorted(map(str, unknown))}, nor such an argument "
                         f"(the kernel's: {sorted(set(shared.values()), key=str)}; the arguments: "
                         f"{list(capture.arguments)})")
    loaded = {capture.arguments[key]: kind for key, kind in arguments.items()}
    stored = {alloc: outputs.get(name, "stores") for alloc, name in shared.items()}
    stored |= {alloc: outputs.get(key, "stores") for key, alloc in capture.arguments.items()}
    kinds = {}
    for ins in capture.instructions:
        if ins.engine != "dma":
            continue
        reads, writes = [a.alloc for a in ins.reads], [a.alloc for a in ins.writes]
        kind = (next((loaded[a] for a in reads if a in loaded), None)
                or next((stored[a] for a in writes if a in stored), None)
                or ("small loads" if set(reads) & set(capture.arguments.values()) else None))
        if kind:
            kinds[ins.index] = kind
    named = list(dict.fromkeys([*arguments.values(), *outputs.values(), "small loads", "stores"]))
    return dict(sorted(kinds.items(), key=lambda item: (named.index(item[1]), item[0])))
