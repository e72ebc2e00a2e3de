"""Composition step 1, gdn_tkg (stages 4 and 5 fused), against the two stage references."""
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
from kernels.gdn_tkg import gdn_tkg
from kernels.reference import gated_delta_rule_ref, pipeline_inputs, rmsnorm_gated_ref, to_numpy, to_torch
from tests.gdn_testing import (SHARD_SHAPES, TINY_SHAPES, assert_output_close, assert_state_close, run_unmodified,
                               shapes_param)

NAMES = ("q", "k", "v", "a", "b", "z", "A_log", "dt_bias", "norm_weight", "recurrent_state")


def inputs(shape, seed=0):
    x = pipeline_inputs(shape, seed=seed)
    return {n: x[n] for n in NAMES}


@shapes_param(TINY_SHAPES + SHARD_SHAPES)
def test_matches_the_two_stage_references(shape):
    x = inputs(shape)
    out, state = nki.simulate(gdn_tkg)(*x.values())
    t = {n: to_torch(v) for n, v in x.items()}
    o, ref_state = gated_delta_rule_ref(t["q"], t["k"], t["v"], t["a"], t["b"], t["A_log"], t["dt_bias"],
                                        t["recurrent_state"])
    ref_out = rmsnorm_gated_ref(o, t["z"], t["norm_weight"])
    assert_output_close(out, to_numpy(ref_out), "out")
    assert_state_close(state, to_numpy(ref_state))


def test_inputs_unmodified():
    x = inputs(SHARD_SHAPES[4])
    run_unmodified(nki.simulate(gdn_tkg), *x.values())


@pytest.mark.parametrize("name,value,match", [
    ("z", np.zeros((3, 5), np.float32), r"z: expected shape \[3, 192\], got \[3, 5\]"),
    ("norm_weight", np.ones(16, np.float32), r"norm_weight: expected shape \[32\] \(head_v_dim\), got \[16\]"),
    ("q", np.zeros((3, 6, 16), np.float32), r"q: expected dtype bfloat16, got float32"),
])
def test_rejects(name, value, match):
    x = inputs(TINY_SHAPES[2])          # B 3, nv 6, dk 16, dv 32
    with pytest.raises(AssertionError, match=match):
        nki.simulate(gdn_tkg)(*dict(x, **{name: value}).values())
