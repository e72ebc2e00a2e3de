"""benchmarks.first_contact: the report from the CPU model, the plan where there is no device, and
the command lines it would run on one. Nothing here runs on a NeuronCore; the device branch of the
profiled kernel is fed by a stand-in for the runner and a hand-made events file (fixture label)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kernels
from benchmarks import first_contact as fc
from benchmarks import on_trn
from kernels.registry import BY_NAME
from nkicpu import explorer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_LABEL = "hand-made fixture from the documented schema (not a capture)"
SMALL = ["--config", "Qwen3.5-0.8B-TP8", "--batch", "1"]   # nk = nv = 2: LNC=2 splits the heads
SUBSET = "in_proj,7_ready_first,5_two_cores"
BF16 = ml_dtypes.bfloat16


@pytest.mark.skipif(kernels.NKI_BACKEND != "nkicpu", reason="the --cpu report runs the CPU model")
def test_the_cpu_report(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "benchmarks.first_contact", "--cpu", *SMALL, "--kernels", SUBSET,
           "--out", str(tmp_path)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((tmp_path / fc.REPORT).read_text())
    assert (report["format"], report["mode"], report["label"]) == \
        (fc.FORMAT, "cpu-model", fc.CPU_LABEL)
    assert (report["config"], report["batch"], report["device_status"]) == \
        ("Qwen3.5-0.8B TP8", 1, None)
    assert report["summary"] == {"kernels": 3, "passed": 3, "failed": []}
    assert {"nki", "neuronx-cc", "torch"} <= set(report["versions"])
    assert "--cpu" in report["command"]
    rows = json.loads((tmp_path / "modeled" / "sweep.json").read_text())["rows"]
    sweep = {row["variant"]: row for row in rows}
    assert [e["name"] for e in report["kernels"]] == SUBSET.split(",")
    for e in report["kernels"]:
        assert e["ok"] and e["error"] is None and e["backend"] == "nkicpu" and e["measured"] is None
        assert [c["output"] for c in e["check"]] == [n for n, _ in BY_NAME[e["name"]].outputs]
        assert all(c["ok"] for c in e["check"])
        m, row = e["modeled"], sweep[e["name"]]
        assert m["label"] == fc.MODELED == row["label"]
        assert (m["best_us"], m["likely_us"], m["launch_us"]) == \
            (row["best_us"], row["modeled_us"], row["launch_us"])
        assert m["roofline_us"] <= m["best_us"] <= m["likely_us"]
        assert Path(e["log"]).is_file()
    assert [e["launch"] for e in report["kernels"]] == ["kernel", "kernel", "kernel[2]"]
    assert fc.CPU_LABEL in r.stdout and "5_two_cores" in r.stdout
    assert f"wrote {tmp_path / fc.REPORT}" in r.stdout


def _no_process(*args, **kwargs):
    raise AssertionError(f"a process was started: {args}")


def test_without_a_device_it_prints_the_plan_and_runs_nothing(tmp_path, monkeypatch, capsys):
    status = ("This machine cannot run kernels on a NeuronCore: it lacks a Neuron device "
              "(no /dev/neuron*).")
    monkeypatch.setattr(on_trn, "device_status", lambda: status)
    monkeypatch.setattr(subprocess, "run", _no_process)
    assert fc.main([*SMALL, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"benchmarks.first_contact: {status}") and "Nothing was run." in out
    assert not (tmp_path / "out").exists()
    lines = [line.strip() for line in out.splitlines() if "-m benchmarks." in line]
    assert len(lines) == len(fc.KERNELS) + 1                # every kernel, then the sweep
    for name, line in zip(fc.KERNELS, lines):
        assert f"-m benchmarks.on_trn {name} --config Qwen3.5-0.8B-TP8 --batch 1" in line
        if name == fc.PROFILED:                             # the whole runner: capture too
            assert "--kernel-only" not in line and "NKICPU=0" in line
            assert f"--out {tmp_path / 'out'}" in line
        else:
            lnc = BY_NAME[name].lnc
            assert line.endswith("--kernel-only") and f"NEURON_LOGICAL_NC_CONFIG={lnc}" in line
            assert "NKI_DEBUG_INFO=True" in line and "NEURON_RT_INSPECT_ENABLE=1" in line
    assert lines[-1].startswith("NKICPU=1 ") and f"--stages {','.join(fc.KERNELS)}" in lines[-1]


def test_the_command_lines_on_a_device(tmp_path):
    args = fc.parse_args([*SMALL, "--out", str(tmp_path)])
    command, env = fc.kernel_step(args, "5_two_cores")
    assert command == on_trn.kernel_command("5_two_cores", "Qwen3.5-0.8B-TP8", 1, 0, tmp_path / "5_two_cores")
    assert env == on_trn.kernel_env(2, tmp_path / "5_two_cores" / on_trn.INSPECT_DIR)
    command, env = fc.kernel_step(args, fc.PROFILED)
    assert command == [sys.executable, "-m", "benchmarks.on_trn", fc.PROFILED, "--config",
                       "Qwen3.5-0.8B-TP8", "--batch", "1", "--seed", "0", "--out", str(tmp_path),
                       "--work", str(tmp_path / fc.PROFILED), "--timeout", "1800"]
    assert env["NKICPU"] == "0"
    command, env = fc.sweep_step(args)
    assert command == [sys.executable, "-m", "benchmarks.sweep", "--stages", ",".join(fc.KERNELS),
                       "--configs", "Qwen3.5-0.8B-TP8", "--batches", "1", "--tokens", "1",
                       "--out", str(tmp_path / "modeled")]
    assert env["NKICPU"] == "1"
    cpu = fc.parse_args([*SMALL, "--cpu", "--out", str(tmp_path)])
    assert fc.kernel_step(cpu, fc.PROFILED)[0][-1] == "--kernel-only"   # no profile on the CPU


def test_bad_kernels_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        fc.parse_args(["--kernels", "in_proj,0_staged"])
    assert e.value.code == 2 and "expected names among in_proj" in capsys.readouterr().err


def test_a_failing_kernel_is_reported_with_its_message(tmp_path, monkeypatch, capsys):
    error = {"type": "CompilerError", "message": "NCC_EVRF066: LNC mismatch"}
    record = {"ok": False, "error": error, "check": None, "backend": "neuron-sdk",
              "launch": "kernel", "host_s": None}
    monkeypatch.setattr(on_trn, "kernel_process", lambda command, work, env, timeout: record)
    monkeypatch.setattr(fc, "modeled_rows", lambda args: ({}, "RuntimeError: no sweep"))
    assert fc.main(["--cpu", *SMALL, "--kernels", "in_proj", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / fc.REPORT).read_text())
    (entry,) = report["kernels"]
    assert report["summary"]["failed"] == ["in_proj"]
    assert entry["error"] == error and not entry["ok"]
    assert entry["modeled"] == {"label": fc.MODELED, "problem": "RuntimeError: no sweep"}
    out = capsys.readouterr().out
    assert "ERROR" in out and "NCC_EVRF066: LNC mismatch" in out


def test_the_profiled_kernel_on_a_device_reports_the_measured_time(tmp_path, monkeypatch):
    """The runner is replaced by a stand-in that writes what the real one would: its kernel record
    and an events file (here from the hand-made fixture, under a fixture label)."""
    tables = json.loads((FIXTURES / "explorer_tables.json").read_text())
    events = explorer.reduce_rows(tables["Instruction"], tables["DmaPacketAggregated"])
    calls = []

    def runner(command, cwd, env, **kwargs):
        calls.append(command)
        work = Path(command[command.index("--work") + 1])
        record = {"ok": True, "error": None, "check": [], "backend": "neuron-sdk",
                  "launch": "kernel"}
        (work / on_trn.KERNEL_RUN).write_text(json.dumps(record))
        on_trn.write_events(tmp_path / f"{fc.PROFILED}{on_trn.EVENTS_SUFFIX}", events,
                            label=FIXTURE_LABEL, measured_total_us=42.0,
                            capture={"explorer_summary": {"total_time": 4.2e-05}})
        return subprocess.CompletedProcess(command, 0, "wrote it", "")

    monkeypatch.setattr(fc.subprocess, "run", runner)
    args = fc.parse_args([*SMALL, "--out", str(tmp_path)])
    entry = fc.run_kernel(args, fc.PROFILED)
    assert calls == [fc.kernel_step(args, fc.PROFILED)[0]]
    assert entry["ok"] and entry["measured"]["total_us"] == 42.0
    assert entry["measured"]["label"] == FIXTURE_LABEL
    assert (tmp_path / fc.PROFILED / "runner.log").read_text().startswith("# exit 0")


# --- --simulate: nkicpu against nki.simulate ----------------------------------------------------

def test_simulate_without_the_sdk_prints_the_plan_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(on_trn, "neuron_sdk_importable", lambda: False)
    monkeypatch.setattr(subprocess, "run", _no_process)
    assert fc.main(["--simulate", *SMALL, "--kernels", "in_proj,pool_lnc2", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("benchmarks.first_contact --simulate: the Neuron SDK's nki does not import here")
    assert "Nothing was run." in out and not (tmp_path / "out").exists()
    lines = [line.strip() for line in out.splitlines() if "-m benchmarks.cross_check" in line]
    assert len(lines) == 4                                       # two sides of each kernel
    for line, (name, side) in zip(lines, [(k, s) for k in ("in_proj", "pool_lnc2") for s in fc.cross_check.SIDES]):
        assert f"-m benchmarks.cross_check {name} --inputs {tmp_path / 'out' / name / 'inputs'}" in line
        assert line.endswith(f"--side {side}")
        if side == "nki.simulate":
            assert "NEURON_PLATFORM_TARGET_OVERRIDE=trn2" in line and "NKICPU=0" in line


def test_simulate_and_cpu_are_refused_together(capsys):
    with pytest.raises(SystemExit) as e:
        fc.parse_args(["--simulate", "--cpu"])
    assert e.value.code == 2 and "--cpu and --simulate" in capsys.readouterr().err


def _side(work, side, outputs=(), arguments=(), error=None):
    """A side's record and arrays, written by hand as the side process would."""
    cc = fc.cross_check
    out = Path(work) / side.replace("nki.simulate", "simulate")
    out.mkdir(parents=True, exist_ok=True)
    record = {"side": side, "ok": error is None, "error": error,
              "outputs": [cc.save_array(out / f"out_{i}.npy", o) for i, o in enumerate(outputs)],
              "arguments": [cc.save_array(out / f"arg_{i}.npy", a) if isinstance(a, np.ndarray) else None
                            for i, a in enumerate(arguments)]}
    (out / cc.RECORD).write_text(json.dumps(record))


