"""benchmarks.on_trn, the trn-instance runner, on the parts that need no hardware.

Nothing here runs on a NeuronCore or pretends to: the runner's device steps (compile, run,
neuron-explorer capture and view) are untested until the project has a trn instance. Tested:
argument parsing, the refusal without the Neuron SDK, the output check against the reference
(fed by the CPU model), the kernel process (run on the CPU model) and its environment, the LNC=2
launch by SDK version, the tool runner's errors, the neuron-explorer command lines, the Parquet
and JSON export plumbing against a stand-in tool, the events-file round trip, `device_status`
(with the probes replaced), and both branches of the notebooks' `run_in_notebook` (the device
process replaced by a stand-in). The exports come from tests/fixtures/explorer_tables.json and
explorer_profile.json, HAND-MADE from the documented schemas (not captures), so their events are
written under a fixture label, never "measured".
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernels
from benchmarks import on_trn
from kernels.reference import pipeline_inputs
from kernels.registry import BY_NAME, STAGES
from kernels.configs import GDNShape
from nkicpu import explorer
from nkicpu.profile import Profile
from nkicpu.timeline import plot_timeline, trace_events

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_LABEL = "hand-made fixture from the documented schema (not a capture)"


# --- arguments --------------------------------------------------------------------------------

def test_parse_the_notebook_one_liner():
    args = on_trn.parse_args(["in_proj", "--config", "Qwen3-Next-80B-TP4", "--batch", "8", "--out", "stages/"])
    assert args.stage == "in_proj" and args.variant.kernel == "kernels.in_proj:in_proj_kernel"
    assert (args.shape.name, args.shape.B, args.shape.H, args.shape.nk, args.shape.nv) == \
        ("Qwen3-Next-80B TP4", 8, 2048, 4, 8)
    assert args.out == Path("stages/")
    assert (args.export, args.profile_nth_exec, args.no_dge_notifs, args.keep_going, args.neff) == \
        ("parquet", 2, False, False, None)
    assert not args.kernel_only


def test_defaults_and_options():
    args = on_trn.parse_args(["gated_delta_rule", "--config", "qwen3.5-27b-tp8", "--batch", "1",
                              "--export", "parquet", "--neff", "/tmp/x.neff", "--no-dge-notifs", "--timeout", "60"])
    assert args.shape.name == "Qwen3.5-27B TP8" and args.shape.B == 1
    assert args.out == REPO / "stages"                       # the repository's stages/, from anywhere
    assert args.export == "parquet" and args.neff == Path("/tmp/x.neff") and args.no_dge_notifs
    assert args.timeout == 60


@pytest.mark.parametrize("argv, message", [
    (["no_such_stage", "--config", "Qwen3-Next-80B-TP4", "--batch", "1"], "invalid choice"),
    (["in_proj", "--config", "Qwen3-Next-80B", "--batch", "1"], "--config: expected '<model>-TP<tp>'"),
    (["in_proj", "--config", "Qwen3-Next-80B-TP3", "--batch", "1"], "tp: expected a divisor"),
    (["in_proj", "--config", "Qwen3-Next-80B-TP4", "--batch", "0"], "expected a positive integer"),
    (["in_proj", "--batch", "1"], "--config"),
])
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        on_trn.parse_args(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_runs_every_single_launch_kernel_and_no_host_pipeline(capsys):
    """The stage choices are the registry's single launches (the fused kernel's LNC=2 launch
    among them); a host pipeline is several launches, not one device run."""
    assert set(STAGES) | {"gdn_tkg", "4_z_last", "5_two_cores"} <= set(on_trn.RUNNABLE)
    for stage in ("0_staged", "1_staged_tkg"):
        with pytest.raises(SystemExit):
            on_trn.parse_args([stage, "--config", "Qwen3-Next-80B-TP4", "--batch", "1"])
        assert "invalid choice" in capsys.readouterr().err


# --- the refusal ------------------------------------------------------------------------------

def test_refuses_clearly_without_the_neuron_sdk(tmp_path):
    env = {**os.environ, "NKICPU": "1", "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "benchmarks.on_trn", "in_proj", "--config", "Qwen3-Next-80B-TP4",
                        "--batch", "8", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "needs the Neuron SDK" in r.stderr and "nkicpu" in r.stderr and "NKICPU=1 is set" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()   # nothing written


# --- checking outputs -------------------------------------------------------------------------

@pytest.mark.skipif(kernels.NKI_BACKEND != "nkicpu", reason="feeds the check from the CPU model (NKICPU=1)")
@pytest.mark.parametrize("stage", on_trn.RUNNABLE)
def test_check_accepts_the_cpu_models_outputs_in_order(stage):
    """Each output is checked under its registry rule, in the kernel's order (the kernel run on the
    CPU model, not a device); the rows are JSON-ready for the events file."""
    import nki
    entry = BY_NAME[stage]
    shape = GDNShape(B=2, H=128, nk=1, nv=2, dk=32, dv=16, name="tiny")
    args = entry.arguments(shape, pipeline_inputs(shape))
    outputs = nki.simulate(entry.load_kernel())(*[np.copy(a) if isinstance(a, np.ndarray) else a
                                                  for a in args])    # the pool form writes its pools
    rows = on_trn.check_outputs(stage, args, outputs)
    assert [(r["output"], r["rule"]) for r in rows] == list(entry.outputs)
    assert all(r["ok"] for r in rows), on_trn.format_check(rows)
    assert json.loads(json.dumps(rows)) == rows


def test_check_names_a_failing_output():
    entry = BY_NAME["conv1d_decode"]
    shape = GDNShape(B=1, H=128, nk=1, nv=1, dk=16, dv=16, name="tiny")
    x = pipeline_inputs(shape)
    args = entry.arguments(shape, x)
    shifted = np.roll(x["conv_state"], -1, axis=2)       # the window slid, newest column stale
    rows = on_trn.check_outputs("conv1d_decode", args, (x["conv_out"], shifted))
    assert rows[0]["ok"] and not rows[1]["ok"] and "not bit-exact" in rows[1]["problem"]
    assert "FAILED: not bit-exact" in on_trn.format_check(rows)


def test_check_rejects_a_wrong_number_of_outputs():
    shape = GDNShape(B=1, H=128, nk=1, nv=1, dk=16, dv=16, name="tiny")
    x = pipeline_inputs(shape)
    with pytest.raises(on_trn.OnTrnError, match="returned 1 outputs, expected 2"):
        on_trn.check_outputs("conv1d_decode", (x["mixed_qkv"], x["conv_weight"], x["conv_state"]), x["conv_out"])


# --- tools ------------------------------------------------------------------------------------

def test_neuron_explorer_command_lines():
    assert on_trn.capture_command("ne", "k.neff", "w/s.ntff") == \
        ["ne", "capture", "-n", "k.neff", "-s", "w/s.ntff", "--num-exec=2", "--profile-nth-exec=2",
         "--enable-dge-notifs"]
    assert on_trn.capture_command("ne", "k.neff", "s.ntff", nth_exec=3, dge_notifs=False)[-2:] == \
        ["--num-exec=3", "--profile-nth-exec=3"]
    assert on_trn.captured_ntff("w/s.ntff", 2) == Path("w/s_exec_2.ntff")
    assert on_trn.captured_ntff("w/s.ntff", 1) == Path("w/s.ntff")
    assert on_trn.view_command("ne", "k.neff", "s_exec_2.ntff", "parquet", "out") == \
        ["ne", "view", "-n", "k.neff", "-s", "s_exec_2.ntff", "--output-format", "parquet", "--output-file", "out"]


def test_the_kernel_process_command_and_environment(tmp_path):
    assert on_trn.kernel_command("5_two_cores", "Qwen3.5-27B-TP8", 1, 0, tmp_path) == \
        [sys.executable, "-m", "benchmarks.on_trn", "5_two_cores", "--config", "Qwen3.5-27B-TP8", "--batch", "1",
         "--seed", "0", "--work", str(tmp_path), "--kernel-only"]
    base = {"PATH": "/bin", "NKICPU": "1", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn3"}
    env = on_trn.kernel_env(2, tmp_path / "inspect", base)
    assert {k: env[k] for k in env if k != "PATH"} == {
        "NKICPU": "0", "NEURON_LOGICAL_NC_CONFIG": "2", "NKI_DEBUG_INFO": "True",
        "NEURON_RT_INSPECT_ENABLE": "1", "NEURON_RT_INSPECT_DEVICE_PROFILE": "1",
        "NEURON_RT_INSPECT_OUTPUT_DIR": str(tmp_path / "inspect"),
        "NEURON_PLATFORM_TARGET_OVERRIDE": "trn3"}                       # a set target is kept
    assert on_trn.kernel_env(1, "i", {})["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn2"
    assert "NEURON_FRAMEWORK_DEBUG" not in env                           # for framework traces only
    assert on_trn.capture_env(2, env) == {"PATH": "/bin", "NKICPU": "0", "NEURON_LOGICAL_NC_CONFIG": "2",
                                          "NKI_DEBUG_INFO": "True", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn3"}


@pytest.mark.parametrize("lnc, nki_version, launch", [
    (2, "0.6.0", "bracket"),         # Neuron 2.32: kernel[2]
    (2, "0.7.0", "env"),             # Neuron 2.33: the plain kernel, NEURON_LOGICAL_NC_CONFIG=2
    (2, "0.10.1", "env"),
    (2, None, "bracket"),            # the CPU model
    (1, "0.7.0", "bracket"),         # LNC=1: the plain kernel either way
])
def test_the_lnc_launch_follows_the_sdk_version(lnc, nki_version, launch):
    assert on_trn.lnc_launch(lnc, nki_version) == launch


def test_the_lnc2_step_launches_the_fused_kernel_either_way():
    lnc2, fused = BY_NAME["6_queues_lnc2"], BY_NAME["6_queues"].load_kernel()
    assert on_trn.launch_kernel(lnc2, "0.7.0") is fused
    assert on_trn.launch_kernel(lnc2, "0.6.0") is not fused              # kernel[2]


def test_version_tuple():
    assert on_trn.version_tuple("0.6.0") == (0, 6, 0) < on_trn.ENV_LNC_NKI <= on_trn.version_tuple("0.7.0")
    assert on_trn.version_tuple("2.32.1.5+abc") == (2, 32, 1, 5)
    assert on_trn.version_tuple("0.3.0") < on_trn.STANDALONE_NKI <= on_trn.version_tuple("0.4.0")


@pytest.mark.skipif(kernels.NKI_BACKEND != "nkicpu", reason="runs the kernel process on the CPU model")
def test_the_kernel_process_on_the_cpu_model_records_the_check(tmp_path):
    env = {**os.environ, "NKICPU": "1", "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    cmd = on_trn.kernel_command("5_two_cores", "Qwen3.5-0.8B-TP8", 1, 0, tmp_path)
    run = on_trn.kernel_process(cmd, tmp_path, env, timeout=300)
    assert run["ok"] and run["error"] is None and run["backend"] == "nkicpu" and run["launch"] == "kernel[2]"
    assert [r["output"] for r in run["check"]] == [n for n, _ in BY_NAME["5_two_cores"].outputs]
    assert json.loads((tmp_path / on_trn.KERNEL_RUN).read_text()) == run
    assert "kernel[2]" in (tmp_path / "kernel_process.log").read_text()


def test_a_kernel_process_that_dies_becomes_an_error_record(tmp_path):
    cmd = [sys.executable, "-c", "import sys; print('compiler says no'); sys.exit(70)"]
    run = on_trn.kernel_process(cmd, tmp_path, dict(os.environ), timeout=60)
    assert not run["ok"] and run["check"] is None
    assert "exit 70" in run["error"]["message"] and "compiler says no" in run["error"]["message"]
    assert "compiler says no" in on_trn.describe_error(run)


def test_a_failed_kernel_record_carries_the_end_of_the_log(tmp_path):
    """The kernel process recorded an exception; the compiler's own log lines come with it."""
    record = {"ok": False, "check": None, "error": {"type": "CompilerError", "message": "failed"}}
    code = (f"import json, sys; print('ERROR NCC_EXXX: unsupported expression', file=sys.stderr); "
            f"open({str(tmp_path / on_trn.KERNEL_RUN)!r}, 'w').write(json.dumps({record!r})); sys.exit(1)")
    run = on_trn.kernel_process([sys.executable, "-c", code], tmp_path, dict(os.environ), timeout=60)
    assert run["error"]["message"] == "failed"
    assert "NCC_EXXX: unsupported expression" in run["error"]["log_tail"]


