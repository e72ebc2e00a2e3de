"""benchmarks.roofline: the block's minimal HBM bytes are the bytes of its inputs and results as
the reference builds them (for T tokens per sequence too), the fused single-core kernel (step 5)
moves exactly them, and their roofline and likely floor divide by the cores' bandwidth."""
import math

import pytest

import kernels
import nkicpu
from benchmarks import roofline
from kernels.configs import TEST_SHARDS, model_shard
from kernels.reference import gdn_block_tkg_ref, gdn_block_tkg_verify_ref, make_inputs, to_torch, token_inputs
from kernels.registry import BLOCK_ARGS, BY_NAME
from nkicpu import costs


@pytest.mark.parametrize("T", (1, 3))
@pytest.mark.parametrize("shape", [s.with_batch(B) for s in TEST_SHARDS for B in (1, 3)], ids=str)
def test_block_bytes_are_the_arrays_bytes(shape, T):
    """Every input read once and every result written once: the arrays the reference takes and
    returns, for T tokens per sequence (the verify form's results: every token's states)."""
    x = token_inputs(shape, T)
    args = [to_torch(x[n]) for n in BLOCK_ARGS]
    inputs = sum(a.nbytes for a in x.values())
    for verify, reference in ((False, gdn_block_tkg_ref), (True, gdn_block_tkg_verify_ref)):
        results = reference(*args)
        want = inputs + sum(t.numel() * t.element_size() for t in results)
        assert roofline.block_min_bytes(shape, T, verify) == want


@pytest.mark.skipif(kernels.NKI_BACKEND != "nkicpu", reason="the instruction record needs nkicpu (NKICPU=1)")
@pytest.mark.parametrize("model, tp", [("Qwen3-Next-80B", 4), ("Qwen3.5-27B", 8)])
def test_step_5_moves_the_block_bytes(model, tp):
    """The single-core fused kernel reads and writes each byte once: its HBM traffic is the block's."""
    shape = model_shard(model, tp, 1)
    x = make_inputs(shape)
    capture = nkicpu.capture(BY_NAME["4_z_last"].load_kernel())(*(x[n] for n in BLOCK_ARGS))
    moved = sum(sum(costs.hbm_bytes(i)) for i in capture.instructions if i.engine == "dma")
    assert moved == roofline.block_min_bytes(shape)


def test_roofline_and_floor_divide_by_the_cores_bandwidth():
    s = model_shard("Qwen3-Next-80B", 4, 32)
    nbytes = roofline.block_min_bytes(s)
    for cores in (1, 2):
        assert math.isclose(roofline.block_roofline_us(s, cores), nbytes / (cores * costs.BYTES_PER_US))
        assert math.isclose(roofline.block_floor_us(s, cores),
                            nbytes / (cores * costs.DMA_ACHIEVED_GBPS * 1e3))
    assert math.isclose(roofline.block_roofline_us(s, 2), roofline.block_roofline_us(s) / 2)
    assert roofline.block_floor_us(s, 2) > roofline.block_roofline_us(s, 2)
