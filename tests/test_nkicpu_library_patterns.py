"""Patterns the NKI library ships, written afresh, run under nkicpu and agree with float64.

A rule without a public source must never refuse what the library's kernels do (the book's
nkicpu_rules page). Each pattern here was refused by an earlier nkicpu rule:

- column-tiled decode projection (LIB core/qkv/qkv_tkg.py `_accumulate_psum_to_output`,
  core/router_topk/router_topk.py, core/mlp/mlp_tkg/mlp_tkg_gate_up_projection.py): contraction
  tile f runs in PE column tile f, so its sums land on PSUM partitions 32 * f ..; tensor_tensor
  adds those rows into an SBUF accumulator on partitions 0 .. (rule input-start-partition);
- a per-head parameter broadcast over the batch (the library's gdn_tkg, Neuron 2.33 sources): a
  stride-0 [B, nv] view of A_log DMAed into a [1, B * nv] tile (rule dma-partition-count, now a
  warning: the docs ask only for equal element counts; whether neuronx-cc compiles it for B > 1 is
  not shown, the library's own test runs B = 1).
"""
import numpy as np
import pytest

import nkicpu
from nkicpu_testing import BF16, F32, nisa, nki, nl, rand, store

COLUMN_TILE = 32   # rows of PSUM one PE column tile writes (trn2: 32-row quadrants)


@nki.jit
def column_tiled_projection(x, W):
    """x [T, H] @ W [H, N] for T <= 32 tokens: contraction tile kt in PE column tile kt % 4."""
    T, H = x.shape
    N = W.shape[1]
    KT = H // 128
    xT = nl.ndarray((128, T, KT), x.dtype, buffer=nl.sbuf)        # xT[p, t, kt] = x[t, p * KT + kt]
    nisa.dma_copy(dst=xT, src=x.reshape((T, 128, KT)).permute((1, 0, 2)))
    w = nl.ndarray((128, KT, N), W.dtype, buffer=nl.sbuf)          # w[p, kt, n] = W[p * KT + kt, n]
    nisa.dma_copy(dst=w, src=W.reshape((128, KT, N)))
    sums = nl.ndarray((128, N), nl.float32, buffer=nl.psum)
    tiles = min(KT, 128 // COLUMN_TILE)
    for kt in range(KT):
        f = kt % tiles
        nisa.nc_matmul(dst=sums[f * COLUMN_TILE:f * COLUMN_TILE + T, :], stationary=xT[:, :, kt],
                       moving=w[:, kt, :], tile_position=(0, f * COLUMN_TILE), tile_size=(128, COLUMN_TILE))
    acc = nl.ndarray((T, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=acc, src=sums[0:T, :])
    for f in range(1, tiles):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=sums[f * COLUMN_TILE:f * COLUMN_TILE + T, :], op=nl.add)
    return store(acc)


@pytest.mark.parametrize("T,H", [(1, 512), (8, 512), (32, 1024)])
def test_column_tiled_projection_agrees_with_float64(T, H):
    x, W = rand((T, H), BF16, seed=1), rand((H, 48), BF16, seed=2)
    got = nki.simulate(column_tiled_projection)(x, W)
    want = x.astype(np.float64) @ W.astype(np.float64)
    scale = np.abs(x.astype(np.float64)) @ np.abs(W.astype(np.float64))   # bf16 products are exact in fp32
    assert np.all(np.abs(got - want) <= 2.0 ** -22 * H * scale), np.abs(got - want).max()


def test_column_tiled_projection_uses_four_column_tiles():
    capture = nkicpu.capture(column_tiled_projection)(rand((8, 512), BF16), rand((512, 48), BF16))
    tiles = {i.args["tile_position"] for i in capture.instructions if i.opcode == "nc_matmul"}
    assert tiles == {(0, 0), (0, 32), (0, 64), (0, 96)}


@nki.jit
def batch_broadcast_parameter(A_log, hidden):
    """A_log [nv] repeated for each of hidden's B sequences into one [1, B * nv] tile."""
    B, nv = hidden.shape[0], A_log.shape[0]
    row = nl.ndarray((1, B * nv), A_log.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=A_log.reshape((1, nv)).broadcast(0, B))
    return store(row)


@pytest.mark.parametrize("B", [1, 4])
def test_batch_broadcast_parameter_agrees_with_float64(B):
    A_log = np.log(np.random.default_rng(3).uniform(0.01, 16.0, 8)).astype(F32)
    hidden = np.zeros((B, 1, 128), BF16)
    want = np.tile(A_log.astype(np.float64), B).reshape(1, B * 8)
    if B == 1:
        got = nki.simulate(batch_broadcast_parameter)(A_log, hidden)
    else:   # dim 0 of the view (B) differs from the tile's partitions (1): runs, with the rule's warning
        with pytest.warns(nkicpu.errors.NkiRuleWarning, match=r"\[dma-partition-count\] .*dst has 1 in dim 0"):
            got = nki.simulate(batch_broadcast_parameter)(A_log, hidden)
    np.testing.assert_array_equal(got.astype(np.float64), want)
