"""Run one kernel on a real trn instance, check it, and capture a real profile.

    python -m benchmarks.on_trn in_proj --config Qwen3-Next-80B-TP4 --batch 8
    python -m benchmarks.on_trn 5_two_cores --config Qwen3.5-27B-TP8 --batch 1 --out stages/

NOT YET RUN ON HARDWARE. Written from the Neuron documentation (SDK 2.32, NKI 0.6, and the 2.33 /
2.34 pages; aws-neuron-sdk paths below) and the NKI library's profiler utilities
(aws-neuron/nki-library, test/utils/profiler_utils.py). The parts that need no device are tested
(tests/test_on_trn.py); the compile, run, capture and export are not. Expect to adjust it the
first time it meets a real SDK, and please report what had to change.

What it does, in order:

1. Refuses (exit status 2) unless `import kernels` found the Neuron SDK and `device_status()` finds
   everything else: NKI 0.4.0+ (Neuron 2.30+, where `nki.jit` runs a kernel called with NumPy
   arrays standalone), a /dev/neuron* device, neuron-explorer (aws-neuronx-tools), torch (the
   reference; a CPU build is enough) and pyarrow (the Parquet export).
2. Runs the kernel in a process of its own (`kernel_command`, `--kernel-only`): it builds the
   inputs as the sweep does (`kernels.reference.pipeline_inputs`, `kernels.registry`), calls
   the `@nki.jit` entry point with NumPy arrays (compile + run), checks every output against
   `kernels.reference` (`check_outputs`), writes <work>/kernel_run.json and exits. Its environment
   (`kernel_env`) sets NEURON_LOGICAL_NC_CONFIG to the kernel's LNC, NKI_DEBUG_INFO=True (source
   lines in the profile) and NEURON_RT_INSPECT_ENABLE / _DEVICE_PROFILE / _OUTPUT_DIR, so the
   runtime writes the NEFF it loaded under <work>/inspect/
   (tools/neuron-explorer/environment-variables.rst). The LNC=2 launches (the entries named 5_two_cores and *_lnc2)
   are `kernel[2]` up to NKI 0.6 (Neuron 2.32) and the plain kernel from NKI 0.7 (2.33), which
   takes the LNC from NEURON_LOGICAL_NC_CONFIG (`lnc_launch`).
3. Once that process has exited, so that its NeuronCores are free (the runtime reserves them for
   the process that initialised it; aws-neuron-sdk issue 1065), captures a profile of the NEFF:
   `neuron-explorer capture -n NEFF -s <stage>.ntff --num-exec=2 --profile-nth-exec=2
   --enable-dge-notifs` (tools/neuron-explorer/how-to-profile-workload.rst; the second execution
   skips warm-up and is saved as <stage>_exec_2.ntff). The capture runs the NEFF on zero-filled
   inputs; the kernels have no data-dependent control flow, so the instruction stream is the same.
4. Exports it: `neuron-explorer view -n NEFF -s NTFF --output-format parquet --output-file DIR`
   (Parquet is the default and the supported format, how-to-analyze-profile-output.rst; the full
   JSON export, `--export json`, is legacy and unmaintained from Neuron 2.34), reduces the tables
   with `nkicpu.explorer` and reads Explorer's `total_time` from the Summary table.
5. Writes `<out>/<stage>_trn_events.json`: the events, the label "measured on trn2
   (neuron-explorer)", `measured_total_us`, the SDK versions, the shape, the launch and the check.
   A notebook draws it with the same code as a modeled profile:

       from benchmarks.on_trn import load_events
       from nkicpu.timeline import plot_timeline
       plot_timeline(load_events("in_proj_trn_events.json"))

The book's trn cells call `run_in_notebook(stage, config, batch)`, which runs this command where
`device_status()` is None and otherwise prints it, what it does and what the machine lacks.
`python -m benchmarks.first_contact` runs every kernel of the book this way and writes one report.

The NEFF, the NTFF, the export and the logs stay in the work directory (default
benchmarks/results/trn/<stage>-<time>/, git-ignored) for the Neuron Explorer UI.

Exit status: 0 done; 1 the kernel failed to compile, run or match, or a step failed; 2 refused
(no Neuron SDK or another requirement, bad arguments).
"""
import argparse
import contextlib
import dataclasses
import datetime
import importlib.metadata
import importlib.util
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