def _fixture(tmp_path):
    """Inputs: an fp32 pool and a Python int; outputs: a bf16 tile and an fp32 state."""
    cc = fc.cross_check
    pool = np.arange(12, dtype=np.float32).reshape(3, 4)
    cc.save_inputs(tmp_path / "inputs", [pool, 7])
    out = np.linspace(-1, 1, 8, dtype=np.float32).astype(BF16).reshape(2, 4)
    state = np.ones((2, 3), np.float32)
    return pool, out, state


RULES = [("out", "output"), ("new_state", "state")]


def test_the_comparator_on_agreeing_sides(tmp_path):
    pool, out, state = _fixture(tmp_path)
    for side in fc.cross_check.SIDES:
        _side(tmp_path, side, [out, state], [pool, 7])
    result = fc.cross_check.compare_sides(tmp_path, RULES, tmp_path / "inputs")
    assert result["agree"] is True and result["refused"] == {"nki.simulate": None, "nkicpu": None}
    assert [(r["output"], r["max_abs_err"], r["ok"]) for r in result["outputs"]] == \
        [("out", 0.0, True), ("new_state", 0.0, True)]
    assert result["arguments_written"] == []                  # neither side wrote the pool
    assert fc.format_agreement({"name": "k", **result}) == "agree: out 0.00e+00, new_state 0.00e+00"