def test_run_tool_reports_failures_and_timeouts(tmp_path):
    ok = on_trn.run_tool([sys.executable, "-c", "print('hi')"], "fake ok", 30, tmp_path)
    assert ok.stdout.strip() == "hi" and "hi" in (tmp_path / "fake_ok.log").read_text()
    with pytest.raises(on_trn.OnTrnError, match=r"fake step failed \(exit 3\).*boom"):
        on_trn.run_tool([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"],
                        "fake step", 30)
    with pytest.raises(on_trn.OnTrnError, match="did not finish within 1 s"):
        on_trn.run_tool([sys.executable, "-c", "import time; time.sleep(10)"], "fake slow", 1)
    with pytest.raises(on_trn.OnTrnError, match="cannot run"):
        on_trn.run_tool([str(tmp_path / "no-such-tool")], "fake missing", 5)


def test_missing_neuron_explorer_is_a_refusal():
    with pytest.raises(on_trn.OnTrnError, match="aws-neuronx-tools") as e:
        on_trn.find_explorer("neuron-explorer-that-does-not-exist")
    assert e.value.code == 2


def test_newest_file_since(tmp_path):
    old, new = tmp_path / "a" / "old.neff", tmp_path / "b" / "new.neff"
    for p, t in ((old, 1_000_000), (new, 2_000_000)):
        p.parent.mkdir()
        p.write_bytes(b"")
        os.utime(p, (t, t))
    assert on_trn.newest(tmp_path, "*.neff") == new
    assert on_trn.newest(tmp_path, "*.neff", since=2_500_000) is None
    with pytest.raises(on_trn.OnTrnError, match="--neff PATH"):
        on_trn.find_neff(tmp_path, since=2_500_000)


# --- the events file --------------------------------------------------------------------------

def _fixture_events():
    with open(FIXTURES / "explorer_tables.json") as f:
        tables = json.load(f)
    return explorer.reduce_rows(tables["Instruction"], tables["DmaPacketAggregated"])


def test_events_file_round_trip(tmp_path):
    events = _fixture_events()
    path = on_trn.write_events(tmp_path / "stages" / "in_proj_trn_events.json", events, label=FIXTURE_LABEL,
                               stage="in_proj", sdk={"nki": None}, date="2026-01-01T00:00:00+00:00")
    data = on_trn.read_events_file(path)
    assert data["label"] == FIXTURE_LABEL and data["stage"] == "in_proj" and data["format"] == on_trn.FORMAT
    assert data["events"] == json.loads(json.dumps(events))
    loaded = on_trn.load_events(path)
    direct = Profile.from_events(events, FIXTURE_LABEL)
    assert (loaded.label, loaded.total_us, loaded.busy, loaded.instructions) == \
        (direct.label, direct.total_us, direct.busy, direct.instructions)
    assert loaded.roofline_us is None                                   # the export says nothing of HBM bytes
    # The notebook's own route: Profile.from_events on the parsed JSON, then the same plot and trace.
    again = Profile.from_events(json.loads(path.read_text())["events"], data["label"])
    assert again.total_us == direct.total_us
    assert FIXTURE_LABEL in plot_timeline(again).axes[0].get_title()
    assert trace_events(loaded)["otherData"]["label"] == FIXTURE_LABEL


def test_the_default_label_is_measured_and_bad_files_are_rejected(tmp_path):
    assert on_trn.MEASURED == "measured on trn2 (neuron-explorer)"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"events": []}))
    with pytest.raises(ValueError, match="not an events file"):
        on_trn.read_events_file(bad)
    bad.write_text(json.dumps({"format": on_trn.FORMAT, "label": "x", "events": [{"lane": "TensorE"}]}))
    with pytest.raises(ValueError, match="event 0 lacks"):
        on_trn.read_events_file(bad)


