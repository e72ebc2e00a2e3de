"""The whole layer, `gdn_layer_tkg`: input RMSNorm, the pool form's phases and out_proj in one launch.

Each launch is held against the torch reference (kernels.reference.gdn_layer_tkg_ref: transformers'
input norm, the pool form's reference, y @ W_out in fp32) under the accuracy rules: this rank's
partial sum, every kept checkpoint in its write slot; padding rows' partial sums exactly 0, every
other slot untouched bit for bit, the other inputs never written. Then what the fusion must buy
(modeled), and every new argument's bad input named.
"""
import re

import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
import nkicpu
from nkicpu import costs
from nkicpu.profile import profile_capture
from benchmarks.roofline import layer_roofline_us
from kernels import check_pool_indices, gdn_layer_tkg
from kernels.accuracy import CONV_STATE, OUTPUT, STATE, assert_close
from kernels.configs import GDNShape, model_shard
from kernels.reference import gdn_layer_tkg_ref, layer_inputs, to_numpy, to_torch, token_inputs
from kernels.registry import BY_NAME, LAYER_ARGS
from tests.gdn_testing import pool_case, shape_id

NEXT_TP4 = model_shard("Qwen3-Next-80B", 4)
QWEN35_27B_TP8 = model_shard("Qwen3.5-27B", 8)        # H = 5120: out_proj's sums in column groups
SHARED_KEY_HEAD = model_shard("Qwen3.5-397B-A17B", 16)     # nk 1: two core barriers on two cores
TINY = GDNShape(B=1, H=256, nk=2, nv=6, dk=16, dv=32, name="tiny G3")


def launch(lnc):
    return nki.simulate(gdn_layer_tkg[lnc] if lnc > 1 else gdn_layer_tkg)


def same_bits(a, b):
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                          np.ascontiguousarray(b).view(np.uint8))


def layer_case(shape, T, read, write, N, seed=0):
    """The layer's arguments by name: the pool form's case (tests.gdn_testing.pool_case: a padding
    row's hidden NaN) with the layer's two weights."""
    _, args, read, write = pool_case(shape, T, N, read, write, seed)
    x = layer_inputs(args)
    x.update(conv_state_pool=args["conv_state"], recurrent_state_pool=args["recurrent_state"],
             read_indices=read, write_indices=write)
    return {n: x[n] for n in LAYER_ARGS}


def run_layer(shape, T, read, write, N, lnc=1):
    """Launch the layer and check it against the reference; returns the partial sums."""
    args = layer_case(shape, T, read, write, N)
    check_pool_indices(args["read_indices"], args["write_indices"], N)
    before = {k: np.copy(v) for k, v in args.items()}
    want = gdn_layer_tkg_ref(*(to_torch(v) for v in args.values()))
    partial, conv_back, state_back = launch(lnc)(*args.values())
    conv_pool, state_pool = args["conv_state_pool"], args["recurrent_state_pool"]
    assert same_bits(conv_back, conv_pool) and same_bits(state_back, state_pool)  # returned pools
    live = args["read_indices"] >= 0
    assert partial.dtype == np.float32 and partial.shape == (len(live), T, shape.H)
    assert_close(partial[live], to_numpy(want[0])[live], OUTPUT, "partial")
    assert np.all(partial[~live] == 0) and not np.signbit(partial[~live]).any()
    write = args["write_indices"]
    written = np.unique(write[write >= 0])
    assert_close(conv_pool[written], to_numpy(want[1])[written], CONV_STATE, "conv_state_pool")
    assert_close(state_pool[written], to_numpy(want[2])[written], STATE, "recurrent_state_pool")
    kept = np.setdiff1d(np.arange(N), written)
    assert same_bits(conv_pool[kept], before["conv_state_pool"][kept]), "untouched windows"
    assert same_bits(state_pool[kept], before["recurrent_state_pool"][kept]), "untouched states"
    for name in args:
        if not name.endswith("_pool"):
            assert same_bits(args[name], before[name]), f"{name} was written"
    return partial