import numpy as np

import kernels  # the Neuron SDK's nki where it imports, else nkicpu
from nkicpu import explorer
from nkicpu.profile import Profile, lane_cores

from kernels.accuracy import compare
from kernels.registry import BY_NAME, ENTRIES


def _reference(name):
    """kernels.reference.<name>, imported at its first call. kernels.reference needs torch, which
    the Neuron venvs of SDK 2.32 lack (running.md): `device_status()` must still answer there."""
    def call(*args, **kwargs):
        from kernels import reference
        return getattr(reference, name)(*args, **kwargs)
    call.__name__ = name
    return call


pipeline_inputs, to_numpy, to_torch = (_reference(n) for n in ("pipeline_inputs", "to_numpy",
                                                                 "to_torch"))

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "stages"
DEFAULT_WORK_ROOT = REPO / "benchmarks" / "results" / "trn"
EXPLORER_DEFAULT_DIR = Path("/opt/aws/neuron/bin")   # where aws-neuronx-tools installs it
FORMAT = "nki-gdn-book trn events v1"
MEASURED = explorer.MEASURED                         # "measured on trn2 (neuron-explorer)"
EVENTS_SUFFIX = "_trn_events.json"

# What this runner can put on NeuronCores: the registry's single-launch kernels (a host pipeline
# is several launches).
RUNNABLE = tuple(e.name for e in ENTRIES if not e.launches)


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
                   help="the kernel to run: a stage, gdn_tkg, a single-launch composition step, "
                        "or verify (5_two_cores and the *_lnc2 entries are LNC=2 launches)")
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
                   help="profile this NEFF instead of the one the runtime's inspect output saved")
    p.add_argument("--export", choices=("parquet", "json"), default="parquet",
                   help="neuron-explorer view output format to reduce (default parquet, read with "
                        "pyarrow; json is the legacy export, last supported by Neuron 2.33)")
    p.add_argument("--profile-nth-exec", type=_positive, default=2,
                   help="which execution neuron-explorer profiles (default 2, skipping warm-up)")
    p.add_argument("--no-dge-notifs", action="store_true",
                   help="capture without --enable-dge-notifs (try this if the capture times out)")
    p.add_argument("--explorer", default="neuron-explorer", help="the neuron-explorer executable")
    p.add_argument("--timeout", type=_positive, default=900,
                   help="seconds allowed for the kernel process and each neuron-explorer call "
                        "(default 900)")
    p.add_argument("--keep-going", action="store_true",
                   help="capture the profile even if the output check fails (the file records the check)")
    p.add_argument("--kernel-only", action="store_true", help=argparse.SUPPRESS)  # kernel process
    args = p.parse_args(argv)
    from .sweep import parse_config  # imports kernels.reference, so torch: not needed before here
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
    return Profile.from_events(data["events"], data["label"], cores=lane_cores(data["events"]))


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


def _tail(text, lines=15):
    return "\n".join((text or "").strip().splitlines()[-lines:])


def run_tool(cmd, what, timeout, log_dir=None, env=None):
    """Run `cmd` (an argument list, no shell) and return its CompletedProcess; a clear OnTrnError if it
    is missing, times out or fails. Its output goes to <log_dir>/<what>.log."""
    cmd = [str(c) for c in cmd]
    print(f"$ {shlex.join(cmd)}", flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                           env=env)
    except FileNotFoundError as e:
        raise OnTrnError(f"{what}: cannot run {cmd[0]} ({e})") from e
    except subprocess.TimeoutExpired as e:
        raise OnTrnError(f"{what} did not finish within {timeout} s: {shlex.join(cmd)} (raise "
                         "--timeout; for a capture, try --no-dge-notifs; if `view` started its "
                         "UI server, report it: the runner expects --output-file to skip the UI)"
                         ) from e
    if log_dir is not None:
        Path(log_dir, f"{what.replace(' ', '_')}.log").write_text(
            f"$ {shlex.join(cmd)}\n# exit {r.returncode}\n# stdout\n{r.stdout}\n# stderr\n{r.stderr}")
    if r.returncode != 0:
        raise OnTrnError(f"{what} failed (exit {r.returncode}): {shlex.join(cmd)}\n"
                         f"{_tail(r.stderr or r.stdout)}")
    return r