# --- the capture/export plumbing, against a stand-in for neuron-explorer ----------------------

STAND_IN = '''#!{python}
"""A stand-in for neuron-explorer (NOT the real tool): writes the files the documentation says the
real one writes, with the hand-made fixture as the export."""
import json, os, shutil, sys
argv = sys.argv[1:]
def value(flag):
    return argv[argv.index(flag) + 1]
if argv[0] == "capture":
    nth = next(a.split("=")[1] for a in argv if a.startswith("--profile-nth-exec="))
    open(value("-s")[:-len(".ntff")] + "_exec_" + nth + ".ntff", "w").close()
elif argv[0] == "view" and value("--output-format") == "json":
    shutil.copy({fixture!r}, value("--output-file"))
elif argv[0] == "view" and value("--output-format") == "parquet" and {parquet!r}:
    # JSON rows in files named like Parquet tables: the test reads them through a fake pyarrow
    out = value("--output-file")
    os.makedirs(out)
    tables = json.load(open({tables!r}))
    for name, rows in tables.items():
        json.dump(rows[:1], open(os.path.join(out, name + "_0.parquet"), "w"))
        json.dump(rows[1:], open(os.path.join(out, name + "_1.parquet"), "w"))
    json.dump([{{"total_time": 4.2e-05, "event_count": 8}}], open(os.path.join(out, "Summary.parquet"), "w"))
else:
    sys.exit("stand-in: unsupported " + " ".join(argv))
'''


