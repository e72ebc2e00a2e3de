"""The benchmark sweep's machinery, through the CLI's own entry point, on a tiny subset.

One small real shard (Qwen3.5-397B-A17B TP16) at B = 1, every registered variant at T = 1 and
the ones that take tokens at T = 2: the JSON has one well-formed row per (variant, T), every row
is labelled modeled and its band is in order (HBM roofline <= best <= likely), the launch
overhead is apart, and both plots are written.
"""
import dataclasses
import json
import math

import pytest

import kernels
from benchmarks import roofline, sweep
from kernels.configs import (SWEEP_BATCHES, SWEEP_SHARDS, SWEEP_TOKEN_BATCHES, SWEEP_TOKENS,
                             TEST_SHARDS, GDNShape)
from kernels.gdn_block_checks import MAX_TOKENS
from kernels.registry import (BLOCK_ARGS, BY_NAME, ENTRIES, LAYER_ARGS, POOL_ARGS, POOL_OUTPUTS, STEPS,
                              VERIFY_OUTPUTS)
from nkicpu import costs
from nkicpu.profile import MODELED

pytestmark = pytest.mark.skipif(kernels.NKI_BACKEND != "nkicpu",
                                reason="the sweep's cost model runs on nkicpu (set NKICPU=1)")

ROW_KEYS = {
    "variant", "kind", "kernel", "launches", "lnc", "config", "model", "tp", "B", "H", "nk", "nv", "dk", "dv", "K",
    "T", "G", "conv_dim", "value_dim", "label", "status", "modeled_us", "modeled_us_per_token", "modeled_over_T1",
    "best_us", "launch_us", "roofline_us",
    "modeled_over_roofline", "hbm_read_bytes", "hbm_write_bytes", "busy_fraction", "busiest_lane",
    "instructions", "peak_sbuf_bytes", "peak_psum_banks", "cpu_model_wall_s", "cpu_model_run_s",
    "cpu_model_schedule_s", "error", "block_min_bytes", "block_roofline_us", "block_floor_us",
    "best_over_block_roofline", "modeled_over_block_roofline", "modeled_over_block_floor", "hbm_over_block_min",
}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    code = sweep.main(["--quick", "--batches", "1", "--tokens", "1,2", "--out", str(out)])
    return code, out, json.loads((out / sweep.JSON_NAME).read_text())


def test_exit_code_and_outputs(quick_run):
    code, out, _ = quick_run
    assert code == 0
    for name in (sweep.PLOT_NAME, sweep.TOKENS_PLOT_NAME):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_metadata(quick_run):
    meta = quick_run[2]["metadata"]
    assert meta["label"] == MODELED and "modeled" in meta["label"]
    assert meta["complete"] is True and meta["rows_failed"] == 0
    assert meta["nki_backend"] == "nkicpu"
    for key in ("created", "git_commit", "command", "cost_model", "fields", "total_wall_s"):
        assert key in meta
    assert "costs.py" in meta["cost_model"]["source"]
    assert meta["cost_model"]["constants"] and all(c["source"] for c in meta["cost_model"]["constants"])


def test_one_row_per_variant_and_token_count_with_the_schema(quick_run):
    """Every variant at T = 1, then the seven that take tokens at T = 2."""
    rows = quick_run[2]["rows"]
    assert [(r["variant"], r["T"]) for r in rows] == [(e.name, 1) for e in ENTRIES] + [
        (name, 2) for name in ("7_ready_first", "7_ready_first_lnc2", "verify", "pool", "pool_lnc2",
                               "layer", "layer_lnc2")]
    assert quick_run[2]["metadata"]["tokens"] == [1, 2]
    for r in rows:
        assert set(r) == ROW_KEYS, r["variant"]
        assert r["status"] == "ok" and r["error"] is None, r["error"]
        assert (r["config"], r["model"], r["tp"]) == ("Qwen3.5-397B-A17B TP16", "Qwen3.5-397B-A17B", 16)
        assert (r["B"], r["H"], r["nk"], r["nv"], r["dk"], r["dv"], r["K"]) == (1, 4096, 1, 4, 128, 128, 4)
        assert r["instructions"] > 0 and r["hbm_read_bytes"] > 0 and r["hbm_write_bytes"] > 0
        assert r["busy_fraction"] and all(0.0 <= f <= 1.0 + 1e-9 for f in r["busy_fraction"].values())
        assert r["busiest_lane"] in r["busy_fraction"]
        assert r["cpu_model_wall_s"] > 0
        assert math.isclose(r["cpu_model_wall_s"], r["cpu_model_run_s"] + r["cpu_model_schedule_s"])