def capture_command(explorer_bin, neff, session, nth_exec=2, dge_notifs=True):
    """`neuron-explorer capture`, running the NEFF `nth_exec` times and profiling the last
    (tools/neuron-explorer/how-to-profile-workload.rst, "CLI profiling"; the NKI library's
    test/utils/profiler_utils.py passes --num-exec=N --profile-nth-exec=N the same way)."""
    cmd = [explorer_bin, "capture", "-n", neff, "-s", session, f"--num-exec={nth_exec}",
           f"--profile-nth-exec={nth_exec}"]
    return cmd + ["--enable-dge-notifs"] if dge_notifs else cmd


def captured_ntff(session, nth_exec):
    """The NTFF `capture_command` writes: <session>_exec_<n>.ntff, or the session file itself
    when n = 1 (the NKI library's profiler_utils.py, _generate_expected_ntff_files)."""
    session = Path(session)
    return session if nth_exec == 1 else session.with_name(f"{session.stem}_exec_{nth_exec}.ntff")


def view_command(explorer_bin, neff, ntff, fmt, output):
    """`neuron-explorer view` writing an export to `output` (a directory of Parquet tables, or a
    JSON file) instead of serving the UI, in the form the NKI library's profiler utilities run
    unattended (`view -n -s --output-format --output-file`)."""
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


# --- the SDK: versions, what it can do, how an LNC=2 kernel is launched -------------------------

# NKI releases by Neuron SDK: 0.4.0 = 2.30, 0.5.0 = 2.31, 0.6.0 = 2.32, 0.7.0 = 2.33
# (nki/migration/index.rst, "NKI version to Neuron SDK mapping").
# From NKI 0.4.0, `nki.jit` called with NumPy arrays "compiles and executes standalone kernel"
# (the nki.jit docstring, nki/api/nki/__init__.py, from v2.30.0 on).
STANDALONE_NKI = (0, 4)
# From NKI 0.7.0 the kernel[lnc] grid is being deprecated and the LNC comes from
# NEURON_LOGICAL_NC_CONFIG (nki/get-started/about/lnc.rst, 2.33; about-neuron/announcements/
# neuron2.x/announce-intent-eos-nki-spmd-launch-grid.rst; compiler error NCC_EVRF066).
ENV_LNC_NKI = (0, 7)


def version_tuple(text):
    """'0.6.0' -> (0, 6, 0); '2.32.1.5+abc' -> (2, 32, 1, 5): the leading numeric fields."""
    parts = []
    for piece in text.replace("+", ".").replace("-", ".").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def installed_version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# The runtime, driver and tools are system packages (apt on Ubuntu, dnf on Amazon Linux).
SYSTEM_PACKAGES = ("aws-neuronx-runtime-lib", "aws-neuronx-dkms", "aws-neuronx-tools",
                   "aws-neuronx-collectives")


def system_package_versions(timeout=60):
    """{package: version} of SYSTEM_PACKAGES that dpkg or rpm knows ({} where neither answers)."""
    queries = (["dpkg-query", "-W", "-f", "${Package} ${Version}\n"],
               ["rpm", "-q", "--qf", "%{NAME} %{VERSION}\n"])
    for query in queries:
        try:
            r = subprocess.run(query + list(SYSTEM_PACKAGES), capture_output=True, text=True,
                               timeout=timeout)
        except (OSError, subprocess.SubprocessError):
            continue
        found = dict(line.split(" ", 1) for line in r.stdout.splitlines() if line.count(" ") == 1)
        if found:
            return {k: v for k, v in found.items() if k in SYSTEM_PACKAGES}
    return {}