def _stand_in(tmp_path, parquet):
    tool = tmp_path / "fake-neuron-explorer"
    tool.write_text(STAND_IN.format(python=sys.executable, fixture=str(FIXTURES / "explorer_profile.json"),
                                    tables=str(FIXTURES / "explorer_tables.json"), parquet=parquet))
    tool.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    neff = work / "kernel.neff"
    neff.write_bytes(b"")
    return str(tool), neff, work


class FakeTable:
    def __init__(self, path):
        self.path = path

    def to_pylist(self):
        return json.loads(Path(self.path).read_text())


def test_parquet_capture_and_export_with_a_stand_in_tool_and_a_fake_pyarrow(tmp_path, monkeypatch):
    """The default export: the tables (split in numbered parts) reduce to the fixture's events and
    Explorer's total_time comes from the Summary table."""
    fake = type(sys)("pyarrow.parquet")
    fake.read_table = FakeTable
    monkeypatch.setitem(sys.modules, "pyarrow", type(sys)("pyarrow"))
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", fake)
    tool, neff, work = _stand_in(tmp_path, parquet=True)
    args = on_trn.parse_args(["5_two_cores", "--config", "Qwen3-Next-80B-TP4", "--batch", "1"])
    events, info = on_trn.capture_and_export(args, tool, neff, work)
    assert events == _fixture_events()
    assert Path(info["ntff"]).name == "5_two_cores_exec_2.ntff" and info["export_format"] == "parquet"
    assert Path(info["export"]) == work / "5_two_cores_parquet"
    assert on_trn.measured_total_us(info["explorer_summary"]) == pytest.approx(42.0)
    assert on_trn.measured_total_us(None) is None
    capture_log = (work / "neuron-explorer_capture.log").read_text()
    assert "--num-exec=2 --profile-nth-exec=2" in capture_log


