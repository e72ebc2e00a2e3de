"""Run one stage kernel on a real trn instance, check it, and capture a real profile.

    python -m benchmarks.on_trn in_proj --config Qwen3-Next-80B-TP4 --batch 8
    python -m benchmarks.on_trn gated_delta_rule --config Qwen3.5-27B-TP8 --batch 1 --out stages/

NOT YET RUN ON HARDWARE. This path is written from the Neuron documentation (release 2.32 and
the Neuron Explorer pages, cited below) and has not been run on a trn instance by the project
yet. Its pieces that need no hardware (argument parsing, the refusal without the SDK, the output
check, the events file) are tested; the compile, run, capture and export steps are not. Expect
to adjust it the first time it meets a real SDK, and please report what had to change.

What it does, in order:

1. Refuses (exit status 2) unless `import kernels` found the Neuron SDK
   (`kernels.NKI_BACKEND == "neuron-sdk"`): with NKICPU=1 or without the SDK there is no device
   to run on. It also needs `neuron-explorer` (package aws-neuronx-tools, installed in
   /opt/aws/neuron/bin on a Neuron DLAMI).
2. Builds the stage's inputs exactly as the benchmark sweep does
   (`kernels.reference.pipeline_inputs(shape)` and the arguments its `kernels.registry` entry
   names), so the device runs the shapes and values the modeled profiles were made from.
3. Calls the stage's `@nki.jit` entry point with NumPy arrays. Per the 2.32 `nki.jit` docstring
   (aws-neuron-sdk nki/api/nki/__init__.py) a NumPy-argument call "compiles and executes
   standalone kernel, without a framework": it compiles a NEFF and runs it on a NeuronCore. It
   sets NEURON_PLATFORM_TARGET_OVERRIDE=trn2 and NEURON_LOGICAL_NC_CONFIG=1 unless they are set
   (the kernels are LNC=1 kernels; the 2.31/2.32 `nki.jit` doc says the kernel's LNC must match
   NEURON_LOGICAL_NC_CONFIG, and trn2 defaults to LNC=2).
4. Checks every output against its torch reference (`kernels.reference`) under the accuracy
   rule its registry entry gives it (`kernels.accuracy`). A failed check stops here with exit
   status 1 (unless --keep-going).
5. Finds the NEFF. NEURON_FRAMEWORK_DEBUG=1 "triggers the Neuron compiler to save the NEFF ...
   to the current directory after compilation of your NKI kernel" (nki/guides/use-neuron-profile.rst,
   Step 1), so the kernel is called from inside a fresh work directory and the newest `*.neff`
   that appears under it is taken. Where the NEFF lands is the least certain step: if none
   appears, the error says so and `--neff PATH` names it by hand.
6. Captures a profile: `neuron-explorer capture -n NEFF -s WORK/<stage>.ntff
   --profile-nth-exec=2 --enable-dge-notifs` (use-neuron-profile.rst, Step 3: the 2nd execution
   skips warm-up; the NTFF is saved as `<stage>_exec_2.ntff`). The capture runs the NEFF on
   zero-filled inputs (the CLI's default): the stage kernels have no data-dependent control flow,
   so the instruction stream is the same as with real inputs.
7. Exports it: `neuron-explorer view -n NEFF -s NTFF --output-format json --output-file F`
   (archive/profiler/neuron-profile-user-guide.rst, "JSON"; tools/neuron-explorer/get-started.rst,
   "Export to JSON", which names the output device_profile_model_<id>.json in the session-dir
   form, so that name is looked for too). `--export parquet` uses `--output-format parquet`
   instead (the default format, tools/neuron-explorer/how-to-analyze-profile-output.rst; needs
   pandas and pyarrow). The JSON full-profile export is documented as being retired after 2.33:
   on a newer SDK use --export parquet.
8. Reduces the export with `nkicpu.explorer` to the event list a `Profile` is made of, and writes
   `<out>/<stage>_trn_events.json`: the events, the label "measured on trn2 (neuron-explorer)",
   the SDK versions, the date, the shape and the output check. A notebook draws it with the same
   code as a modeled profile:

       from benchmarks.on_trn import load_events
       from nkicpu.timeline import plot_timeline
       plot_timeline(load_events("in_proj_trn_events.json"))

   (or `Profile.from_events(d["events"], d["label"])` on the parsed JSON). The events file has no
   HBM roofline: the export does not say how many HBM bytes the kernel moved.

The book's trn cells call `run_in_notebook(stage, config, batch)`: where `device_status()` finds the
Neuron SDK, a Neuron device and neuron-explorer, it runs this command and returns the `Profile`;
elsewhere it prints the command, what it does and what the machine lacks, and starts nothing.

The NEFF, the NTFF, the raw export and the tools' logs stay in the work directory (default
benchmarks/results/trn/<stage>-<time>/, git-ignored) for the Neuron Explorer UI.

Exit status: 0 done; 1 the output check or a step failed; 2 refused (no Neuron SDK, no
neuron-explorer, bad arguments).
"""
import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