def sdk_versions(explorer_bin=None, timeout=60):
    """Installed Neuron Python packages (None where absent), the runtime / driver / tools system
    packages, and `neuron-explorer --version`."""
    versions = {dist: installed_version(dist)
                for dist in ("nki", "neuronx-cc", "libneuronxla", "jax-neuronx", "torch",
                             "pyarrow")}
    versions.update(system_package_versions(timeout))
    if explorer_bin:
        try:
            r = subprocess.run([explorer_bin, "--version"], capture_output=True, text=True, timeout=timeout)
            versions["neuron-explorer"] = (r.stdout or r.stderr).strip() or None
        except (OSError, subprocess.SubprocessError) as e:
            versions["neuron-explorer"] = f"unknown ({type(e).__name__})"
    return versions


def lnc_launch(lnc, nki_version):
    """How a launch on `lnc` cores is spelled: "bracket" (kernel[lnc], NKI 0.6 / Neuron 2.32 and
    before) or "env" (the plain kernel, NEURON_LOGICAL_NC_CONFIG=lnc, from NKI 0.7 / Neuron 2.33).
    Without an SDK version (the CPU model) the bracket. Either way the runtime's LNC is `lnc`."""
    if lnc > 1 and nki_version and version_tuple(nki_version) >= ENV_LNC_NKI:
        return "env"
    return "bracket"


def launch_kernel(variant, nki_version):
    """The callable of one launch of `variant` (see `lnc_launch`)."""
    if lnc_launch(variant.lnc, nki_version) == "env":
        return dataclasses.replace(variant, lnc=1).load_kernel()
    return variant.load_kernel()


