"""First contact with trn2: every kernel of the book compiled, run and checked, one report back.

    python -m benchmarks.first_contact                  # on a trn2 instance: the device run
    python -m benchmarks.first_contact --cpu            # the same report from the CPU model
    python -m benchmarks.first_contact --simulate       # nkicpu against the SDK's nki.simulate

NOT YET RUN ON HARDWARE. A reader on a trn2 instance runs it once and sends back the report it
writes, <out>/first_contact.json. For each kernel in KERNELS (the five stages, gdn_tkg,
composition steps 2 to 7, the LNC=2 launches and the verify form; steps 0 and 1 are host
sequences of kernels in this list) it runs `benchmarks.on_trn`'s kernel process: a process of its
own that compiles the kernel with the Neuron compiler, runs it on a NeuronCore and checks its
outputs against kernels.reference (`on_trn.check_outputs`). The fused kernel (PROFILED) runs
through the whole `python -m benchmarks.on_trn` instead, which also captures a profile with
neuron-explorer. Beside each kernel the report puts its modeled band (best .. likely, trn2 cost
model, from `python -m benchmarks.sweep` run with NKICPU=1), and beside the fused kernel Explorer's
measured on-device `total_time`. It records the SDK, compiler and runtime versions, and for a
kernel that fails, the compiler's or runtime's message.

Where `on_trn.device_status()` finds no device it prints what it would run and why it does not,
writes nothing and exits 0. `--cpu` runs the same kernel processes on the CPU model (nkicpu)
instead and writes the report with every kernel labelled as such: nothing in it is measured.

`--simulate` needs the Neuron SDK's `nki` (the Neuron pip repository installs it on any x86 Linux)
but no device: it runs every kernel through `nki.simulate` and through nkicpu on copies of the same
inputs, each side in a process of its own (benchmarks/cross_check.py), and writes the differences
(each output's max error against the simulator's, which side refused a kernel and why) into
<out>/simulate_cross_check.json. Without the SDK it prints that plan and exits 0.

Exit status: 0 a report with every kernel passing, a cross-check report, or the plan printed where
there is no device (no SDK for --simulate); 1 a report with a failing kernel; 2 bad arguments.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from kernels.registry import BY_NAME

from . import cross_check, on_trn

REPO = on_trn.REPO
DEFAULT_OUT = REPO / "benchmarks" / "results" / "first_contact"
REPORT = "first_contact.json"
SIMULATE_REPORT = "simulate_cross_check.json"
SIMULATE_FORMAT = "nki-gdn-book simulator cross-check v1"
SIMULATE_LABEL = ("functional cross-check: nkicpu against the Neuron SDK's nki.simulate (trn2); "
                  "no time in it is measured or modeled")
FORMAT = "nki-gdn-book first contact v1"
MODELED = "modeled (trn2 cost model)"
KERNELS = on_trn.RUNNABLE      # every single-launch kernel of kernels.registry
PROFILED = "7_ready_first"    # the fused kernel, LNC=1: the one profile captured
CPU_LABEL = "CPU model (nkicpu): no kernel ran on a device; every time here is modeled"
DEVICE_LABEL = (f"device run on trn2; times labelled {on_trn.MEASURED!r} are measured, "
                "the rest modeled")


def _kernel_list(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in KERNELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected names among {', '.join(KERNELS)}, got {text!r}")
    return tuple(names)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.first_contact",
        description="Compile, run and check every kernel of the book on a trn2 NeuronCore, capture "
                    f"one profile of the fused kernel, and write <out>/{REPORT} to send back "
                    "(--cpu: the same on the CPU model). Not yet run on hardware by the project.")
    p.add_argument("--config", default="Qwen3-Next-80B-TP4",
                   help="per-device configuration '<model>-TP<tp>' (default Qwen3-Next-80B-TP4)")
    p.add_argument("--batch", type=on_trn._positive, default=1, help="batch size B (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="where the report and each kernel's work directory go "
                        "(default benchmarks/results/first_contact/, git-ignored)")
    p.add_argument("--kernels", type=_kernel_list, default=KERNELS,
                   help=f"comma-separated subset of {','.join(KERNELS)} (default: all)")
    p.add_argument("--cpu", action="store_true",
                   help="run every kernel on the CPU model (nkicpu), not a NeuronCore; no profile")
    p.add_argument("--simulate", action="store_true",
                   help="run every kernel through the SDK's nki.simulate and through nkicpu and "
                        f"write their differences to <out>/{SIMULATE_REPORT} (needs the SDK, no device)")
    p.add_argument("--timeout", type=on_trn._positive, default=1800,
                   help="seconds allowed for each kernel (compile and run) and each tool "
                        "(default 1800)")
    args = p.parse_args(argv)
    if args.cpu and args.simulate:
        p.error("--cpu and --simulate are two different runs: pass one")
    from .sweep import parse_config
    try:
        args.shape = parse_config(args.config).with_batch(args.batch)
    except ValueError as e:
        p.error(str(e).replace("--configs", "--config"))
    args.out = args.out.resolve()
    return args


# --- the plan: one step per kernel, then the modeled band --------------------------------------

def kernel_step(args, name):
    """(command, environment) of one kernel: the kernel process, or for PROFILED on the device the
    whole runner (kernel process, capture, export, events file)."""
    work = args.out / name
    if args.cpu:
        env = {**os.environ, "NKICPU": "1"}
    else:
        env = on_trn.kernel_env(BY_NAME[name].lnc, work / on_trn.INSPECT_DIR)
    if name == PROFILED and not args.cpu:
        env = {**os.environ, "NKICPU": "0"}
        command = [sys.executable, "-m", "benchmarks.on_trn", name, "--config", args.config,
                   "--batch", str(args.batch), "--seed", str(args.seed), "--out", str(args.out),
                   "--work", str(work), "--timeout", str(args.timeout)]
        return command, env
    return on_trn.kernel_command(name, args.config, args.batch, args.seed, work), env


def sweep_step(args):
    """(command, environment) of the modeled band of every kernel: the sweep on the CPU model, at
    one token per sequence as the kernels run here (`pipeline_inputs`)."""
    command = [sys.executable, "-m", "benchmarks.sweep", "--stages", ",".join(args.kernels),
               "--configs", args.config, "--batches", str(args.batch), "--tokens", "1",
               "--out", str(args.out / "modeled")]
    return command, {**os.environ, "NKICPU": "1"}


def _shown(command, env):
    """A command as a shell line, with the variables it sets that differ from this environment."""
    changed = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if os.environ.get(k) != v]
    return " ".join(changed + [shlex.join(str(c) for c in command)])


def print_plan(args, status):
    print(f"benchmarks.first_contact: {status}\n")
    print("On a trn2 instance it runs, from the repository root, at "
          f"{args.shape.name}, B = {args.batch}:\n")
    for name in args.kernels:
        print(f"  {_shown(*kernel_step(args, name))}\n")
    print(f"  {_shown(*sweep_step(args))}\n")
    print("Each kernel compiles and runs in a process of its own and is checked against "
          f"kernels.reference; {PROFILED} also gets a neuron-explorer profile after its process "
          f"exits. The report, {args.out / REPORT}, puts each kernel's result beside its modeled "
          "band. Nothing was run. `--cpu` writes the same report from the CPU model.")


# --- running it --------------------------------------------------------------------------------

def run_kernel(args, name):
    """One kernel's entry of the report."""
    command, env = kernel_step(args, name)
    variant = BY_NAME[name]
    entry = {"name": name, "kernel": variant.kernel, "lnc": variant.lnc,
             "command": _shown(command, env), "log": str(args.out / name / "kernel_process.log"),
             "measured": None}
    if name == PROFILED and not args.cpu:
        record, entry["measured"] = run_profiled(args, name, command, env)
    else:
        record = on_trn.kernel_process(command, args.out / name, env, args.timeout)
    entry.update({k: record.get(k) for k in ("backend", "launch", "error", "check", "host_s")})
    entry["ok"] = bool(record.get("ok"))
    return entry