def test_band_at_or_above_roofline_and_labelled_modeled(quick_run):
    for r in quick_run[2]["rows"]:
        assert r["label"] == MODELED, r["variant"]
        assert r["modeled_us"] >= r["best_us"] >= r["roofline_us"] > 0, r["variant"]
        assert math.isclose(r["modeled_over_roofline"], r["modeled_us"] / r["roofline_us"])
        assert r["launch_us"] == r["launches"] * (costs.LAUNCH_PREAMBLE_US + costs.LAUNCH_EPILOGUE_US)


def test_every_step_at_or_above_the_block_roofline_and_floor(quick_run):
    """A whole block's row (a composition step, the verify form) holds the block's minimal bytes
    and their roofline and likely floor on its cores (at T = 2, the T-token block's), as computed
    by hand from the shape; no step moves fewer bytes or beats either. Step 5 moves exactly the
    block's bytes, so its two rooflines agree; a stage and gdn_tkg have no block figures."""
    rows = {r["variant"]: r for r in quick_run[2]["rows"]}
    for r in quick_run[2]["rows"]:
        name, T = r["variant"], r["T"]
        e = BY_NAME[name]
        s = GDNShape(**{f: r[f] for f in sweep.SHAPE_FIELDS})
        if e.args == LAYER_ARGS:
            assert r["block_min_bytes"] == roofline.layer_min_bytes(s, T) == hand_layer_bytes(s, T)
            assert math.isclose(r["block_roofline_us"], roofline.layer_roofline_us(s, e.lnc, T))
        elif e.args in (BLOCK_ARGS, POOL_ARGS):
            verify = e.outputs in (VERIFY_OUTPUTS, POOL_OUTPUTS)      # every token's state written
            assert r["block_min_bytes"] == roofline.block_min_bytes(s, T, verify) == hand_block_bytes(s, T, verify)
            assert math.isclose(r["block_roofline_us"], roofline.block_roofline_us(s, e.lnc, T, verify))
            assert math.isclose(r["block_floor_us"], roofline.block_floor_us(s, e.lnc, T, verify))
        else:
            assert all(r[k] is None for k in ROW_KEYS if "block" in k), name
            continue
        assert r["hbm_over_block_min"] >= 1 and r["block_roofline_us"] <= r["roofline_us"] + 1e-9, name
        assert r["block_roofline_us"] <= r["best_us"] <= r["modeled_us"] and r["block_floor_us"] <= r["modeled_us"], name
        assert math.isclose(r["best_over_block_roofline"], r["best_us"] / r["block_roofline_us"])
        assert math.isclose(r["modeled_over_block_roofline"], r["modeled_us"] / r["block_roofline_us"])
        assert math.isclose(r["modeled_over_block_floor"], r["modeled_us"] / r["block_floor_us"])
        assert math.isclose(r["block_floor_us"] / r["block_roofline_us"],
                            costs.HBM_ROOFLINE_GBPS / costs.DMA_ACHIEVED_GBPS)
    assert rows["4_z_last"]["hbm_over_block_min"] == 1
    assert math.isclose(rows["4_z_last"]["block_roofline_us"], rows["4_z_last"]["roofline_us"])
    # one key head (the quick shard): both cores read it, and a | b whole
    assert rows["5_two_cores"]["hbm_over_block_min"] > 1 and rows["0_staged"]["hbm_over_block_min"] > 1


def hand_block_bytes(s, T, verify):
    """The block's minimal bytes from the shape: the weights and head parameters once, the
    incoming window and state once, T hidden and output rows per sequence, and the window and
    state after the last token (the verify form: after each of the T)."""
    weights = 2 * s.H * (s.conv_dim + s.value_dim + 2 * s.nv) + 4 * (s.conv_dim * s.K + 2 * s.nv + s.dv)
    window, state = 2 * s.B * s.conv_dim * s.K, 4 * s.B * s.nv * s.dk * s.dv
    activations = 2 * s.B * T * (s.H + s.value_dim)
    return weights + activations + (1 + (T if verify else 1)) * (window + state)


def hand_layer_bytes(s, T):
    """The whole layer's minimal bytes from the shape: the block's with every token's window and
    state written, without its output rows, with the input norm weight (fp32), W_out (bf16) and
    the fp32 partial rows."""
    return (hand_block_bytes(s, T, True) - 2 * s.B * T * s.value_dim + 4 * s.H
            + 2 * s.value_dim * s.H + 4 * s.B * T * s.H)


