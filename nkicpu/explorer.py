"""Reduce a real Neuron Explorer capture to the event list a `Profile` is made of.

On a trn instance, `neuron-explorer` writes a processed profile as Parquet tables (the default)
or, with `--output-format json`, as JSON. This module reads either and returns events in the
shape `nkicpu.profile` uses (lane, name, start_us, dur_us, args), so the same summary, timeline
and Perfetto trace show real data. The field names follow the documentation (aws-neuron-sdk
repository, release 2.32):

- Parquet, tools/neuron-explorer/profile-schema-reference.rst: the `Instruction` table (one row per
  compute-engine instruction: start_ts, end_ts, duration_ns in ns; engine, e.g. "tensor";
  timeline_track, e.g. "TensorMatrix"; opcode; operands ...) and the `DmaPacketAggregated` table
  (one row per DMA transfer: start_ts, end_ts, queue_name, queue_idx, transfer_bytes, ...).
  Large tables may be split into numbered files (tools/neuron-explorer/how-to-analyze-profile-output.rst).
  The `Summary` table has the profile's metrics, `total_time` (on-device seconds) among them.
- JSON, archive/profiler/neuron-profile-user-guide.rst ("JSON"): {"summary": [...],
  "instruction": [{"timestamp": ns, "duration": ns, "label": "TensorMatrix", "opcode": ...}]}.

Lanes: the matmul row (TensorMatrix, opcode MATMUL) is "TensorE", as the whole matmul is in the
model; LoadStationary (LDWEIGHTS) rows go to their own lane, "TensorE load". Vector, Scalar (ACT),
GpSimd (Pool) and Sync map to "VectorE", "ScalarE", "GpSimd", "SyncE"; a DMA queue is
"DMA <queue name>". Rows of an LNC=2 capture carry their physical core (`pcore_idx`, 0 or 1): the
lanes are then named per core ("c1 VectorE", "c0 DMA qSyncIO0"), as in a modeled profile.
Semaphore instructions are the engine waiting (Explorer's ActiveTime excludes semaphore waits), so
they are dropped. Times start at 0 at the first event.

Reading Parquet needs pyarrow, which this project does not install (it is imported when a table is
read); the JSON export (legacy, unmaintained from Neuron 2.34) needs only the standard library.
"""
import glob
import json
import os

from .profile import Profile, lane_cores
from .schedule import lane_name

MEASURED = "measured on trn2 (neuron-explorer)"

_ENGINES = {"vector": "VectorE", "vectore": "VectorE", "dve": "VectorE",
            "scalar": "ScalarE", "scalare": "ScalarE", "act": "ScalarE", "activation": "ScalarE",
            "gpsimd": "GpSimd", "gpsimde": "GpSimd", "pool": "GpSimd", "pooling": "GpSimd",
            "sync": "SyncE", "synce": "SyncE", "sp": "SyncE"}
_LOAD_STATIONARY = {"LDWEIGHTS", "LOADSTATIONARY", "LOAD_STATIONARY"}
_ARG_FIELDS = ("operands", "bir_instruction_name", "nki_source_location", "hlo_name", "pc")


def _present(value):
    """Set in the row (a missing value is None, or NaN from a dataframe)."""
    return value is not None and value == value


def _lane(engine, track, opcode):
    """Our lane for an instruction row, from its timeline track (or engine) and opcode."""
    key = next((v.strip() for v in (track, engine) if isinstance(v, str) and v.strip()), "")
    low = key.lower()
    if low.startswith("tensor") or low == "pe":
        return "TensorE load" if opcode.upper() in _LOAD_STATIONARY else "TensorE"
    if low in _ENGINES:
        return _ENGINES[low]
    if low.startswith("q") or "dma" in low:  # DMA queues are named like qSyncIO0 in the timeline
        return f"DMA {key}"
    return key or "unknown"


def _plain(value):
    """A JSON-friendly Python value (Parquet gives NumPy scalars)."""
    return value.item() if hasattr(value, "item") else value


def _span_ns(row):
    start = int(row["start_ts"])
    end = int(row["end_ts"]) if _present(row.get("end_ts")) else start + int(row["duration_ns"])
    return start, end


def reduce_rows(instructions, dma=()):
    """Events from rows of the `Instruction` and `DmaPacketAggregated` tables (dicts by field name)."""
    cores = max((int(r["pcore_idx"]) for r in list(instructions) + list(dma) if _present(r.get("pcore_idx"))),
                default=0) + 1

    def per_core(lane, row):
        return lane_name(int(row["pcore_idx"]), lane, cores) if _present(row.get("pcore_idx")) else lane

    raw = []
    for row in instructions:
        opcode = str(row.get("opcode", ""))
        if "SEMAPHORE" in opcode.upper():
            continue
        lane = _lane(row.get("engine"), row.get("timeline_track"), opcode)
        args = {k: _plain(row[k]) for k in _ARG_FIELDS if _present(row.get(k))}
        raw.append((per_core(lane, row), opcode, *_span_ns(row), args))
    for row in dma:
        queue = row["queue_name"] if _present(row.get("queue_name")) else f"q{row['queue_idx']}"
        args = {k: _plain(row[k]) for k in ("transfer_bytes", "source", "dest", "variable") if _present(row.get(k))}
        name = next((str(row[k]) for k in ("variable", "op") if _present(row.get(k))), "dma")
        raw.append((per_core(f"DMA {queue}", row), name, *_span_ns(row), args))
    t0 = min((start for _, _, start, _, _ in raw), default=0)
    return [{"lane": lane, "name": name, "start_us": (start - t0) / 1000, "dur_us": (end - start) / 1000,
             "args": args} for lane, name, start, end, args in raw]


def read_json(path):
    """Events from `neuron-explorer view --output-format json` output (its "instruction" list)."""
    with open(path) as f:
        data = json.load(f)
    rows = [{"start_ts": r["timestamp"], "duration_ns": r["duration"], "timeline_track": r.get("label"),
             **{k: r[k] for k in ("opcode", "operands", "hlo_name") if k in r}}
            for r in data["instruction"]]
    return reduce_rows(rows)


def _read_table(directory, table):
    """The rows of `table` (dicts by field name): <table>.parquet, or its numbered parts
    <table>_0.parquet, <table>_1.parquet ... (a large table is split)."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError(f"nkicpu.explorer needs pyarrow to read Neuron Explorer's Parquet "
                          f"tables ({e}): `pip install pyarrow`") from e
    paths = sorted(glob.glob(os.path.join(directory, f"{table}.parquet"))
                   + glob.glob(os.path.join(directory, f"{table}_[0-9]*.parquet")))
    return [row for p in paths for row in pq.read_table(p).to_pylist()]


def read_parquet(directory):
    """Events from a processed profile directory (Instruction*.parquet, DmaPacketAggregated*.parquet)."""
    rows = _read_table(directory, "Instruction")
    if not rows:
        raise FileNotFoundError(f"no Instruction*.parquet in {directory}")
    return reduce_rows(rows, _read_table(directory, "DmaPacketAggregated"))


def read_summary(directory):
    """The first row of the processed profile's `Summary` table (a dict: total_time in seconds,
    hbm_read_bytes ...), or None if it has none."""
    rows = _read_table(directory, "Summary")
    return {k: _plain(v) for k, v in rows[0].items()} if rows else None


def load(path, label=MEASURED):
    """A `Profile` of a Neuron Explorer export: a JSON file or a directory of Parquet tables.

    Only call data from a real capture "measured"; pass another label for anything else."""
    events = read_parquet(path) if os.path.isdir(path) else read_json(path)
    return Profile.from_events(events, label, cores=lane_cores(events))