def run_profiled(args, name, command, env):
    """The whole runner for `name`: (its kernel record, the measured entry of the report)."""
    work = args.out / name
    work.mkdir(parents=True, exist_ok=True)
    timeout = 3 * args.timeout      # its kernel process, capture and view each get --timeout
    print(f"$ {_shown(command, env)}", flush=True)
    log, status = on_trn.run_logged(command, env, timeout)
    (work / "runner.log").write_text(f"# {status}\n{log}")
    run = work / on_trn.KERNEL_RUN
    record = json.loads(run.read_text()) if run.is_file() else {
        "ok": False, "check": None, "error": {"type": "runner", "message": on_trn._tail(log, 25)}}
    events = args.out / f"{name}{on_trn.EVENTS_SUFFIX}"
    if not events.is_file():
        return record, {"label": on_trn.MEASURED, "total_us": None,
                        "problem": f"no profile ({status}): {on_trn._tail(log, 10)}"}
    data = on_trn.read_events_file(events)
    return record, {"label": data["label"], "total_us": data.get("measured_total_us"),
                    "events_file": str(events),
                    "explorer_summary": data["capture"]["explorer_summary"]}


def modeled_rows(args):
    """{kernel: its sweep row} from the CPU model's sweep ({} and the error if it did not run)."""
    command, env = sweep_step(args)
    print(f"$ {_shown(command, env)}", flush=True)
    try:
        subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=args.timeout)
        rows = json.loads((args.out / "modeled" / "sweep.json").read_text())["rows"]
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        return {}, f"{type(e).__name__}: {e}"
    return {r["variant"]: r for r in rows}, None