@pytest.mark.parametrize("shape", TEST_SHARDS, ids=str)
def test_block_roofline_of_T_tokens_by_hand(shape):
    """T = 1 is the one-token block's bytes (the verify form writes the same); T > 1 adds T - 1
    hidden and output rows per sequence, and for the verify form T - 1 windows and states."""
    for B in (1, 8):
        s = shape.with_batch(B)
        one = roofline.block_min_bytes(s)
        assert one == roofline.block_min_bytes(s, 1, verify=True) == hand_block_bytes(s, 1, False)
        for T in (2, MAX_TOKENS):
            for verify in (False, True):
                assert roofline.block_min_bytes(s, T, verify) == hand_block_bytes(s, T, verify)
                assert math.isclose(roofline.block_roofline_us(s, 2, T, verify),
                                    hand_block_bytes(s, T, verify) / (2 * costs.BYTES_PER_US))
            assert roofline.block_min_bytes(s, T) - one == (T - 1) * 2 * B * (s.H + s.value_dim)


def test_per_token_figures(quick_run):
    """modeled_us_per_token is modeled_us / (B x T); a T = 2 row's modeled_over_T1 is its time over
    the same variant's T = 1 row's, and two tokens in one launch cost less than two launches."""
    rows = {(r["variant"], r["T"]): r for r in quick_run[2]["rows"]}
    for (name, T), r in rows.items():
        assert math.isclose(r["modeled_us_per_token"], r["modeled_us"] / (r["B"] * T))
        if T == 1:
            assert r["modeled_over_T1"] is None
        else:
            assert math.isclose(r["modeled_over_T1"], r["modeled_us"] / rows[name, 1]["modeled_us"])
            assert 1 < r["modeled_over_T1"] < T, name


def test_metadata_lists_each_constant_with_its_band(quick_run):
    constants = quick_run[2]["metadata"]["cost_model"]["constants"]
    assert [c["name"] for c in constants] == [c.name for c in costs.TABLE]
    assert {c["band"] for c in constants} == {"both", "best", "likely", "launch"}


def test_a_failing_row_is_recorded_and_the_exit_code_says_so(tmp_path, monkeypatch):
    """A row that raises is kept, with its error, and the sweep exits non-zero at the end."""
    broken = dataclasses.replace(BY_NAME["gqa_repeat"], name="broken", kernel="kernels.in_proj:no_such_kernel")
    monkeypatch.setitem(BY_NAME, "broken", broken)
    code = sweep.main(["--quick", "--batches", "1", "--stages", "gqa_repeat,broken", "--out", str(tmp_path)])
    data = json.loads((tmp_path / sweep.JSON_NAME).read_text())
    assert code == 1 and data["metadata"]["rows_failed"] == 1
    ok, bad = data["rows"]
    assert ok["status"] == "ok" and set(bad) == ROW_KEYS
    assert bad["status"] == "error" and bad["modeled_us"] is None and bad["best_us"] is None
    assert bad["error"]["type"] == "AttributeError" and "no_such_kernel" in bad["error"]["message"]


def test_bad_arguments_are_rejected():
    with pytest.raises(SystemExit):
        sweep.parse_args(["--stages", "nope"])
    with pytest.raises(SystemExit):
        sweep.parse_args(["--configs", "Qwen3-Next-80B-TP3"])
    for tokens in ("0", f"1,{MAX_TOKENS + 1}"):
        with pytest.raises(SystemExit):
            sweep.parse_args(["--tokens", tokens])
    args = sweep.parse_args(["--configs", "qwen3-next-80b tp4,Qwen3.5-27B:TP8", "--batches", "1,64"])
    assert [s.name for s in args.shapes] == ["Qwen3-Next-80B TP4", "Qwen3.5-27B TP8"]
    assert args.batches == args.token_batches == [1, 64]


