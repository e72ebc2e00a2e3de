"""Stage 5's earlier versions (kernels/versions/rmsnorm_gated_v*.py), which the chapter profiles.

Each one against the torch reference under the output rule, at a tiny shape and a real shard,
and each one naming a bad argument. The final kernel's own tests are in test_rmsnorm_gated.py.
"""
import importlib
import pkgutil

import pytest

import kernels.versions
import nki
from kernels.configs import TEST_SHARDS
from tests.gdn_testing import TINY_SHAPES, assert_output_close, run_unmodified, shape_id
from tests.test_rmsnorm_gated import reference, stage_inputs

NAMES = sorted(m.name for m in pkgutil.iter_modules(kernels.versions.__path__)
               if m.name.startswith("rmsnorm_gated_v"))
KERNELS = [getattr(importlib.import_module(f"kernels.versions.{n}"), n) for n in NAMES]
SHAPES = [TINY_SHAPES[2], TEST_SHARDS[0].with_batch(8)]     # tiny dk != dv; Qwen3-Next TP4 B 8


def test_versions_found():
    assert NAMES[0] == "rmsnorm_gated_v1" and len(NAMES) >= 3, NAMES


@pytest.mark.parametrize("shape", SHAPES, ids=[shape_id(s) for s in SHAPES])
@pytest.mark.parametrize("kernel", KERNELS, ids=NAMES)
def test_matches_reference(kernel, shape):
    o, z, w = stage_inputs(shape, seed=1)
    out = run_unmodified(nki.simulate(kernel), o, z, w)
    assert out.shape == (shape.B, 1, shape.value_dim)
    assert_output_close(out, reference(o, z, w))


@pytest.mark.parametrize("kernel", KERNELS, ids=NAMES)
def test_rejects_value_dim(kernel):
    o, z, w = stage_inputs(TINY_SHAPES[2])                    # B 3, nv 6, dv 32
    with pytest.raises(AssertionError, match=r"z: expected shape \[3, 192\], got \[3, 160\]"):
        nki.simulate(kernel)(o, z[:, :160], w)


@pytest.mark.parametrize("kernel", KERNELS, ids=NAMES)
def test_rejects_more_columns_than_a_psum_bank(kernel):
    shape = TINY_SHAPES[0].with_batch(513)                    # nv 1: 513 (b, h) columns
    o, z, w = stage_inputs(shape)
    with pytest.raises(AssertionError, match=r"o: expected B \* nv <= 512 \(one PSUM bank\), got 513"):
        nki.simulate(kernel)(o, z, w)