if __name__ == "__main__":
    # Before `kernels` imports the SDK: the compiler must keep the NEFF, and the kernels are LNC=1.
    os.environ["NEURON_FRAMEWORK_DEBUG"] = "1"
    os.environ.setdefault("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    os.environ.setdefault("NEURON_LOGICAL_NC_CONFIG", "1")

import numpy as np  # noqa: E402

import kernels  # noqa: E402  (the Neuron SDK's nki where it imports, else nkicpu)
from kernels.accuracy import compare  # noqa: E402
from kernels.reference import pipeline_inputs, to_numpy, to_torch  # noqa: E402
from kernels.registry import BY_NAME, ENTRIES  # noqa: E402
from nkicpu import explorer  # noqa: E402
from nkicpu.profile import Profile  # noqa: E402

from .sweep import config_id, parse_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "stages"
DEFAULT_WORK_ROOT = REPO / "benchmarks" / "results" / "trn"
EXPLORER_DEFAULT_DIR = Path("/opt/aws/neuron/bin")   # where aws-neuronx-tools installs it
FORMAT = "nki-gdn-book trn events v1"
MEASURED = explorer.MEASURED                         # "measured on trn2 (neuron-explorer)"
EVENTS_SUFFIX = "_trn_events.json"

# What this runner can put on a NeuronCore: the registry's single-launch kernels at LNC=1.
RUNNABLE = tuple(e.name for e in ENTRIES if not e.launches and e.lnc == 1)


class OnTrnError(Exception):
    """A step failed; `code` is the exit status (1 failed, 2 refused)."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


# --- arguments --------------------------------------------------------------------------------

def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.on_trn",
        description="Run one stage kernel on a trn NeuronCore (Neuron SDK), check it against the torch "
                    "reference, capture a profile with neuron-explorer and write <out>/<stage>"
                    f"{EVENTS_SUFFIX}. Written from the documentation; not yet run on hardware by the project.")
    p.add_argument("stage", choices=RUNNABLE,
                   help="the kernel to run: a stage, gdn_tkg or a single-launch composition step")
    p.add_argument("--config", required=True,
                   help="per-device configuration '<model>-TP<tp>', e.g. Qwen3-Next-80B-TP4")
    p.add_argument("--batch", type=_positive, required=True, help="batch size B")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"where <stage>{EVENTS_SUFFIX} goes (default: the repository's stages/)")
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs (kernels.reference.pipeline_inputs)")
    p.add_argument("--work", type=Path, default=None,
                   help="work directory for the NEFF, NTFF, export and logs "
                        "(default: benchmarks/results/trn/<stage>-<time>/, git-ignored)")
    p.add_argument("--neff", type=Path, default=None,
                   help="profile this NEFF instead of looking for the one the kernel call saved")
    p.add_argument("--export", choices=("json", "parquet"), default="json",
                   help="neuron-explorer view output format to reduce (default json; parquet needs pandas+pyarrow)")
    p.add_argument("--profile-nth-exec", type=_positive, default=2,
                   help="which execution neuron-explorer profiles (default 2, skipping warm-up)")
    p.add_argument("--no-dge-notifs", action="store_true",
                   help="capture without --enable-dge-notifs (try this if the capture times out)")
    p.add_argument("--explorer", default="neuron-explorer", help="the neuron-explorer executable")
    p.add_argument("--timeout", type=_positive, default=900,
                   help="seconds allowed for each neuron-explorer call (default 900)")
    p.add_argument("--keep-going", action="store_true",
                   help="capture the profile even if the output check fails (the file records the check)")
    args = p.parse_args(argv)
    try:
        args.shape = parse_config(args.config).with_batch(args.batch)
    except ValueError as e:
        p.error(str(e).replace("--configs", "--config"))
    args.variant = BY_NAME[args.stage]
    return args


# --- checking the outputs ---------------------------------------------------------------------

def _as_tuple(outputs):
    """A kernel's outputs as a tuple (one output, or several as a tuple or list)."""
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def check_outputs(stage, kernel_args, outputs):
    """Compare the kernel's outputs with the torch reference run on the same arguments, each under
    its accuracy rule (`kernels.accuracy.compare` rows)."""
    entry = BY_NAME[stage]
    got = _as_tuple(outputs)
    want = entry.load_reference()(*[to_torch(a) if isinstance(a, np.ndarray) else a for a in kernel_args])
    want = tuple(to_numpy(t) for t in (want if isinstance(want, tuple) else (want,)))
    if len(got) != len(entry.outputs):
        raise OnTrnError(f"{stage}: the kernel returned {len(got)} outputs, expected {len(entry.outputs)} "
                         f"({', '.join(n for n, _ in entry.outputs)})")
    return [compare(g, w, rule, name) for (name, rule), g, w in zip(entry.outputs, got, want)]


def format_check(rows):
    lines = [f"  {'output':<20}{'rule':<11}{'max abs err':>12}{'cosine':>11}  result"]
    for r in rows:
        err = "-" if r["max_abs_err"] is None else f"{r['max_abs_err']:.2e}"
        cos = "-" if r["cosine"] is None else f"{r['cosine']:.6f}"
        lines.append(f"  {r['output']:<20}{r['rule']:<11}{err:>12}{cos:>11}  "
                     + ("ok" if r["ok"] else f"FAILED: {r['problem']}"))
    return "\n".join(lines)


# --- the events file --------------------------------------------------------------------------

def write_events(path, events, label=MEASURED, **metadata):
    """Write an events file: {"format", "label", metadata..., "events"}; returns its path.

    `label` says where the events come from; only a real capture may be labelled measured."""
    path = Path(path)
    data = {"format": FORMAT, "label": label, **metadata, "events": list(events)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_events_file(path):
    """The parsed events file, after checking that it is one."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("format") != FORMAT or "events" not in data or "label" not in data:
        raise ValueError(f"{path}: not an events file of benchmarks.on_trn (expected format {FORMAT!r} with "
                         f"'label' and 'events')")
    for i, e in enumerate(data["events"]):
        missing = {"lane", "name", "start_us", "dur_us"} - set(e)
        if missing:
            raise ValueError(f"{path}: event {i} lacks {sorted(missing)}")
    return data


def load_events(path):
    """A `Profile` of an events file, under the file's own label (plot it with nkicpu.timeline)."""
    data = read_events_file(path)
    return Profile.from_events(data["events"], data["label"])


# --- running tools ----------------------------------------------------------------------------

def which_explorer(name="neuron-explorer"):
    """The neuron-explorer executable: `name` on PATH, else in /opt/aws/neuron/bin; None if neither."""
    return shutil.which(name) or shutil.which(name, path=str(EXPLORER_DEFAULT_DIR))


def find_explorer(name):
    """`which_explorer(name)`, or an OnTrnError (exit status 2) saying where to get it."""
    found = which_explorer(name)
    if not found:
        raise OnTrnError(f"{name} not found on PATH or in {EXPLORER_DEFAULT_DIR}: it comes with the "
                         "aws-neuronx-tools package (preinstalled on the Neuron DLAMI; "
                         "`sudo apt install aws-neuronx-tools`), or pass --explorer PATH", code=2)
    return found


def run_tool(cmd, what, timeout, log_dir=None):
    """Run `cmd` (an argument list, no shell) and return its CompletedProcess; a clear OnTrnError if it
    is missing, times out or fails. Its output goes to <log_dir>/<what>.log."""
    cmd = [str(c) for c in cmd]
    print(f"$ {shlex.join(cmd)}", flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as e:
        raise OnTrnError(f"{what}: cannot run {cmd[0]} ({e})") from e
    except subprocess.TimeoutExpired as e:
        raise OnTrnError(f"{what} did not finish within {timeout} s: {shlex.join(cmd)} "
                         "(raise --timeout; for a capture, try --no-dge-notifs)") from e
    if log_dir is not None:
        Path(log_dir, f"{what.replace(' ', '_')}.log").write_text(
            f"$ {shlex.join(cmd)}\n# exit {r.returncode}\n# stdout\n{r.stdout}\n# stderr\n{r.stderr}")
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout or "").strip().splitlines()[-15:])
        raise OnTrnError(f"{what} failed (exit {r.returncode}): {shlex.join(cmd)}\n{tail}")
    return r


def capture_command(explorer_bin, neff, session, nth_exec=2, dge_notifs=True):
    """`neuron-explorer capture` (nki/guides/use-neuron-profile.rst, Step 3)."""
    cmd = [explorer_bin, "capture", "-n", neff, "-s", session, f"--profile-nth-exec={nth_exec}"]
    return cmd + ["--enable-dge-notifs"] if dge_notifs else cmd


def view_command(explorer_bin, neff, ntff, fmt, output):
    """`neuron-explorer view` writing an export instead of starting the UI."""
    return [explorer_bin, "view", "-n", neff, "-s", ntff, "--output-format", fmt, "--output-file", output]


def newest(directory, pattern, since=None):
    """The most recently modified file matching `pattern` under `directory` (modified at or after
    `since`, a time.time() value, if given), or None."""
    found = [p for p in Path(directory).rglob(pattern)
             if p.is_file() and (since is None or p.stat().st_mtime >= since)]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


@contextlib.contextmanager
def working_directory(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


# --- versions ---------------------------------------------------------------------------------

def sdk_versions(explorer_bin=None, timeout=60):
    """Installed Neuron package versions (None where absent) and `neuron-explorer --version`."""
    versions = {}
    for dist in ("nki", "neuronx-cc", "torch-neuronx", "libneuronxla"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    if explorer_bin:
        try:
            r = subprocess.run([explorer_bin, "--version"], capture_output=True, text=True, timeout=timeout)
            versions["neuron-explorer"] = (r.stdout or r.stderr).strip() or None
        except (OSError, subprocess.SubprocessError) as e:
            versions["neuron-explorer"] = f"unknown ({type(e).__name__})"
    return versions


# --- can this machine run it? ----------------------------------------------------------------

# A fresh interpreter imports `nki` with NKICPU=0: this process may have registered nkicpu as `nki`
# (`import kernels`), and PyPI's placeholder `nki` raises ImportError on import, so only the real
# SDK succeeds (book-tooling.md: detect NKI with a real import, not find_spec).
SDK_PROBE = "import nki, nki.isa, nki.language"


def neuron_sdk_importable(timeout=120):
    """True if the real Neuron SDK imports in a fresh interpreter (this one's executable and PATHs)."""
    env = {**os.environ, "NKICPU": "0"}
    try:
        r = subprocess.run([sys.executable, "-c", SDK_PROBE], env=env, capture_output=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def neuron_devices():
    """The Neuron device files (/dev/neuron0 ...) the Neuron driver creates on a trn instance."""
    return sorted(Path("/dev").glob("neuron*"))


def device_status():
    """None if this machine can run a kernel on a NeuronCore and capture its profile, else one
    sentence naming what is missing (the Neuron SDK, a Neuron device, neuron-explorer)."""
    missing = []
    if not neuron_sdk_importable():
        missing.append("the Neuron SDK (`import nki` fails in a fresh Python with NKICPU=0)")
    if not neuron_devices():
        missing.append("a Neuron device (no /dev/neuron*)")
    if not which_explorer():
        missing.append(f"neuron-explorer (not on PATH or in {EXPLORER_DEFAULT_DIR})")
    if not missing:
        return None
    listed = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
    return f"This machine cannot run kernels on a NeuronCore: it lacks {listed}."


def _from_repo(path):
    """`path` as the command line names it: relative to the repository root (where the command
    runs) when it is inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def run_in_notebook(stage, config, batch, out="."):
    """A notebook's trn cell. Where `device_status()` is None, run `python -m benchmarks.on_trn`
    for `stage` in a process of its own (NKICPU=0, from the repository root, with this Python),
    show its output, and return the real `Profile` it wrote to `<out>/<stage>_trn_events.json`.
    Elsewhere print the command, what it does and why it does not run here, and return None."""
    events = Path(out).resolve() / f"{stage}{EVENTS_SUFFIX}"
    argv = [stage, "--config", config, "--batch", str(batch), "--out", _from_repo(events.parent)]
    args = parse_args(argv)                 # a wrong stage or config fails here, on any machine
    command = "NKICPU=0 python -m benchmarks.on_trn " + shlex.join(argv)
    status = device_status()
    if status is not None:
        does = (f"It compiles {args.variant.kernel} with the Neuron compiler, runs it on a NeuronCore "
                f"(LNC=1) at {args.shape.name}, B = {args.shape.B}, checks its outputs against "
                "kernels.reference, captures a profile of its second execution with neuron-explorer, and "
                f"writes {_from_repo(events)}, which this cell then loads and returns as a real Profile "
                f"(label \"{MEASURED}\"). The NEFF, the NTFF and the raw export stay in "
                f"{_from_repo(DEFAULT_WORK_ROOT)}/ for the Neuron Explorer UI.")
        print(f"On a trn instance this cell runs, from the repository root:\n\n    {command}\n")
        print(textwrap.fill(does, 80, break_on_hyphens=False) + "\n")
        print(textwrap.fill(f"Not run here. {status}", 80, break_on_hyphens=False))
        return None
    print(f"$ {command}", flush=True)
    with subprocess.Popen([sys.executable, "-m", "benchmarks.on_trn", *argv], cwd=REPO, text=True,
                          env={**os.environ, "NKICPU": "0"},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        for line in proc.stdout:            # streamed: compiling and capturing take minutes
            print(line, end="", flush=True)
    if proc.returncode != 0:
        raise OnTrnError(f"{command} failed with exit status {proc.returncode} (its output is above)",
                         proc.returncode)
    return load_events(events)


# --- the steps on the instance ----------------------------------------------------------------

def run_on_device(args, work):
    """Steps 2-4: inputs, the device run inside `work` (so the NEFF lands there), the check."""
    shape, variant = args.shape, args.variant
    inputs = pipeline_inputs(shape, seed=args.seed)
    kernel_args = variant.arguments(shape, inputs)
    kernel = variant.load_kernel()
    print(f"running {variant.kernel} on the NeuronCore: {shape.name}, B = {shape.B} "
          "(the first call compiles)", flush=True)
    started = time.time()
    with working_directory(work):
        outputs = kernel(*kernel_args)   # NumPy arguments: standalone compile + run (nki.jit, 2.32)
    print(f"compiled and ran in {time.time() - started:.1f} s host time (not a kernel time)")
    check = check_outputs(args.stage, kernel_args, outputs)
    arg_bytes = {"inputs": int(sum(a.nbytes for a in kernel_args if isinstance(a, np.ndarray))),
                 "outputs": int(sum(np.asarray(o).nbytes for o in _as_tuple(outputs)))}
    return started, check, arg_bytes


def find_neff(work, since):
    neff = newest(work, "*.neff", since)
    if neff is None:
        raise OnTrnError(f"no NEFF appeared under {work} after the kernel ran with NEURON_FRAMEWORK_DEBUG=1 "
                         "(the documented behaviour is to save it in the current directory). Find it, e.g. "
                         f"`find / -name '*.neff' -newer {work}`, and rerun with --neff PATH")
    return neff


def capture_and_export(args, explorer_bin, neff, work):
    """Steps 6-7: the NTFF, the export, and its reduction to events. Returns (events, export info)."""
    session = work / f"{args.stage}.ntff"
    started = time.time()
    run_tool(capture_command(explorer_bin, neff, session, args.profile_nth_exec, not args.no_dge_notifs),
             "neuron-explorer capture", args.timeout, work)
    expected = work / f"{args.stage}_exec_{args.profile_nth_exec}.ntff"
    ntff = expected if expected.is_file() else newest(work, "*.ntff", started)
    if ntff is None:
        raise OnTrnError(f"neuron-explorer capture wrote no .ntff under {work} (expected {expected.name})")

    if args.export == "json":
        out = work / f"{args.stage}_profile.json"
        run_tool(view_command(explorer_bin, neff, ntff, "json", out), "neuron-explorer view", args.timeout, work)
        found = out if out.is_file() else newest(work, "device_profile_model_*.json", started)
        if found is None:
            raise OnTrnError(f"neuron-explorer view wrote neither {out.name} nor device_profile_model_*.json "
                             f"under {work}; try --export parquet")
        try:
            events = explorer.read_json(found)
        except (KeyError, TypeError, ValueError) as e:
            raise OnTrnError(f"{found} is not the documented JSON layout (a top-level 'instruction' list; "
                             f"{type(e).__name__}: {e}); this SDK may have retired the JSON export: "
                             "rerun with --export parquet") from e
        summary = _json_summary(found)
    else:
        out = work / f"{args.stage}_parquet"
        run_tool(view_command(explorer_bin, neff, ntff, "parquet", out), "neuron-explorer view", args.timeout, work)
        tables = newest(out if out.exists() else work, "Instruction*.parquet", started)
        if tables is None:
            raise OnTrnError(f"neuron-explorer view wrote no Instruction*.parquet under {out}")
        found = tables.parent
        events = explorer.read_parquet(str(found))
        summary = None
    if not events:
        raise OnTrnError(f"the export {found} reduced to no events")
    return events, {"neff": str(neff), "ntff": str(ntff), "export": str(found), "export_format": args.export,
                    "profile_nth_exec": args.profile_nth_exec, "dge_notifs": not args.no_dge_notifs,
                    "inputs": "zero-filled (the neuron-explorer capture default)",
                    "explorer_summary": summary}


def _json_summary(path):
    """The export's own summary (total_time in seconds ...), if it has one."""
    try:
        with open(path) as f:
            summary = json.load(f).get("summary")
        return summary[0] if isinstance(summary, list) and summary else None
    except (OSError, ValueError, AttributeError):
        return None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        return _main(argv, args)
    except OnTrnError as e:
        print(f"benchmarks.on_trn: {e}", file=sys.stderr)
        return e.code


def _main(argv, args):
    if kernels.NKI_BACKEND != "neuron-sdk":
        why = ("NKICPU=1 is set" if os.environ.get("NKICPU") == "1"
               else "`import nki` did not find the Neuron SDK")
        raise OnTrnError(
            f"this command runs a kernel on a trn NeuronCore and needs the Neuron SDK, but `import kernels` "
            f"chose {kernels.NKI_BACKEND} ({why}). Run it on a trn instance with the SDK (nki and neuronx-cc "
            "from the Neuron pip repository) and NKICPU unset. Without hardware, the modeled profile is "
            "nkicpu.profile.profile(kernel)(*arrays) (see the book's chapter on modeled profiles).", code=2)
    explorer_bin = find_explorer(args.explorer)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = (args.work or DEFAULT_WORK_ROOT / f"{args.stage}-{stamp}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"work directory: {work}")

    started, check, arg_bytes = run_on_device(args, work)
    print("output check against kernels.reference:\n" + format_check(check))
    if not all(r["ok"] for r in check) and not args.keep_going:
        raise OnTrnError("the device outputs do not match the reference (see above); no profile captured "
                         "(--keep-going captures anyway)")

    neff = args.neff.resolve() if args.neff else find_neff(work, started)
    if not neff.is_file():
        raise OnTrnError(f"--neff {neff}: no such file")
    print(f"NEFF: {neff}")
    events, capture = capture_and_export(args, explorer_bin, neff, work)

    shape = args.shape
    path = write_events(
        Path(args.out) / f"{args.stage}{EVENTS_SUFFIX}", events, label=MEASURED,
        stage=args.stage, kernel=args.variant.kernel, config=config_id(shape),
        shape={f: getattr(shape, f) for f in ("B", "H", "nk", "nv", "dk", "dv", "K")}, seed=args.seed,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        sdk=sdk_versions(explorer_bin), host=platform.node(),
        environment={k: os.environ.get(k) for k in ("NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_LOGICAL_NC_CONFIG")},
        command=" ".join(["python -m benchmarks.on_trn", *map(shlex.quote, argv)]),
        check=check, check_ok=all(r["ok"] for r in check), argument_bytes=arg_bytes, capture=capture,
        note="Times are from a real neuron-explorer capture on a trn instance, reduced by nkicpu.explorer; "
             "start_us is relative to the first event.")
    print(load_events(path).summary())
    print(f"wrote {path}")
    return 0 if all(r["ok"] for r in check) else 1


if __name__ == "__main__":
    sys.exit(main())