def test_the_T_axis_runs_where_configs_say():
    """By default every batch at T = 1 and SWEEP_TOKENS' T > 1 at SWEEP_TOKEN_BATCHES, only for
    the variants that take tokens; --batches sets the batches of every T."""
    args = sweep.parse_args([])
    assert args.tokens == list(SWEEP_TOKENS) and args.token_batches == list(SWEEP_TOKEN_BATCHES)
    assert max(SWEEP_TOKENS) <= MAX_TOKENS
    runs = [(s.name, s.B, T, [v.name for v in vs]) for s, T, vs in sweep.plan(args)]
    want = []
    for shape in SWEEP_SHARDS:
        for B in SWEEP_BATCHES:
            want.append((shape.name, B, 1, [e.name for e in ENTRIES]))
            if B in SWEEP_TOKEN_BATCHES:
                want += [(shape.name, B, T, ["7_ready_first", "7_ready_first_lnc2", "verify",
                                             "pool", "pool_lnc2", "layer", "layer_lnc2"])
                         for T in SWEEP_TOKENS[1:]]
    assert runs == want
    args = sweep.parse_args(["--stages", "in_proj,verify", "--batches", "64", "--tokens", "1,4"])
    assert [(s.B, T, [v.name for v in vs]) for s, T, vs in sweep.plan(args)][:2] == \
        [(64, 1, ["in_proj", "verify"]), (64, 4, ["verify"])]


def test_host_pipelines_add_up_their_launches(quick_run):
    """0_staged is the five stage kernels back to back: its row is the sum of theirs, five launches."""
    rows = {r["variant"]: r for r in quick_run[2]["rows"]}
    for name in ("0_staged", "1_staged_tkg"):
        parts = [rows[n] for n in BY_NAME[name].launches]
        r = rows[name]
        assert r["launches"] == len(parts) > 1
        for key in ("modeled_us", "best_us", "roofline_us", "launch_us"):
            assert math.isclose(r[key], sum(p[key] for p in parts)), (name, key)
        assert r["hbm_read_bytes"] == sum(p["hbm_read_bytes"] for p in parts)
        assert r["instructions"] == sum(p["instructions"] for p in parts)
    assert all(rows[n]["launches"] == 1 for n in ("2_scratch", "4_z_last"))


def test_readme_figure_draws_the_fused_kernel_modeled(tmp_path, capsys):
    from benchmarks import readme_figure
    out = tmp_path / "timeline.png"
    readme_figure.main(["--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    printed = capsys.readouterr().out
    assert MODELED in printed and "best" in printed and "likely" in printed
    _, modeled = readme_figure.figure()
    assert modeled.roofline_us <= modeled.best_us <= modeled.total_us


def test_latency_table_lists_the_steps_by_track(monkeypatch):
    """benchmarks.steps: a table per target shard, a column per batch with best - likely µs and
    both over the block's roofline, the one-core steps then the two-core ones, each track closed
    by its roofline row (the rows stand in for the sweep's); steps_upto lists the one-core track
    first; the climb and the targets' table read the same rows."""
    from benchmarks import steps
    row = {"best_us": 2.0, "modeled_us": 3.0, "best_over_block_roofline": 1.25,
           "modeled_over_block_roofline": 1.5, "block_roofline_us": 1.6, "block_floor_us": 2.2,
           "launches": 1, "launch_us": 16.0}
    monkeypatch.setattr(steps, "step_row", lambda *args: row)
    names = [e.name for e in steps.steps_upto("6_queues")]
    assert names == ["0_staged", "1_staged_tkg", "2_scratch", "3_onchip", "4_z_last", "6_queues",
                     "5_two_cores", "6_queues_lnc2"]
    tables = steps.latency_table(names).split("\n\n**")
    assert len(tables) == len(steps.TARGETS)
    cells = " | ".join(["2.0 – 3.0 (1.25x – 1.50x)"] * len(steps.BATCHES))
    roof = " | ".join(["*1.6*"] * len(steps.BATCHES))
    for table in tables:
        lines = table.splitlines()[4:]
        assert lines == ([f"| {n} | 1 | {cells} |" for n in names[:6]] + [f"| *roofline, 1 core* | | {roof} |"]
                         + [f"| {n} | 2 | {cells} |" for n in names[6:]]
                         + [f"| *roofline, 2 cores* | | {roof} |"])
    climb = steps.climb_table().splitlines()
    assert len(climb) == 2 + 2 + len(STEPS)                    # header, a row per track, a row per step
    assert climb[3] == "| 0 | five launches | 1 | " + " | ".join(["2.0 – 3.0 | 1.25 – 1.50"] * 2) + " |"
    target = steps.target_table().splitlines()[2:]
    want = []
    for m, tp in steps.TARGETS:
        for B in steps.BATCHES:
            for cores in (1, 2):
                best, likely = steps.TARGET_RATIOS[cores, B]
                verdict = [("met" if ratio <= t else "missed") for ratio, t in ((1.25, best), (1.5, likely))]
                want.append(f"| {m} TP{tp} | {B} | {cores} | 1.250 | ≤ {best} {verdict[0]} | 1.500 | "
                            f"≤ {likely} {verdict[1]} | 1.375 |")
    assert target == want