def kernel_env(lnc, inspect_dir, base=None):
    """The environment of the kernel process (compile and run).

    NKI_DEBUG_INFO=True before compiling makes the NEFF carry kernel_debug_info.json, so profile
    instructions name their NKI source lines; NEURON_RT_INSPECT_* make the runtime write the NEFF it
    loads, and a device profile of its first execution, under `inspect_dir`
    (tools/neuron-explorer/environment-variables.rst). NEURON_LOGICAL_NC_CONFIG is the runtime's
    LNC, which must match the kernel's (logical-neuroncore-config.rst; trn2 defaults to 2)."""
    env = dict(os.environ if base is None else base)
    env.update(NKICPU="0", NEURON_LOGICAL_NC_CONFIG=str(lnc), NKI_DEBUG_INFO="True",
               NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_DEVICE_PROFILE="1",
               NEURON_RT_INSPECT_OUTPUT_DIR=str(inspect_dir))
    env.setdefault("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    return env


def capture_env(lnc, base=None):
    """The environment of `neuron-explorer capture`: the kernel's LNC, runtime inspection off (the
    capture turns profiling on itself)."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith("NEURON_RT_INSPECT_")}
    env["NEURON_LOGICAL_NC_CONFIG"] = str(lnc)
    return env


# --- can this machine run it? ----------------------------------------------------------------

# A fresh interpreter imports `nki` with NKICPU=0: this process may have registered nkicpu as `nki`
# (`import kernels`), and PyPI's placeholder `nki` raises ImportError on import, so only the real
# SDK succeeds.
SDK_PROBE = "import nki, nki.isa, nki.language"
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


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


def importable(module):
    return importlib.util.find_spec(module) is not None


def device_status():
    """None if this machine can run a kernel on a NeuronCore, check it and capture its profile,
    else one sentence naming what is missing."""
    missing = []
    if not neuron_sdk_importable():
        missing.append("the Neuron SDK (`import nki` fails in a fresh Python with NKICPU=0)")
    else:
        nki_version = installed_version("nki")
        if nki_version and version_tuple(nki_version) < STANDALONE_NKI:
            missing.append(f"NKI 0.4.0 or newer (Neuron 2.30+), whose nki.jit runs a kernel called "
                           f"with NumPy arrays standalone; nki {nki_version} is installed")
    if not neuron_devices():
        missing.append("a Neuron device (no /dev/neuron*)")
    if not which_explorer():
        missing.append(f"neuron-explorer (not on PATH or in {EXPLORER_DEFAULT_DIR})")
    if not importable("torch"):
        missing.append(f"torch, which the reference that checks the outputs needs (`{CPU_TORCH}`)")
    if not importable("pyarrow"):
        missing.append("pyarrow, which reads neuron-explorer's Parquet export "
                       "(`pip install pyarrow`)")
    if not missing:
        return None
    listed = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
    return f"This machine cannot run kernels on a NeuronCore: it lacks {listed}."


def _from_repo(path):
    """`path` as the command line names it: relative to the repository root (where the command
    runs) when it is inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


TRN_CELL_DOC = '"The trn cell in each chapter", in book/start/running.md'


def run_in_notebook(stage, config, batch, out="."):
    """A notebook's trn cell. Where `device_status()` is None, run `python -m benchmarks.on_trn`
    for `stage` in a process of its own (NKICPU=0, from the repository root, with this Python),
    show its output, and return the real `Profile` it wrote to `<out>/<stage>_trn_events.json`.
    Elsewhere print the command, why it does not run here and where the book explains it, and
    return None."""
    events = Path(out).resolve() / f"{stage}{EVENTS_SUFFIX}"
    argv = [stage, "--config", config, "--batch", str(batch), "--out", _from_repo(events.parent)]
    parse_args(argv)                        # a wrong stage or config fails here, on any machine
    command = "NKICPU=0 python -m benchmarks.on_trn " + shlex.join(argv)
    status = device_status()
    if status is not None:                  # what the cell does is told once, in the book
        print("On a trn instance this cell runs, from the repository root:\n")
        print(f"    NKICPU=0 python -m benchmarks.on_trn {shlex.quote(stage)} \\\n"
              f"        {shlex.join(argv[1:])}\n")
        print(textwrap.fill(f"Not run here. {status}", 80, break_on_hyphens=False))
        print(f"What it does: {TRN_CELL_DOC}.")
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


# --- the kernel process -----------------------------------------------------------------------

KERNEL_RUN = "kernel_run.json"      # what the kernel process leaves in its work directory
INSPECT_DIR = "inspect"             # NEURON_RT_INSPECT_OUTPUT_DIR, under the work directory


def kernel_command(stage, config, batch, seed, work):
    """The kernel process: `python -m benchmarks.on_trn ... --kernel-only`, which compiles, runs and
    checks one kernel, writes <work>/kernel_run.json and exits, releasing its NeuronCores before
    `neuron-explorer capture` needs them (the runtime gives every core to the process that
    initialised it: aws-neuron-sdk issue 1065, "Virtual Neuron Core(s) not available")."""
    return [sys.executable, "-m", "benchmarks.on_trn", stage, "--config", config,
            "--batch", str(batch), "--seed", str(seed), "--work", str(work), "--kernel-only"]


def run_kernel(args, work):
    """In the kernel process: steps 2-4, recorded in <work>/kernel_run.json (also on failure, with
    the compiler's or runtime's message). Returns the record."""
    shape, variant = args.shape, args.variant
    nki_version = installed_version("nki") if kernels.NKI_BACKEND == "neuron-sdk" else None
    bracket = variant.lnc > 1 and lnc_launch(variant.lnc, nki_version) == "bracket"
    env_lnc = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    launch = (f"kernel[{variant.lnc}]" if bracket else "kernel") + \
        (f" with NEURON_LOGICAL_NC_CONFIG={env_lnc}" if env_lnc else "")
    record = {"stage": args.stage, "kernel": variant.kernel, "lnc": variant.lnc,
              "backend": kernels.NKI_BACKEND, "launch": launch, "ok": False, "error": None,
              "check": None, "host_s": None, "argument_bytes": None}
    try:
        kernel_args = variant.arguments(shape, pipeline_inputs(shape, seed=args.seed))
        kernel = launch_kernel(variant, nki_version)
        print(f"running {variant.kernel} as {launch} on {kernels.NKI_BACKEND}: "
              f"{shape.name}, B = {shape.B}", flush=True)
        started = time.time()
        # NumPy arguments: compile + run standalone (NKI 0.4+), on copies: the pool form writes its
        # pools in place, and the reference must see the inputs
        outputs = kernel(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in kernel_args])
        record["host_s"] = time.time() - started
        check = check_outputs(args.stage, kernel_args, outputs)
    except Exception as e:  # the compiler's or runtime's message is what the reader sends back
        record["error"] = {"type": type(e).__name__, "message": str(e)[-4000:]}
    else:
        record.update(check=check, ok=all(r["ok"] for r in check), argument_bytes={
            "inputs": int(sum(a.nbytes for a in kernel_args if isinstance(a, np.ndarray))),
            "outputs": int(sum(np.asarray(o).nbytes for o in _as_tuple(outputs)))})
    Path(work, KERNEL_RUN).write_text(json.dumps(record, indent=1) + "\n")
    return record


