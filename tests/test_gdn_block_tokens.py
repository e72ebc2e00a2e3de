"""T tokens per sequence in one launch: `gdn_block_tkg` with hidden [B, T, H] and
`gdn_block_tkg_verify`, which keeps the windows and states after every token.

Both against the torch verify reference (kernels.reference.gdn_block_tkg_verify_ref) and against T
single-token launches of `gdn_block_tkg` chained. A window column that is a projection is held to
the output rule (a GEMM over B * T rows may round it to the neighbouring bf16); the columns that
come from the incoming window are held bit for bit.
"""
import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
from kernels import gdn_block_tkg, gdn_block_tkg_verify
from kernels.configs import TEST_SHARDS, GDNShape
from kernels.gdn_block_checks import MAX_TOKENS
from kernels.reference import (gdn_block_tkg_verify_ref, make_inputs, to_numpy, to_torch,
                               token_inputs)
from tests.gdn_testing import (assert_bit_exact, assert_output_close, assert_state_close,
                               run_unmodified, shape_id)

TOKENS = (1, 2, 3, 4, 8)
TINY = [            # G 1 .. 4, K 2 .. 4, B 1 and 3
    GDNShape(B=1, H=128, nk=1, nv=1, dk=16, dv=16, K=2, name="tiny G1 K2"),
    GDNShape(B=3, H=128, nk=1, nv=2, dk=32, dv=16, K=3, name="tiny G2 K3 dk!=dv"),
    GDNShape(B=3, H=256, nk=2, nv=6, dk=16, dv=32, name="tiny G3 K4 dk!=dv"),
    GDNShape(B=1, H=128, nk=2, nv=8, dk=32, dv=32, K=4, name="tiny G4 K4"),
]


def launch(kernel, lnc):
    return nki.simulate(kernel[lnc] if lnc > 1 else kernel)


def check_windows(got, want, conv_state):
    """Every token's window [B, T, conv_dim, K]: the output rule; the columns still from the
    incoming window (token t: the first K - 1 - t) bit for bit, and equal to conv_state's."""
    assert_output_close(got, want, "conv_states")
    K = conv_state.shape[2]
    for t in range(min(got.shape[1], K - 1)):
        old = np.ascontiguousarray(got[:, t, :, :K - 1 - t])
        assert_bit_exact(old, np.ascontiguousarray(want[:, t, :, :K - 1 - t]), "old columns")
        assert_bit_exact(old, np.ascontiguousarray(conv_state[:, :, t + 1:]), "old columns")


def same_bits(a, b):
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                          np.ascontiguousarray(b).view(np.uint8))


def check_both_forms(shape, T, lnc, seed=0):
    """The verify form against the reference; gdn_block_tkg bit for bit its last token's."""
    x = token_inputs(shape, T, seed)
    out, windows, states = launch(gdn_block_tkg_verify, lnc)(*x.values())
    want = [to_numpy(t) for t in gdn_block_tkg_verify_ref(*(to_torch(v) for v in x.values()))]
    assert out.shape == (shape.B, T, shape.nv * shape.dv)
    assert_output_close(out, want[0], "out")
    check_windows(windows, want[1], x["conv_state"])
    assert_state_close(states, want[2], "recurrent_states")
    last = launch(gdn_block_tkg, lnc)(*x.values())
    assert same_bits(last[0], out)
    assert same_bits(last[1], windows[:, -1]) and same_bits(last[2], states[:, -1])


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("shape", TINY, ids=shape_id)
def test_tiny_shapes_match_the_reference(shape, T):
    check_both_forms(shape, T, 1)
    if shape.nv % 2 == 0:
        check_both_forms(shape, T, 2)


SHARDS = [(s.with_batch(B), T) for s in TEST_SHARDS for B in (1, 3) for T in TOKENS[1:]]
SHARDS += [(s.with_batch(32), T) for s in TEST_SHARDS[:2] for T in (2, 8)]


@pytest.mark.parametrize("shape, T", SHARDS, ids=[f"{shape_id(s)}-T{T}" for s, T in SHARDS])
@pytest.mark.parametrize("lnc", (1, 2))
def test_real_shards_match_the_reference(shape, T, lnc):
    check_both_forms(shape, T, lnc)


@pytest.mark.parametrize("lnc", (1, 2))
@pytest.mark.parametrize("shape", [TINY[2], TEST_SHARDS[1].with_batch(3)], ids=shape_id)
def test_verify_matches_single_token_launches_chained(shape, lnc):
    """Token t of one verify launch against launch t of T single-token launches, each starting
    from the windows and state the one before returned."""
    T = 4
    x = token_inputs(shape, T, seed=1)
    out, windows, states = launch(gdn_block_tkg_verify, lnc)(*x.values())
    step = dict(x)
    for t in range(T):
        step["hidden"] = np.ascontiguousarray(x["hidden"][:, t:t + 1])
        o, w, s = launch(gdn_block_tkg, lnc)(*step.values())
        assert_output_close(out[:, t:t + 1], o, f"out of token {t}")
        assert_output_close(windows[:, t], w, f"window after token {t}")
        assert_state_close(states[:, t], s, f"state after token {t}")
        step["conv_state"], step["recurrent_state"] = w, s


def test_a_non_finite_token_stays_in_its_sequence_and_after_it():
    """NaN in token 2 of sequence 1: the other sequences and sequence 1's tokens 0 and 1 keep
    the results of the clean inputs, bit for bit."""
    shape = TEST_SHARDS[0].with_batch(3)
    x = token_inputs(shape, 4, seed=2)
    clean = launch(gdn_block_tkg_verify, 1)(*x.values())
    x["hidden"] = x["hidden"].copy()
    x["hidden"][1, 2, 5] = np.nan
    bad = launch(gdn_block_tkg_verify, 1)(*x.values())
    for got, want in zip(bad, clean):
        assert same_bits(got[0::2], want[0::2])
        assert same_bits(got[1, :2], want[1, :2])
    assert np.isnan(bad[0][1, 2:].astype(np.float32)).any()


@pytest.mark.parametrize("kernel", (gdn_block_tkg, gdn_block_tkg_verify), ids=("tkg", "verify"))
@pytest.mark.parametrize("T", (0, MAX_TOKENS + 1))
def test_rejects_a_token_count_outside_1_to_max(kernel, T):
    shape = TINY[1]
    x = make_inputs(shape)
    x["hidden"] = np.zeros((shape.B, T, shape.H), ml_dtypes.bfloat16)
    msg = (rf"hidden: expected 1 to {MAX_TOKENS} tokens per sequence, shape \[B, T, H\], "
           rf"got shape \[{shape.B}, {T}, {shape.H}\]")
    if T == 0:
        msg = r"hidden: expected no empty dim"
    with pytest.raises(AssertionError, match=msg):
        launch(kernel, 1)(*x.values())


def test_verify_leaves_its_inputs_unmodified():
    run_unmodified(launch(gdn_block_tkg_verify, 2), *token_inputs(TINY[2], 3).values())
