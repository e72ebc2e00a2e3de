"""A kernel's profile: total time, per-engine busy fraction, HBM traffic and the HBM roofline.

`profile(kernel)(*arrays)` runs the kernel on the CPU model, schedules its instruction record
with the trn2 cost model (`nkicpu.schedule`, `nkicpu.costs`) and returns a `Profile` labelled
"modeled (trn2 cost model)". `Profile.from_events` wraps an event list from anywhere else, such as
a real Neuron Explorer capture reduced by `nkicpu.explorer`, so that the same summary, plots and
traces show real data under its own label. A modeled number is never called measured.
"""
import re
from dataclasses import dataclass, field

from . import costs
from .schedule import ENGINE_LANES, schedule

MODELED = "modeled (trn2 cost model)"

_LANE_ORDER = ["TensorE", "TensorE load", "VectorE", "ScalarE", "GpSimd", "SyncE"]


def ordered_lanes(names):
    """Engines first in a fixed order, then DMA queues (q2 before q10), then anything else."""
    def key(name):
        if name in _LANE_ORDER:
            return (0, _LANE_ORDER.index(name), [])
        natural = [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
        return (1 if name.startswith("DMA") else 2, 0, natural)
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
    total_us: float
    busy: dict                  # lane -> fraction of total_us the lane is busy, lanes in display order
    hbm_read_bytes: int         # None when the source does not say
    hbm_write_bytes: int
    roofline_us: float          # HBM bytes / HBM bandwidth; None when the bytes are unknown
    events: list = field(repr=False)  # dicts: lane, name, start_us, dur_us, args
    instructions: int = 0
    label: str = MODELED

    @classmethod
    def from_events(cls, events, label, outputs=None, hbm_read_bytes=None, hbm_write_bytes=None, lanes=()):
        """A profile of any event list (times in microseconds from 0). `lanes` adds idle lanes to show."""
        total = max((e["start_us"] + e["dur_us"] for e in events), default=0.0)
        covered = _busy_us(events)
        busy = {lane: (covered.get(lane, 0.0) / total if total > 0 else 0.0)
                for lane in ordered_lanes(list(covered) + list(lanes))}
        known = hbm_read_bytes is not None and hbm_write_bytes is not None
        roofline = (hbm_read_bytes + hbm_write_bytes) / costs.BYTES_PER_US if known else None
        return cls(outputs=outputs, total_us=total, busy=busy, hbm_read_bytes=hbm_read_bytes,
                   hbm_write_bytes=hbm_write_bytes, roofline_us=roofline, events=list(events),
                   instructions=len(events), label=label)

    def summary(self):
        lines = [f"{self.label}: {self.instructions} instructions",
                 f"  total          {self.total_us:10.3f} us"]
        if self.roofline_us is None:
            lines.append("  HBM roofline          n/a (HBM bytes unknown)")
        else:
            ratio = (f"{self.total_us / self.roofline_us:.2f}x the roofline" if self.roofline_us > 0
                     else "no HBM traffic")
            lines += [f"  HBM roofline   {self.roofline_us:10.3f} us   (total = {ratio}, "
                      f"{costs.HBM_ROOFLINE_GBPS:g} GB/s)",
                      f"  HBM bytes      read {self.hbm_read_bytes:,}, written {self.hbm_write_bytes:,}"]
        lines.append("  busy")
        lines += [f"    {lane:<14}{frac:6.1%}" for lane, frac in self.busy.items()]
        return "\n".join(lines)


def _name(ins):
    op = ins.args.get("op")
    return ins.args.get("name") or (f"{ins.opcode} {op}" if op else ins.opcode)


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


def profile_capture(capture):
    """Schedule a `nkicpu.Capture` with the trn2 cost model."""
    shapes = {alloc: shape for alloc, (_, _, _, shape) in capture.allocations.items()}
    slots = schedule(capture.instructions, shapes)
    events = [_event(ins, slot) for ins, slot in zip(capture.instructions, slots)]
    traffic = [costs.hbm_bytes(ins) for ins in capture.instructions if ins.engine == "dma"]
    return Profile.from_events(events, MODELED, outputs=capture.outputs,
                               hbm_read_bytes=sum(r for r, _ in traffic), hbm_write_bytes=sum(w for _, w in traffic),
                               lanes=ENGINE_LANES.values())


def profile(kernel):
    """`profile(kernel)(*numpy_arrays)`: run on the CPU model and return the modeled `Profile`."""
    from . import capture  # imported late so that nkicpu/__init__.py may import this module

    def run(*args, **kwargs):
        return profile_capture(capture(kernel)(*args, **kwargs))
    return run
