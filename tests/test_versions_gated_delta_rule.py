"""Stage 4's earlier versions (kernels/versions/gated_delta_rule_v*.py), which the chapter profiles.

Each one against the torch reference under the accuracy rules, at tiny shapes and a real shard,
with inputs left unmodified, and each one naming a bad argument. The final kernel's own tests are
in test_gated_delta_rule.py.
"""
import importlib
import pkgutil

import numpy as np
import pytest

import kernels.versions
import nki
from kernels.configs import TEST_SHARDS
from tests.gdn_testing import (TINY_SHAPES, assert_output_close, assert_state_close,
                               run_unmodified, shape_id)
from tests.test_gated_delta_rule import NAMES as ARGS, random_inputs, reference

NAMES = sorted(m.name for m in pkgutil.iter_modules(kernels.versions.__path__)
               if m.name.startswith("gated_delta_rule_v"))
KERNELS = [getattr(importlib.import_module(f"kernels.versions.{n}"), n) for n in NAMES]
# tiny: dk != dv and F = 2 (dk 32), dk = 16 (F = 1); Qwen3-Next-80B TP4 at B = 8
SHAPES = [TINY_SHAPES[1], TINY_SHAPES[2], TEST_SHARDS[0].with_batch(8)]


def test_versions_found():
    assert NAMES[0] == "gated_delta_rule_v1" and len(NAMES) >= 3, NAMES


@pytest.mark.parametrize("shape", SHAPES, ids=[shape_id(s) for s in SHAPES])
@pytest.mark.parametrize("kernel", KERNELS, ids=NAMES)
def test_matches_reference(kernel, shape):
    x = random_inputs(shape, seed=shape.B)
    o, state = run_unmodified(nki.simulate(kernel), *(x[n] for n in ARGS))
    ref_o, ref_state = reference(x)
    assert o.shape == ref_o.shape and state.shape == ref_state.shape
    assert_output_close(o, ref_o, "o")
    assert_state_close(state, ref_state)


@pytest.mark.parametrize("kernel", KERNELS, ids=NAMES)
def test_rejects_state_dtype(kernel):
    x = random_inputs(TINY_SHAPES[1])
    x["recurrent_state"] = x["recurrent_state"].astype(np.float16)
    with pytest.raises(AssertionError, match=r"recurrent_state: expected dtype float32"):
        nki.simulate(kernel)(*(x[n] for n in ARGS))
