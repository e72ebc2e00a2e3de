"""Stage 2's earlier versions (kernels/versions/conv1d_decode_v*.py), the steps of its chapter.

Each version against kernels.reference.conv1d_decode_ref with kernels.accuracy's rules (conv_out:
output rule; the new conv_state: bit-exact) at a tiny shape with a partial channel tile and at a
real shard, inputs never written, and one bad input named in the error.
"""
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
import nkicpu
from kernels.configs import TEST_SHARDS, GDNShape
from kernels.versions.conv1d_decode_v1 import conv1d_decode_v1
from kernels.versions.conv1d_decode_v2 import conv1d_decode_v2
from kernels.versions.conv1d_decode_v3 import conv1d_decode_v3
from tests.gdn_testing import assert_bit_exact, assert_output_close, run_unmodified, shapes_param
from tests.test_conv1d_decode import conv_inputs, reference

VERSIONS = [conv1d_decode_v1, conv1d_decode_v2, conv1d_decode_v3]
IDS = ["v1", "v2", "v3"]
PARTIAL = GDNShape(B=2, H=128, nk=1, nv=3, dk=32, dv=48, K=3, name="partial tile")  # 128 + 80


@pytest.mark.parametrize("kernel", VERSIONS, ids=IDS)
@shapes_param([PARTIAL, TEST_SHARDS[0].with_batch(8)])
def test_matches_reference(kernel, shape):
    x, w, s = conv_inputs(shape)
    out, state = run_unmodified(nki.simulate(kernel), x, w, s)
    want_out, want_state = reference(x, w, s)
    assert_output_close(out, want_out, "conv_out")
    assert_bit_exact(state, want_state, "conv_state")


@pytest.mark.parametrize("kernel", VERSIONS, ids=IDS)
def test_rejects_fp32_state(kernel):
    x, w, s = conv_inputs(PARTIAL)
    with pytest.raises(AssertionError, match=r"conv_state: expected dtype bfloat16, got float32"):
        nki.simulate(kernel)(x, w, s.astype(np.float32))


@pytest.mark.parametrize("kernel", VERSIONS, ids=IDS)
def test_in_the_nki_subset(kernel):
    nkicpu.subset.check_kernel(kernel)
