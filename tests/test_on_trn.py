"""benchmarks.on_trn, the trn-instance runner, on the parts that need no hardware.

Nothing here runs on a NeuronCore or pretends to: the runner's device steps (compile, run,
neuron-explorer capture and view) are untested until the project has a trn instance. Tested:
argument parsing, the refusal without the Neuron SDK, the output check against the reference
(fed by the CPU model), the tool runner's errors, the neuron-explorer command lines, and the
events-file round trip. The round trip uses tests/fixtures/explorer_tables.json, which is
HAND-MADE from the documented Parquet schema (not a capture), so its events are written under a
fixture label, never "measured".
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kernels
from benchmarks import on_trn
from benchmarks.variants import VARIANTS
from kernels.reference import pipeline_inputs
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
        ("json", 2, False, False, None)


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


# What one device run at LNC=1 (the runner's setting) can profile: single launches on one core.
SINGLE_LAUNCH = [v for v in VARIANTS if not v.launches and v.lnc == 1]


def test_every_single_launch_variant_has_a_reference():
    assert set(on_trn.REFERENCES) == {v.name for v in SINGLE_LAUNCH}


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

def test_compare_uses_the_project_tolerances():
    rng = np.random.default_rng(0)
    want = rng.standard_normal((4, 64)).astype(np.float32)
    assert on_trn.compare("o", "output", want + 5e-3, want)["ok"]
    bad = on_trn.compare("o", "output", want + 5e-2, want)
    assert not bad["ok"] and "outside atol = rtol = 0.01" in bad["problem"]
    assert not on_trn.compare("s", "state", want + 8e-3, want)["ok"]
    assert on_trn.compare("s", "state", want + 1e-3, want)["ok"]
    flipped = want.copy()
    flipped[0, 0] = np.nextafter(flipped[0, 0], np.inf)
    assert not on_trn.compare("c", "exact", flipped, want)["ok"]
    assert on_trn.compare("c", "exact", want.copy(), want)["ok"]
    wrong_dtype = on_trn.compare("o", "output", want.astype(ml_dtypes.bfloat16), want)
    assert not wrong_dtype["ok"] and "bfloat16" in wrong_dtype["problem"]
    nan = want.copy()
    nan[1, 1] = np.nan
    assert on_trn.compare("o", "output", nan, want)["problem"] == "non-finite values"
    assert json.loads(json.dumps(bad)) == bad


@pytest.mark.skipif(kernels.NKI_BACKEND != "nkicpu", reason="feeds the check from the CPU model (NKICPU=1)")
@pytest.mark.parametrize("variant", SINGLE_LAUNCH, ids=[v.name for v in SINGLE_LAUNCH])
def test_check_accepts_the_cpu_models_outputs_in_order(variant):
    """The reference map and output order agree with each kernel (run on the CPU model, not a device)."""
    import nki
    shape = GDNShape(B=2, H=128, nk=1, nv=2, dk=32, dv=16, name="tiny")
    args = variant.args(shape, pipeline_inputs(shape))
    rows = on_trn.check_outputs(variant.name, args, nki.simulate(variant.load_kernel())(*args))
    assert [r["output"] for r in rows] == [n for n, _ in on_trn.REFERENCES[variant.name][1]]
    assert all(r["ok"] for r in rows), on_trn.format_check(rows)


def test_check_rejects_a_wrong_number_of_outputs():
    shape = GDNShape(B=1, H=128, nk=1, nv=1, dk=16, dv=16, name="tiny")
    x = pipeline_inputs(shape)
    with pytest.raises(on_trn.OnTrnError, match="returned 1 outputs, expected 2"):
        on_trn.check_outputs("conv1d_decode", (x["mixed_qkv"], x["conv_weight"], x["conv_state"]), x["conv_out"])


# --- tools ------------------------------------------------------------------------------------

def test_neuron_explorer_command_lines():
    assert on_trn.capture_command("ne", "k.neff", "w/s.ntff") == \
        ["ne", "capture", "-n", "k.neff", "-s", "w/s.ntff", "--profile-nth-exec=2", "--enable-dge-notifs"]
    assert on_trn.capture_command("ne", "k.neff", "s.ntff", nth_exec=3, dge_notifs=False)[-1] == "--profile-nth-exec=3"
    assert on_trn.view_command("ne", "k.neff", "s_exec_2.ntff", "json", "p.json") == \
        ["ne", "view", "-n", "k.neff", "-s", "s_exec_2.ntff", "--output-format", "json", "--output-file", "p.json"]


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
import shutil, sys
argv = sys.argv[1:]
def value(flag):
    return argv[argv.index(flag) + 1]
if argv[0] == "capture":
    nth = next(a.split("=")[1] for a in argv if a.startswith("--profile-nth-exec="))
    open(value("-s")[:-len(".ntff")] + "_exec_" + nth + ".ntff", "w").close()
elif argv[0] == "view" and value("--output-format") == "json":
    shutil.copy({fixture!r}, value("--output-file"))
else:
    sys.exit("stand-in: unsupported " + " ".join(argv))
'''


def test_capture_and_export_plumbing_with_a_stand_in_tool(tmp_path):
    tool = tmp_path / "fake-neuron-explorer"
    tool.write_text(STAND_IN.format(python=sys.executable, fixture=str(FIXTURES / "explorer_profile.json")))
    tool.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    neff = work / "kernel.neff"
    neff.write_bytes(b"")
    args = on_trn.parse_args(["rmsnorm_gated", "--config", "Qwen3-Next-80B-TP4", "--batch", "1"])
    events, info = on_trn.capture_and_export(args, str(tool), neff, work)
    assert events == explorer.read_json(FIXTURES / "explorer_profile.json")
    assert Path(info["ntff"]).name == "rmsnorm_gated_exec_2.ntff"
    assert Path(info["export"]).name == "rmsnorm_gated_profile.json"
    assert info["explorer_summary"]["event_count"] == 8                # the fixture's own summary row
    assert (work / "neuron-explorer_capture.log").is_file() and (work / "neuron-explorer_view.log").is_file()
    args.export = "parquet"                                             # the stand-in refuses: a clear error
    with pytest.raises(on_trn.OnTrnError, match="neuron-explorer view failed"):
        on_trn.capture_and_export(args, str(tool), neff, work)
