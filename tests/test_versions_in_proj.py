"""Stage 1's earlier kernels (kernels/versions/in_proj_v*.py, the chapter's steps) against
kernels.reference.in_proj_ref: a tiny shape with ragged channel counts, one real shard, inputs left
unmodified, a bad input that each version rejects naming the argument, and the NKI subset."""
import numpy as np
import pytest

import kernels  # noqa: F401  (registers nki)
import nki
import nkicpu
from kernels.configs import TEST_SHARDS, GDNShape
from kernels.reference import in_proj_ref, make_inputs, to_numpy, to_torch
from kernels.registry import BY_NAME
from kernels.versions import in_proj_v1, in_proj_v2, in_proj_v3
from tests.gdn_testing import assert_output_close, run_unmodified

VERSIONS = [in_proj_v1, in_proj_v2, in_proj_v3]
ARGS = BY_NAME["in_proj"].args
OUTS = [name for name, _ in BY_NAME["in_proj"].outputs]
# channel counts ragged against 128 and 512 (conv_dim 240, value_dim 144, nv 3); B = 3
TINY = GDNShape(B=3, H=256, nk=1, nv=3, dk=48, dv=48, name="tiny")
SHARD = TEST_SHARDS[0].with_batch(8)


def stage_inputs(shape):
    inputs = make_inputs(shape, seed=2)
    return [inputs[n] for n in ARGS]


@pytest.mark.parametrize("version", VERSIONS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
@pytest.mark.parametrize("shape", [TINY, SHARD], ids=["tiny", "shard"])
def test_version_matches_reference(version, shape):
    args = stage_inputs(shape)
    got = run_unmodified(nki.simulate(version.in_proj_kernel), *args)
    want = [to_numpy(t) for t in in_proj_ref(*[to_torch(a) for a in args])]
    assert len(got) == len(OUTS)
    for g, w, name in zip(got, want, OUTS):
        assert g.shape == w.shape
        assert_output_close(g, w, name)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_version_rejects_weight_with_wrong_rows(version):
    args = stage_inputs(TINY)
    args[2] = np.ascontiguousarray(args[2][:128])          # W_in_z with 128 rows, H = 256
    message = (r"W_in_z: expected 256 rows \(H of hidden\), shape \[H, N\], "
               rf"got shape \[128, {TINY.value_dim}\]")
    with pytest.raises(AssertionError, match=message):
        nki.simulate(version.in_proj_kernel)(*args)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_version_in_the_nki_subset(version):
    nkicpu.subset.check_kernel(version.in_proj_kernel)