def kernel_process(command, work, env, timeout):
    """Run the kernel process and return its record; a missing record (a crash, a timeout) becomes
    one with the error and the tail of the process's log (<work>/kernel_process.log)."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / KERNEL_RUN).unlink(missing_ok=True)
    shown = shlex.join(str(c) for c in command)
    print(f"$ {shown}", flush=True)
    log, status = run_logged(command, env, timeout)
    (work / "kernel_process.log").write_text(f"$ {shown}\n# {status}\n{log}")
    if (work / KERNEL_RUN).is_file():
        record = json.loads((work / KERNEL_RUN).read_text())
        if record["error"]:         # the compiler logs more than its exception says
            record["error"]["log_tail"] = _tail(log, 40)
        return record
    return {"ok": False, "check": None, "error": {"type": "kernel process", "message":
            f"{status}, no {KERNEL_RUN} written; the log ends:\n{_tail(log, 25)}"}}


def run_logged(command, env, timeout):
    """Run `command` from the repository root; (its stdout and stderr, "exit N" or the timeout)."""
    try:
        r = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=timeout)
        return f"{r.stdout}\n{r.stderr}", f"exit {r.returncode}"
    except subprocess.TimeoutExpired as e:
        return process_output(e), f"no exit within {timeout} s"


def process_output(timeout_expired):
    """stdout and stderr of a process that timed out (bytes there, even with text=True)."""
    parts = []
    for out in (timeout_expired.stdout, timeout_expired.stderr):
        parts.append(out.decode(errors="replace") if isinstance(out, bytes) else out or "")
    return "\n".join(parts)


def describe_error(record):
    return f"{record['error']['type']}: {record['error']['message']}"


# --- capture and export -----------------------------------------------------------------------

def find_neff(inspect_dir, since):
    neff = newest(inspect_dir, "*.neff", since)
    if neff is None:
        raise OnTrnError(f"no NEFF appeared under {inspect_dir} (NEURON_RT_INSPECT_OUTPUT_DIR of "
                         "the kernel process, whose runtime should copy the NEFF it loads there). "
                         f"Find it, e.g. `find / -name '*.neff' -newer {inspect_dir}`, and rerun "
                         "with --neff PATH")
    return neff


def capture_and_export(args, explorer_bin, neff, work):
    """Steps 6-7: the NTFF, the export, and its reduction to events. Returns (events, export info)."""
    session = work / f"{args.stage}.ntff"
    started = time.time()
    run_tool(capture_command(explorer_bin, neff, session, args.profile_nth_exec, not args.no_dge_notifs),
             "neuron-explorer capture", args.timeout, work, env=capture_env(args.variant.lnc))
    expected = captured_ntff(session, args.profile_nth_exec)
    ntff = expected if expected.is_file() else newest(work, "*.ntff", started)
    if ntff is None:
        raise OnTrnError(f"neuron-explorer capture wrote no .ntff under {work} (expected {expected.name})")

    if args.export == "json":
        out = work / f"{args.stage}_profile.json"
        run_tool(view_command(explorer_bin, neff, ntff, "json", out), "neuron-explorer view", args.timeout, work)
        found = out if out.is_file() else newest(work, "device_profile_model_*.json", started)
        if found is None:
            raise OnTrnError(f"neuron-explorer view wrote neither {out.name} nor device_profile_model_*.json "
                             f"under {work}; use the default --export parquet")
        try:
            events = explorer.read_json(found)
        except (KeyError, TypeError, ValueError) as e:
            raise OnTrnError(f"{found} is not the documented JSON layout (a top-level 'instruction' list; "
                             f"{type(e).__name__}: {e}); this SDK may have retired the JSON export: "
                             "use the default --export parquet") from e
        summary = _json_summary(found)
    else:
        out = work / f"{args.stage}_parquet"
        run_tool(view_command(explorer_bin, neff, ntff, "parquet", out), "neuron-explorer view", args.timeout, work)
        tables = newest(out if out.exists() else work, "Instruction*.parquet", started)
        if tables is None:
            raise OnTrnError(f"neuron-explorer view wrote no Instruction*.parquet under {out}")
        found = tables.parent
        try:
            events, summary = explorer.read_parquet(str(found)), explorer.read_summary(str(found))
        except ImportError as e:
            raise OnTrnError(str(e), code=2) from e
    if not events:
        raise OnTrnError(f"the export {found} reduced to no events")
    return events, {"neff": str(neff), "ntff": str(ntff), "export": str(found), "export_format": args.export,
                    "num_exec": args.profile_nth_exec, "profile_nth_exec": args.profile_nth_exec,
                    "dge_notifs": not args.no_dge_notifs,
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


def measured_total_us(summary):
    """Explorer's `total_time` (on-device seconds, tools/neuron-explorer/overview-summary-page.rst)
    in microseconds, or None."""
    value = (summary or {}).get("total_time")
    return None if value is None else float(value) * 1e6


# --- main -------------------------------------------------------------------------------------

def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        if args.kernel_only:
            work = (args.work or Path.cwd()).resolve()
            work.mkdir(parents=True, exist_ok=True)
            return 0 if run_kernel(args, work)["ok"] else 1
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
    status = device_status()
    if status is not None:
        raise OnTrnError(status, code=2)
    explorer_bin = find_explorer(args.explorer)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = (args.work or DEFAULT_WORK_ROOT / f"{args.stage}-{stamp}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"work directory: {work}")

    started = time.time()
    inspect = work / INSPECT_DIR
    env = kernel_env(args.variant.lnc, inspect)
    command = kernel_command(args.stage, args.config, args.batch, args.seed, work)
    run = kernel_process(command, work, env, args.timeout)
    if run["error"]:
        raise OnTrnError(f"the kernel did not compile or run: {describe_error(run)} (its log: "
                         f"{work / 'kernel_process.log'})")
    check = run["check"]
    print(f"compiled and ran in {run['host_s']:.1f} s host time (not a kernel time)")
    print("output check against kernels.reference:\n" + format_check(check))
    if not run["ok"] and not args.keep_going:
        raise OnTrnError("the device outputs do not match the reference (see above); no profile captured "
                         "(--keep-going captures anyway)")

    neff = args.neff.resolve() if args.neff else find_neff(inspect, started)
    if not neff.is_file():
        raise OnTrnError(f"--neff {neff}: no such file")
    print(f"NEFF: {neff}")
    events, capture = capture_and_export(args, explorer_bin, neff, work)

    from .sweep import config_id
    shape = args.shape
    path = write_events(
        Path(args.out) / f"{args.stage}{EVENTS_SUFFIX}", events, label=MEASURED,
        stage=args.stage, kernel=args.variant.kernel, lnc=args.variant.lnc, launch=run["launch"],
        config=config_id(shape),
        shape={f: getattr(shape, f) for f in ("B", "H", "nk", "nv", "dk", "dv", "K")}, seed=args.seed,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        sdk=sdk_versions(explorer_bin), host=platform.node(),
        environment={k: env.get(k) for k in ("NEURON_PLATFORM_TARGET_OVERRIDE",
                                             "NEURON_LOGICAL_NC_CONFIG", "NKI_DEBUG_INFO")},
        command=" ".join(["python -m benchmarks.on_trn", *map(shlex.quote, argv)]),
        check=check, check_ok=run["ok"], argument_bytes=run["argument_bytes"], capture=capture,
        measured_total_us=measured_total_us(capture["explorer_summary"]),
        note="Times are from a real neuron-explorer capture on a trn instance, reduced by nkicpu.explorer; "
             "start_us is relative to the first event. measured_total_us is Explorer's total_time.")
    print(load_events(path).summary())
    print(f"wrote {path}")
    return 0 if run["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
