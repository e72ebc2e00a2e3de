"""nkicpu against the Neuron SDK's functional simulator, `nki.simulate`, kernel by kernel.

`python -m benchmarks.first_contact --simulate` drives it; this module holds its three parts:

1. `save_inputs`: a kernel's arguments (kernels.registry, from `pipeline_inputs`), written once to
   <work>/inputs so that both sides load copies of the very same arrays;
2. the side process, `python -m benchmarks.cross_check <kernel> --inputs DIR --work DIR --side S`:
   it imports `nki` (the SDK's with NKICPU=0, nkicpu with NKICPU=1; `nki` is bound at import, so
   each side is a process of its own), runs `nki.simulate(kernel)` (`kernel[2]` for an LNC=2
   entry, as nki_simulator.rst launches it) on the loaded arrays and saves the outputs and every
   array argument after the run (the simulator writes a kernel's writes back into its arrays), or
   the error that refused the kernel, in <work>/<side>/;
3. `compare_sides`: the differences, per output (the output's accuracy rule of kernels.accuracy,
   max abs error, cosine) and per argument either side wrote, and which side refused.

The SDK side runs with NEURON_PLATFORM_TARGET_OVERRIDE=trn2: without it the simulator takes the
chip it runs on, and off a device trn3 (nki/guides/nki_simulator.rst). Neither side times anything.
"""
import argparse
import json
import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