def modeled_entry(row, error):
    if row is None or row.get("status") != "ok":
        problem = error or (row or {}).get("error", {}).get("message", "no row")
        return {"label": MODELED, "problem": problem}
    return {"label": row["label"], "best_us": row["best_us"], "likely_us": row["modeled_us"],
            "launch_us": row["launch_us"], "roofline_us": row["roofline_us"]}


def build_report(args, entries, modeled, modeled_error, versions, status):
    for e in entries:
        e["modeled"] = modeled_entry(modeled.get(e["name"]), modeled_error)
    failed = [e["name"] for e in entries if not e["ok"]]
    return {
        "format": FORMAT, "mode": "cpu-model" if args.cpu else "device",
        "label": CPU_LABEL if args.cpu else DEVICE_LABEL,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": platform.python_version(), "machine": platform.machine(),
        "command": shlex.join(["python", "-m", "benchmarks.first_contact", *args.argv]),
        "config": args.shape.name, "batch": args.batch, "seed": args.seed,
        "device_status": status, "versions": versions,
        "summary": {"kernels": len(entries), "passed": len(entries) - len(failed),
                    "failed": failed},
        "kernels": entries,
        "notes": ["modeled.* are the trn2 cost model's band (best: documented peak figures; "
                  "likely: calibrated), launch overhead apart (launch_us); never measurements.",
                  "measured.total_us is neuron-explorer's total_time of the profiled execution: "
                  "on-device time, launch included, host excluded.",
                  "host_s is the host's wall time of the first call (compile and run; with --cpu "
                  "the CPU model's run): not a kernel time.",
                  "Steps 0 and 1 of the book are host sequences of kernels listed here."]}


def format_report(report):
    lines = [f"{report['label']}", f"{report['config']}, B = {report['batch']}",
             f"{'kernel':<18}{'result':<10}{'modeled best .. likely':>26}{'measured':>14}"]
    for e in report["kernels"]:
        m = e["modeled"]
        band = f"{m['best_us']:.1f} .. {m['likely_us']:.1f} us" if "best_us" in m else "-"
        measured = e["measured"] or {}
        got = f"{measured['total_us']:.1f} us" if measured.get("total_us") is not None else "-"
        result = "ok" if e["ok"] else ("FAILED" if e["error"] is None else "ERROR")
        lines.append(f"{e['name']:<18}{result:<10}{band:>26}{got:>14}")
        if e["error"]:
            lines.append("    " + on_trn._tail(on_trn.describe_error(e), 6).replace("\n", "\n    "))
    return "\n".join(lines)


# --- --simulate: nkicpu against nki.simulate --------------------------------------------------

def simulator_status():
    """None if the Neuron SDK's nki imports here (its simulator needs no device), else why not."""
    if on_trn.neuron_sdk_importable():
        return None
    return ("the Neuron SDK's nki does not import here (NKICPU=0), so there is no nki.simulate to "
            "compare with; pip installs it from the Neuron pip repository on x86 Linux")


def simulate_steps(args, name):
    """The two side processes of kernel `name`: [(command, environment)]."""
    work = args.out / name
    steps = []
    for side in cross_check.SIDES:
        command, changes = cross_check.side_command(name, work / "inputs", work, side)
        steps.append((command, {**os.environ, **changes}))
    return steps