def test_the_comparator_reports_each_outputs_error_and_the_written_arguments(tmp_path):
    pool, out, state = _fixture(tmp_path)
    off = state.copy()
    off[1, 2] += 0.5
    off[0, 0] = np.nan                                        # NaN on one side only
    pool_sim, pool_cpu = pool + 1, pool + 1
    pool_cpu[2, 3] += 0.25
    _side(tmp_path, "nki.simulate", [out, state], [pool_sim, 7])
    _side(tmp_path, "nkicpu", [out, off], [pool_cpu, 7])
    result = fc.cross_check.compare_sides(tmp_path, RULES, tmp_path / "inputs")
    assert result["agree"] is False
    first, second = result["outputs"]
    assert first["ok"] and first["max_abs_err"] == 0.0
    assert not second["ok"] and second["max_abs_err"] == 0.5 and second["nan_on_one_side"] == 1
    (written,) = result["arguments_written"]
    assert written == {"argument": 0, "written_by": ["nki.simulate", "nkicpu"], "max_abs_err": 0.25,
                       "nan_on_one_side": 0, "bit_exact": False}
    assert "new_state 5.00e-01 DIFFERS" in fc.format_agreement({"name": "k", **result})


def test_the_comparator_names_the_side_that_refused(tmp_path):
    pool, out, state = _fixture(tmp_path)
    error = {"type": "SimulatorError", "message": "partition start 32 not allowed"}
    _side(tmp_path, "nki.simulate", error=error)
    _side(tmp_path, "nkicpu", [out, state], [pool, 7])
    result = fc.cross_check.compare_sides(tmp_path, RULES, tmp_path / "inputs")
    assert result["agree"] is None and result["outputs"] == []
    assert result["refused"] == {"nki.simulate": error, "nkicpu": None}
    assert fc.format_agreement({"name": "k", **result}) == \
        "nki.simulate refused (SimulatorError: partition start 32 not allowed)"
    (tmp_path / "nkicpu" / fc.cross_check.RECORD).unlink()     # a side process that wrote nothing
    result = fc.cross_check.compare_sides(tmp_path, RULES, tmp_path / "inputs")
    assert result["refused"]["nkicpu"]["type"] == "side process"