def test_capture_and_export_plumbing_with_a_stand_in_tool(tmp_path):
    tool, neff, work = _stand_in(tmp_path, parquet=False)
    args = on_trn.parse_args(["rmsnorm_gated", "--config", "Qwen3-Next-80B-TP4", "--batch", "1",
                              "--export", "json"])
    events, info = on_trn.capture_and_export(args, tool, neff, work)
    assert events == explorer.read_json(FIXTURES / "explorer_profile.json")
    assert Path(info["ntff"]).name == "rmsnorm_gated_exec_2.ntff"
    assert Path(info["export"]).name == "rmsnorm_gated_profile.json"
    assert info["explorer_summary"]["event_count"] == 8                # the fixture's own summary row
    assert (work / "neuron-explorer_capture.log").is_file() and (work / "neuron-explorer_view.log").is_file()
    args.export = "parquet"                                             # the stand-in refuses: a clear error
    with pytest.raises(on_trn.OnTrnError, match="neuron-explorer view failed"):
        on_trn.capture_and_export(args, tool, neff, work)


# --- can this machine run it, and the notebooks' trn cell -------------------------------------

def _fake_package(root, init):
    pkg = root / "nki"
    for sub in ("", "isa", "language"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text(init if not sub else "")


@pytest.mark.skipif(kernels.NKI_BACKEND != "nkicpu" or os.environ.get("NKICPU") == "1",
                    reason="needs a machine where `import nki` found no SDK")
def test_the_sdk_probe_is_not_fooled_by_nkicpu_registered_as_nki():
    import nki
    assert nki.__name__ == "nkicpu"                # `import kernels` registered nkicpu as `nki` here ...
    assert not on_trn.neuron_sdk_importable()      # ... and a fresh Python still finds no SDK


def test_the_sdk_probe_tells_the_placeholder_from_an_sdk(tmp_path, monkeypatch):
    placeholder, real = tmp_path / "placeholder", tmp_path / "real"
    # PyPI's nki 0.0.1 is a placeholder: importing it raises ImportError (pypi.org/project/nki)
    _fake_package(placeholder, 'raise ImportError("WRONG PACKAGE. Please install the package from '
                               'Neuron Repository")\n')
    _fake_package(real, "")
    monkeypatch.setenv("PYTHONPATH", str(placeholder))
    assert not on_trn.neuron_sdk_importable()
    monkeypatch.setenv("PYTHONPATH", str(real))
    assert on_trn.neuron_sdk_importable()


SDK, DEVICE, EXPLORER = "the Neuron SDK (", "a Neuron device (", "neuron-explorer (not on PATH"


@pytest.mark.parametrize("sdk, devices, explorer_bin, named", [
    (False, [Path("/dev/neuron0")], "/x/neuron-explorer", [SDK]),
    (True, [], "/x/neuron-explorer", [DEVICE]),
    (True, [Path("/dev/neuron0")], None, [EXPLORER]),
    (False, [], None, [SDK, DEVICE, EXPLORER]),
])
def test_device_status_names_what_is_missing(sdk, devices, explorer_bin, named, monkeypatch):
    monkeypatch.setattr(on_trn, "importable", lambda module: True)
    monkeypatch.setattr(on_trn, "installed_version", lambda dist: "0.6.0")
    monkeypatch.setattr(on_trn, "neuron_sdk_importable", lambda: sdk)
    monkeypatch.setattr(on_trn, "neuron_devices", lambda: devices)
    monkeypatch.setattr(on_trn, "which_explorer", lambda: explorer_bin)
    status = on_trn.device_status()
    assert status.startswith("This machine cannot run kernels on a NeuronCore: it lacks ") and status.endswith(".")
    assert [n for n in (SDK, DEVICE, EXPLORER) if n in status] == named


def _everything_there(monkeypatch):
    monkeypatch.setattr(on_trn, "neuron_sdk_importable", lambda: True)
    monkeypatch.setattr(on_trn, "installed_version", lambda dist: "0.6.0")
    monkeypatch.setattr(on_trn, "neuron_devices", lambda: [Path("/dev/neuron0")])
    monkeypatch.setattr(on_trn, "which_explorer", lambda: "/opt/aws/neuron/bin/neuron-explorer")
    monkeypatch.setattr(on_trn, "importable", lambda module: True)


def test_device_status_is_none_with_everything(monkeypatch):
    _everything_there(monkeypatch)
    assert on_trn.device_status() is None


def test_device_status_names_an_sdk_too_old_for_standalone_calls(monkeypatch):
    _everything_there(monkeypatch)
    monkeypatch.setattr(on_trn, "installed_version", lambda dist: "0.3.0")       # Neuron 2.29
    assert "NKI 0.4.0 or newer (Neuron 2.30+)" in on_trn.device_status()
    assert "nki 0.3.0 is installed" in on_trn.device_status()


@pytest.mark.parametrize("module, named", [("torch", "torch, which the reference"),
                                           ("pyarrow", "pyarrow, which reads")])
def test_device_status_answers_without_torch_or_pyarrow(module, named, monkeypatch):
    _everything_there(monkeypatch)
    monkeypatch.setattr(on_trn, "importable", lambda m: m != module)
    status = on_trn.device_status()
    assert status.startswith("This machine cannot run kernels") and named in status
    if module == "torch":
        assert on_trn.CPU_TORCH in status


def test_importing_the_runner_does_not_import_torch():
    code = ("import sys; import benchmarks.on_trn as o; assert callable(o.device_status); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NKICPU": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def _no_process(*args, **kwargs):
    raise AssertionError(f"a process was started: {args}")


def test_run_in_notebook_on_cpu_says_what_it_would_do_and_starts_nothing(monkeypatch, capsys):
    status = "This machine cannot run kernels on a NeuronCore: it lacks a Neuron device (no /dev/neuron*)."
    monkeypatch.setattr(on_trn, "device_status", lambda: status)
    monkeypatch.setattr(on_trn.subprocess, "Popen", _no_process)
    monkeypatch.setattr(on_trn.subprocess, "run", _no_process)
    monkeypatch.chdir(REPO / "stages")                                    # where a stage notebook runs
    assert on_trn.run_in_notebook("conv1d_decode", "Qwen3-Next-80B-TP4", 8) is None
    printed = capsys.readouterr().out
    assert max(len(line) for line in printed.splitlines()) <= 88          # fits the book's column
    out = " ".join(printed.replace("\\\n", " ").split())                 # unwrapped
    assert ("NKICPU=0 python -m benchmarks.on_trn conv1d_decode --config Qwen3-Next-80B-TP4 --batch 8 "
            "--out stages") in out
    assert f"Not run here. {status}" in out
    assert on_trn.TRN_CELL_DOC in out                                     # the book says what it does
    heading = on_trn.TRN_CELL_DOC.split('"')[1]
    assert f"## {heading}" in (REPO / "book" / "start" / "running.md").read_text()
    assert not (REPO / "stages" / "conv1d_decode_trn_events.json").exists()


def test_run_in_notebook_rejects_a_bad_stage_on_any_machine(monkeypatch, capsys):
    monkeypatch.setattr(on_trn, "device_status", lambda: "no device.")
    with pytest.raises(SystemExit):
        on_trn.run_in_notebook("0_staged", "Qwen3-Next-80B-TP4", 1)        # five launches from the host
    assert "invalid choice: '0_staged'" in capsys.readouterr().err


class FakeRunner:
    """Stands in for the device process: records how it was started and writes an events file."""

    def __init__(self, returncode=0):
        self.returncode, self.calls = returncode, []

    def __call__(self, cmd, cwd, env, **kwargs):
        self.calls.append((cmd, cwd, env))
        out = Path(cwd) / cmd[cmd.index("--out") + 1]
        if self.returncode == 0:
            on_trn.write_events(out / f"{cmd[3]}{on_trn.EVENTS_SUFFIX}", _fixture_events(), label=FIXTURE_LABEL)
        self.stdout = iter(["compiled and ran\n", "wrote it\n"])
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_run_in_notebook_on_a_device_runs_the_command_and_returns_the_profile(tmp_path, monkeypatch, capsys):
    runner = FakeRunner()
    monkeypatch.setattr(on_trn, "device_status", lambda: None)
    monkeypatch.setattr(on_trn.subprocess, "Popen", runner)
    monkeypatch.setenv("NKICPU", "1")                                     # as the notebooks set it
    real = on_trn.run_in_notebook("4_z_last", "Qwen3-Next-80B-TP4", 1, out=tmp_path)
    (cmd, cwd, env), = runner.calls
    assert cmd == [sys.executable, "-m", "benchmarks.on_trn", "4_z_last", "--config", "Qwen3-Next-80B-TP4",
                   "--batch", "1", "--out", str(tmp_path.resolve())]
    assert cwd == REPO and env["NKICPU"] == "0"
    direct = Profile.from_events(_fixture_events(), FIXTURE_LABEL)
    assert (real.label, real.total_us, real.busy) == (direct.label, direct.total_us, direct.busy)
    printed = capsys.readouterr().out
    assert printed.startswith("$ NKICPU=0 python -m benchmarks.on_trn 4_z_last") and "wrote it" in printed


def test_run_in_notebook_raises_when_the_device_process_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(on_trn, "device_status", lambda: None)
    monkeypatch.setattr(on_trn.subprocess, "Popen", FakeRunner(returncode=1))
    with pytest.raises(on_trn.OnTrnError, match="failed with exit status 1") as e:
        on_trn.run_in_notebook("gdn_tkg", "Qwen3.5-27B-TP8", 1, out=tmp_path)
    assert e.value.code == 1 and not list(tmp_path.iterdir())