def print_simulate_plan(args, status):
    print(f"benchmarks.first_contact --simulate: {status}.\n")
    print(f"With the SDK it writes each kernel's arguments ({args.shape.name}, B = {args.batch}, seed "
          f"{args.seed}) to <out>/<kernel>/inputs, then runs, from the repository root:\n")
    for name in args.kernels:
        for step in simulate_steps(args, name):
            print(f"  {_shown(*step)}\n")
    print(f"and writes {args.out / SIMULATE_REPORT}: per kernel, which side refused it and why, each "
          "output's max error of nkicpu against nki.simulate under its accuracy rule, and every argument "
          "either side wrote. Nothing was run.")


def run_simulate(args):
    """Both sides of every kernel; the report."""
    from kernels.reference import pipeline_inputs
    entries = []
    for name in args.kernels:
        variant = BY_NAME[name]
        work = args.out / name
        cross_check.save_inputs(work / "inputs",
                                variant.arguments(args.shape, pipeline_inputs(args.shape, seed=args.seed)))
        for command, env in simulate_steps(args, name):
            print(f"$ {_shown(command, env)}", flush=True)
            log, status = on_trn.run_logged(command, env, args.timeout)
            side = command[command.index("--side") + 1]
            (work / f"{side}.log").write_text(f"# {status}\n{log}")
        result = cross_check.compare_sides(work, variant.outputs, work / "inputs")
        entries.append({"name": name, "kernel": variant.kernel, "lnc": variant.lnc, **result})
        print(f"{name}: {format_agreement(entries[-1])}", flush=True)
    return {"format": SIMULATE_FORMAT, "mode": "simulate", "label": SIMULATE_LABEL,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "python": platform.python_version(), "machine": platform.machine(),
            "command": shlex.join(["python", "-m", "benchmarks.first_contact", *args.argv]),
            "config": args.shape.name, "batch": args.batch, "seed": args.seed,
            "environment": cross_check.SIDE_ENV, "versions": on_trn.sdk_versions(None),
            "summary": {"kernels": len(entries),
                        "agree": [e["name"] for e in entries if e["agree"]],
                        "differ": [e["name"] for e in entries if e["agree"] is False],
                        "refused": [e["name"] for e in entries if e["agree"] is None]},
            "kernels": entries}


def format_agreement(entry):
    """One line: who refused, or each output's max abs error and whether it is within its rule."""
    refused = [f"{side} refused ({err['type']}: {err['message'][:200]})"
               for side, err in entry["refused"].items() if err]
    if refused:
        return "; ".join(refused)
    parts = [f"{r.get('output', '?')} {r['max_abs_err']:.2e}" + ("" if r.get("ok") else " DIFFERS")
             if r.get("max_abs_err") is not None else f"{r.get('output', '?')} {r.get('problem')}"
             for r in entry["outputs"]]
    parts += [f"argument {w['argument']} " + ("bit-exact" if w["bit_exact"] else f"{w['max_abs_err']:.2e}")
              for w in entry["arguments_written"]]
    return ("agree: " if entry["agree"] else "differ: ") + ", ".join(parts)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    args.argv = argv
    if args.simulate:
        status = simulator_status()
        if status is not None:
            print_simulate_plan(args, status)
            return 0
        args.out.mkdir(parents=True, exist_ok=True)
        report = run_simulate(args)
        path = args.out / SIMULATE_REPORT
        path.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {path}")
        return 0
    status = None if args.cpu else on_trn.device_status()
    if status is not None:
        print_plan(args, status)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    entries = []
    for name in args.kernels:
        entries.append(run_kernel(args, name))
        print(f"{name}: {'ok' if entries[-1]['ok'] else 'FAILED'}", flush=True)
    modeled, modeled_error = modeled_rows(args)
    explorer_bin = None if args.cpu else on_trn.which_explorer()
    versions = on_trn.sdk_versions(explorer_bin)
    report = build_report(args, entries, modeled, modeled_error, versions, status)
    report["wall_s"] = time.time() - started
    path = args.out / REPORT
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(format_report(report))
    print(f"wrote {path}" + ("" if args.cpu else ": please send it back (the book's chapter "
                                                 "'Real profiles' says how)"))
    return 0 if not report["summary"]["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