@pytest.mark.skipif(kernels.NKI_BACKEND != "nkicpu", reason="runs the nkicpu side")
def test_the_nkicpu_side_process_and_a_side_without_its_nki(tmp_path):
    """The real side process on nkicpu; compared with a copy of itself it agrees bit for bit. The
    simulator's side, run where `import nki` is nkicpu, records that as its refusal."""
    import shutil
    from kernels.reference import pipeline_inputs
    from benchmarks.sweep import parse_config
    shape = parse_config("Qwen3.5-0.8B-TP8").with_batch(1)
    cc = fc.cross_check
    cc.save_inputs(tmp_path / "inputs", BY_NAME["in_proj"].arguments(shape, pipeline_inputs(shape)))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "NKICPU": "1"}
    command, changes = cc.side_command("in_proj", tmp_path / "inputs", tmp_path, "nkicpu")
    r = subprocess.run(command, cwd=REPO, env={**env, **changes}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert cc.read_side(tmp_path, "nkicpu")["backend"] == "nkicpu"
    shutil.copytree(tmp_path / "nkicpu", tmp_path / "simulate")
    result = cc.compare_sides(tmp_path, BY_NAME["in_proj"].outputs, tmp_path / "inputs")
    assert result["agree"] and [r["output"] for r in result["outputs"]] == ["mixed_qkv", "z", "a", "b"]
    assert all(r["max_abs_err"] == 0.0 for r in result["outputs"])
    record = cc.run_side("in_proj", tmp_path / "inputs", tmp_path / "other", "nki.simulate")
    assert not record["ok"] and record["error"]["message"] == "`import nki` gave nkicpu, not neuron-sdk"
