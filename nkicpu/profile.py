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
"""
import dataclasses
import re
from dataclasses import dataclass, field

from . import costs
from .schedule import ENGINE_LANES, core_count, dependencies, lane_name, schedule

MODELED = "modeled (trn2 cost model)"

_LANE_ORDER = ["TensorE", "TensorE load", "VectorE", "ScalarE", "GpSimd", "SyncE"]


def split_core(lane):
    """("c1", "VectorE") for "c1 VectorE"; ("", lane) for a lane without a core."""
    head, _, rest = lane.partition(" ")
    return (head, rest) if re.fullmatch(r"c\d+", head) and rest else ("", lane)


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


def _busy_us(events):
    """Per lane, the time covered by at least one event (overlaps counted once)."""
    spans = {}
    for e in events:
        spans.setdefault(e["lane"], []).append((e["start_us"], e["start_us"] + e["dur_us"]))
    covered = {}
    for lane, intervals in spans.items():
        total, reach = 0.0, float("-inf")
        for start, end in sorted(intervals):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        covered[lane] = total
    return covered


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
        roofline = (hbm_read_bytes + hbm_write_bytes) / (cores * costs.BYTES_PER_US) if known else None
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
    if slot.transfer:
        t = slot.transfer
        read, written = costs.hbm_bytes(ins)
        args.update(src=ins.reads[0].buffer, dst=ins.writes[0].buffer, bytes=t.bytes, hbm_read_bytes=read,
                    hbm_write_bytes=written, descriptors=t.descriptors, engines=t.engines,
                    latency_us=t.latency_us)
    else:
        args.update(partitions=ins.partitions, free_elements=ins.free_elements)
    return {"lane": slot.lane, "name": _name(ins), "start_us": slot.start_us,
            "dur_us": slot.end_us - slot.start_us, "args": args}


def profile_instructions(instructions, shapes=None, outputs=None):
    """The modeled `Profile` of an instruction record: the LIKELY timeline in the events, the BEST end in best_us.

    The events list the instructions in program order (event k is instruction k), then the work
    the record does not show."""
    deps = dependencies(instructions, shapes)
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


def profile_capture(capture):
    """Schedule a `nkicpu.Capture` with the trn2 cost model."""
    shapes = {alloc: info.shape for alloc, info in capture.allocations.items()}
    return profile_instructions(capture.instructions, shapes, capture.outputs)


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


def event_end(e):
    return e["start_us"] + e["dur_us"]


def critical_path(p, eps=1e-9):
    """The likely timeline's critical path as (event, part, µs) steps, earliest first. From the
    event that ends last, each step goes back to what the event waited for last: the event that
    ended as it started on its own lane, or its producer whose end (plus a hand-off from another
    lane) set its start. The wait between the two is a DMA's latency or a hand-off."""
    lanes = {}
    for e in p.events:
        lanes.setdefault(e["lane"], []).append(e)
    ahead = {id(e): f for lane in lanes.values() for e in lane for f in lane
             if f is not e and f["dur_us"] > 0 and abs(event_end(f) - e["start_us"]) < eps}
    steps, e = [], max(p.events, key=event_end)
    while e is not None:
        a, dma = e["args"], e["lane"].startswith("DMA")
        part = "moving" if dma else "tables" if e["name"].startswith("ACT_TABLE_LOAD") else e["lane"]
        steps.append((e, PATH_PARTS.get(part, part), e["dur_us"]))
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
