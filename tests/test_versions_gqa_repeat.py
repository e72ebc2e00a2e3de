"""Stage 3's earlier version (kernels/versions/gqa_repeat_v1.py), the first step of its chapter.

Against kernels.reference.gqa_repeat_ref, bit-exact (kernels.accuracy's EXACT rule), at a tiny
shape and a real shard, inputs never written, and one bad input named in the error.
"""
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
import nkicpu
from kernels.configs import TEST_SHARDS
from kernels.versions.gqa_repeat_v1 import gqa_repeat_v1
from tests.gdn_testing import TINY_SHAPES, assert_bit_exact, run_unmodified, shapes_param
from tests.test_gqa_repeat import conv_out_of, dims, reference


@shapes_param([TINY_SHAPES[2], TEST_SHARDS[0].with_batch(8)])
def test_matches_reference(shape):
    x = conv_out_of(shape)
    got = run_unmodified(lambda a: nki.simulate(gqa_repeat_v1)(a, *dims(shape)), x)
    for name, g, want in zip("qkv", got, reference(x, shape)):
        assert_bit_exact(g, want, name)


def test_rejects_nv_not_a_multiple_of_nk():
    shape = TINY_SHAPES[2]                                  # nk 2, dk 16, dv 32: conv_dim 256
    x = np.zeros((shape.B, 2 * 2 * 16 + 3 * 32), conv_out_of(shape).dtype)          # nv = 3
    with pytest.raises(AssertionError, match=r"conv_out: expected num_v_heads nv = .* a multiple of num_k_heads = 2"):
        nki.simulate(gqa_repeat_v1)(x, *dims(shape))


def test_in_the_nki_subset():
    nkicpu.subset.check_kernel(gqa_repeat_v1)