@pytest.mark.parametrize("lnc", (1, 2))
@pytest.mark.parametrize("shape", [TINY, NEXT_TP4], ids=shape_id)
def test_decode_step_in_place_with_a_padding_row(shape, lnc):
    """T = 1: three sequences at scattered slots of a pool of 6, the middle one padding."""
    run_layer(shape, 1, [4, -1, 1], [[4], [-1], [1]], N=6, lnc=lnc)


@pytest.mark.parametrize("lnc", (1, 2))
def test_hidden_5120_verify_step(lnc):
    """Qwen3.5-27B TP8 (H = 5120: out_proj's sums take ten fp32 banks, more than PSUM has) with
    two tokens per sequence, each draft's checkpoint kept in a slot of its own."""
    run_layer(QWEN35_27B_TP8, 2, [0, 2], [[3, 0], [1, 2]], N=4, lnc=lnc)


def test_shared_key_head_on_two_cores():
    """Both programs read the one key head's window (the conv's core barrier), then add their
    out_proj sums (out_proj's): two barriers, each program the same count."""
    run_layer(SHARED_KEY_HEAD, 1, [1, 0], [[1], [0]], N=2, lnc=2)


@pytest.mark.parametrize("lnc", (1, 2))
def test_verify_step_keeps_the_chosen_checkpoints(lnc):
    """T = 4 on the tiny shape: one sequence keeps drafts 1 and 3, the other only its last."""
    run_layer(TINY, 4, [0, 5], [[-1, 2, -1, 3], [-1, -1, -1, 5]], N=6, lnc=lnc)


def test_two_cores_add_up_to_one():
    """On two cores each program sums its own heads and they meet through shared HBM: the
    partial sums are one core's up to the fp32 order of the additions."""
    one = run_layer(NEXT_TP4, 1, [0, 1], [[0], [1]], N=2, lnc=1)
    two = run_layer(NEXT_TP4, 1, [0, 1], [[0], [1]], N=2, lnc=2)
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-5)


# The layer's targets over its own roofline, (best, likely), by cores.
TARGETS = {1: (1.15, 1.6), 2: (1.6, 2.2)}


@pytest.mark.parametrize("cores", (1, 2))
@pytest.mark.parametrize("shape", [NEXT_TP4, QWEN35_27B_TP8], ids=shape_id)
def test_the_fusion_pays_and_stays_near_the_roofline(shape, cores):
    """Modeled, B = 1: within TARGETS of the layer's own roofline on its cores, and on one core
    the layer's best time minus the pool form's at most 1.1x W_out's bytes at the roofline rate
    plus 2 us (out_proj's weights stream behind the recurrence)."""
    x = token_inputs(shape, 1, seed=3)
    prof = {}
    for name in ("pool", "layer"):
        e = BY_NAME[name if cores == 1 else name + "_lnc2"]
        prof[name] = profile_capture(nkicpu.capture(e.load_kernel())(*e.arguments(shape, x)))
    roof = layer_roofline_us(shape, cores)
    best, likely = TARGETS[cores]
    assert prof["layer"].best_us <= best * roof and prof["layer"].total_us <= likely * roof
    if cores == 1:
        fusion = prof["layer"].best_us - prof["pool"].best_us
        assert fusion <= 1.1 * costs.roofline_us(shape.value_dim * shape.H * 2) + 2


LAYER_BAD = [
    ("input_norm_weight", lambda a: a[:-1], "shape [256]"),
    ("input_norm_weight", lambda a: a.astype(np.float16), "dtype float32"),
    ("W_out", lambda a: a[:, :-128], "shape [value_dim, H] = [192, 256]"),
    ("W_out", lambda a: a.T, "shape [value_dim, H]"),
    ("W_out", lambda a: a.astype(np.float32), "dtype bfloat16"),
]


@pytest.mark.parametrize("arg, bad, text", LAYER_BAD, ids=[f"{b[0]}-{b[2]}" for b in LAYER_BAD])
def test_bad_layer_arguments_are_named(arg, bad, text):
    args = layer_case(TINY, 1, [0], [[0]], N=1)
    args[arg] = bad(args[arg])
    with pytest.raises(AssertionError, match=rf"{arg}: expected .*{re.escape(text)}"):
        launch(1)(*args.values())