SIDES = ("nki.simulate", "nkicpu")
SIDE_ENV = {"nki.simulate": {"NKICPU": "0", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"},
            "nkicpu": {"NKICPU": "1"}}
RECORD = "side.json"
MANIFEST = "arguments.json"


def _dtype(name):
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


def save_array(path, a):
    """`a` as raw bits (.npy of unsigned ints, readable without ml_dtypes) and its dtype's name."""
    np.save(path, np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}"))
    return {"array": Path(path).name, "dtype": a.dtype.name, "shape": list(a.shape)}


def load_array(directory, entry):
    return np.load(Path(directory) / entry["array"]).view(_dtype(entry["dtype"])).reshape(entry["shape"])


def save_inputs(directory, arguments):
    """Write a kernel's arguments: arrays as .npy, Python values into the manifest."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entries = [save_array(directory / f"arg_{i}.npy", a) if isinstance(a, np.ndarray) else {"value": a}
               for i, a in enumerate(arguments)]
    (directory / MANIFEST).write_text(json.dumps({"arguments": entries}, indent=1) + "\n")


def load_inputs(directory):
    entries = json.loads((Path(directory) / MANIFEST).read_text())["arguments"]
    return [load_array(directory, e) if "array" in e else e["value"] for e in entries]


def side_command(name, inputs, work, side):
    """(command, environment changes) of one side process."""
    return ([sys.executable, "-m", "benchmarks.cross_check", name, "--inputs", str(inputs),
             "--work", str(work), "--side", side], dict(SIDE_ENV[side]))


def run_side(name, inputs, work, side):
    """In the side process: simulate kernel `name` on the saved inputs; write <work>/<side>/."""
    out = Path(work) / side.replace("nki.simulate", "simulate")
    out.mkdir(parents=True, exist_ok=True)
    record = {"side": side, "kernel": name, "backend": None, "ok": False, "error": None,
              "outputs": [], "arguments": []}
    try:
        import kernels
        record["backend"] = kernels.NKI_BACKEND
        want = "neuron-sdk" if side == "nki.simulate" else "nkicpu"
        if kernels.NKI_BACKEND != want:
            raise RuntimeError(f"`import nki` gave {kernels.NKI_BACKEND}, not {want}")
        import nki
        from kernels.registry import BY_NAME
        arguments = load_inputs(inputs)
        outputs = nki.simulate(BY_NAME[name].load_kernel())(*arguments)
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        record["outputs"] = [save_array(out / f"out_{i}.npy", np.asarray(o)) for i, o in enumerate(outputs)]
        record["arguments"] = [save_array(out / f"arg_{i}.npy", a) if isinstance(a, np.ndarray) else None
                               for i, a in enumerate(arguments)]
        record["ok"] = True
    except Exception as e:  # a refusal is a result: the report says which side refused and why
        record["error"] = {"type": type(e).__name__, "message": str(e)[-2000:]}
    (out / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    return record


def read_side(work, side):
    """The record a side process wrote, or one saying it wrote none."""
    path = Path(work) / side.replace("nki.simulate", "simulate") / RECORD
    if not path.is_file():
        return {"side": side, "ok": False, "error": {"type": "side process", "message": f"no {path}"}}
    return json.loads(path.read_text())


def _max_abs(a, b):
    """Largest |a - b| over the elements finite on both sides, and how many are NaN on one only."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    one_nan = int(np.sum(np.isnan(x) != np.isnan(y)))
    both = np.isfinite(x) & np.isfinite(y)
    return (float(np.max(np.abs(x - y)[both])) if both.any() else 0.0), one_nan


def compare_sides(work, output_rules, inputs):
    """The cross-check of one kernel: which side refused (its error), each output judged by its
    accuracy rule (nkicpu's against the simulator's) and each array argument either side changed.
    `output_rules`: [(name, kernels.accuracy rule)] in the kernel's output order."""
    from kernels.accuracy import compare
    sim, cpu = (read_side(work, s) for s in SIDES)
    result = {"refused": {s: (r["error"] if not r["ok"] else None) for s, r in zip(SIDES, (sim, cpu))},
              "outputs": [], "arguments_written": []}
    if not (sim["ok"] and cpu["ok"]):
        result["agree"] = None     # nothing to compare unless both ran
        return result
    sdir, cdir = (Path(work) / s.replace("nki.simulate", "simulate") for s in SIDES)
    if len(sim["outputs"]) != len(cpu["outputs"]):
        result["outputs"].append({"problem": f"nki.simulate returned {len(sim['outputs'])} outputs, nkicpu "
                                             f"{len(cpu['outputs'])}", "ok": False})
    for (name, rule), s, c in zip(output_rules, sim["outputs"], cpu["outputs"]):
        got, want = load_array(cdir, c), load_array(sdir, s)
        row = compare(got, want, rule, name)
        if row["max_abs_err"] is not None:
            row["max_abs_err"], row["nan_on_one_side"] = _max_abs(got, want)
        result["outputs"].append(row)
    before = load_inputs(inputs)
    for i, (s, c) in enumerate(zip(sim["arguments"], cpu["arguments"])):
        if s is None:
            continue
        a, b, x = load_array(sdir, s), load_array(cdir, c), before[i]
        if a.tobytes() == x.tobytes() and b.tobytes() == x.tobytes():
            continue                # neither side wrote it
        err, one_nan = _max_abs(b, a)
        result["arguments_written"].append({
            "argument": i, "written_by": [n for n, y in zip(SIDES, (a, b)) if y.tobytes() != x.tobytes()],
            "max_abs_err": err, "nan_on_one_side": one_nan, "bit_exact": a.tobytes() == b.tobytes()})
    result["agree"] = all(r.get("ok") for r in result["outputs"]) and all(
        r["bit_exact"] or (r["max_abs_err"] <= 1e-2 and not r["nan_on_one_side"]) for r in result["arguments_written"])
    return result


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.cross_check",
                                description="One side of the nki.simulate / nkicpu cross-check (run by "
                                            "python -m benchmarks.first_contact --simulate).")
    p.add_argument("kernel")
    p.add_argument("--inputs", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--side", choices=SIDES, required=True)
    args = p.parse_args(argv)
    if os.environ.get("NKICPU") != SIDE_ENV[args.side]["NKICPU"]:
        p.error(f"--side {args.side} needs NKICPU={SIDE_ENV[args.side]['NKICPU']} in the environment")
    record = run_side(args.kernel, args.inputs, args.work, args.side)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
