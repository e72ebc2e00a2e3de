"""Batch and head isolation: one bad sequence or head must not change anyone else's results.

In a serving batch one request with a non-finite value (NaN, +inf, -inf) in its hidden state,
conv state or recurrent state may ruin its own outputs, never another request's. A non-finite
per-head parameter (A_log, dt_bias) may ruin its own head in every sequence, never another head;
norm_weight[j] is shared by every head's column j, so it may reach column j of every head. The
layer's partial sum (out_proj) reads every head in every column: a bad head or column parameter
may reach all of it, and only its pools are held to the head rule.

For every registry entry (the stages, gdn_tkg, the composition steps, LNC=2 included, and the
verify form) each case plants one non-finite value kind into one sequence row, head or column of
one input, runs the kernel and requires everything outside that row, head or column to be
bit-identical to the clean run. Tiny shape: every entry, every kind; real shards
(kernels.configs.TEST_SHARDS): the stage-4 kernel and the fused entries.
"""
import numpy as np
import pytest

import kernels  # noqa: F401  (first: makes `import nki` work)
import nki
from kernels.configs import TEST_SHARDS, GDNShape
from kernels.reference import pipeline_inputs
from kernels.registry import BY_NAME, ENTRIES

# How each input is indexed, by argument name (the weights and conv_weight are shared by the whole
# batch and are not per-request data).
PER_SEQUENCE = ("hidden", "conv_state", "recurrent_state", "mixed_qkv", "conv_out", "q", "k", "v",
                "a", "b", "o", "z")
PER_HEAD = ("A_log", "dt_bias")
PER_COLUMN = ("norm_weight",)
KINDS = {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf}
# The bad row's own arithmetic (inf - inf, 0 * inf in the CPU model's NumPy) warns; it is expected.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

TINY = GDNShape(B=2, H=128, nk=2, nv=4, dk=32, dv=32, K=4, name="tiny")
REAL = [s.with_batch(B) for s, B in zip(TEST_SHARDS, (2, 3, 2, 3))]
REAL_ENTRIES = ("gated_delta_rule", "gdn_tkg", "3_onchip", "4_z_last", "5_two_cores", "6_queues",
                "6_queues_lnc2", "7_ready_first", "7_ready_first_lnc2")

def _heads(arr, nv):
    """arr as [B, nv, rest] if it holds value heads after the batch axis, else None."""
    B = arr.shape[0]
    if arr.ndim >= 3 and arr.shape[1] == nv:                   # q, k, v, o, states
        return arr.reshape(B, nv, -1)
    if arr.ndim == 2 and arr.shape[1] == nv:                   # a, b
        return arr.reshape(B, nv, 1)
    return None


def _out_heads(arr, shape):
    """An output as [B, nv, dv] if a row is value heads x dv (out), else _heads; the verify
    form's states [B, T, nv, dk, dv] as one batch row per (sequence, token)."""
    if arr.ndim == 5:
        arr = arr.reshape(-1, *arr.shape[2:])
    if arr[0].size == arr.shape[-1] == shape.nv * shape.dv:
        return arr.reshape(arr.shape[0], shape.nv, shape.dv)
    return _heads(arr, shape.nv)


def _cases(entry, shape, every_kind):
    """(input name, where, kind) for every input of the entry the isolation rule covers: every kind
    at every place, or (every_kind False) one kind per place, in turn."""
    cases = []
    kinds = list(KINDS)
    for name in BY_NAME[entry].args:
        if name in PER_SEQUENCE:
            wheres = [("row", 0), ("row", shape.B - 1)]
            if name == "recurrent_state":
                wheres = [("pair", (0, 0)), ("pair", (shape.B - 1, shape.nv - 1))]
        elif name in PER_HEAD:
            wheres = [("head", 0), ("head", shape.nv - 1)]
        elif name in PER_COLUMN:
            wheres = [("column", 0), ("column", shape.dv - 1)]
        else:
            continue
        for where in wheres:
            for kind in (kinds if every_kind else [kinds[len(cases) % len(kinds)]]):
                cases.append((name, where, kind))
    return cases


def _params(shapes, entries, every_kind):
    params = []
    for shape in shapes:
        for entry in entries:
            for name, where, kind in _cases(entry, shape, every_kind):
                case = f"{shape.name.replace(' ', '-')}-{entry}-{name}-{where[0]}{where[1]}-{kind}"
                params.append(pytest.param(shape, entry, name, where, kind, id=case))
    return params


def _run(entry, shape, inputs):
    e = BY_NAME[entry]
    outs = nki.simulate(e.load_kernel())(*e.arguments(shape, inputs))
    outs = outs if isinstance(outs, tuple) else (outs,)
    return {name: np.asarray(o) for (name, _), o in zip(e.outputs, outs)}


_CLEAN = {}


def _clean(entry, shape):
    key = (entry, shape)
    if key not in _CLEAN:
        inputs = pipeline_inputs(shape)
        _CLEAN[key] = (inputs, _run(entry, shape, inputs))
    return _CLEAN[key]


def _plant(x, where, value):
    """A copy of input x with `value` in the row, (row, head) pair, head or column `where`."""
    y = x.copy()
    y[where[1]] = value
    return y


def _same(a, b):
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def _assert_isolated(got, want, where, shape):
    what, at = where
    for name in want:
        g, w = got[name], want[name]
        if what in ("row", "pair"):
            row = at if what == "row" else at[0]
            keep = [b for b in range(shape.B) if b != row]
            assert _same(g[keep], w[keep]), f"{name}: rows {keep} changed (bad row {row})"
            continue
        if name == "partial":                # out_proj sums every head into every column
            continue
        gh, wh = _out_heads(g, shape), _out_heads(w, shape)
        if gh is None:                       # no head axis: a head or column parameter must not touch it
            assert _same(g, w), f"{name}: changed by a bad {what} {at}"
        elif what == "head":
            keep = [h for h in range(shape.nv) if h != at]
            assert _same(gh[:, keep], wh[:, keep]), f"{name}: heads {keep} changed (bad head {at})"
        else:
            keep = [j for j in range(gh.shape[2]) if j != at]
            assert _same(gh[:, :, keep], wh[:, :, keep]), f"{name}: columns other than {at} changed"


def _check(shape, entry, name, where, kind):
    inputs, clean = _clean(entry, shape)
    bad = dict(inputs)
    bad[name] = _plant(inputs[name], where, KINDS[kind])
    got = _run(entry, shape, bad)
    assert any(not _same(got[n], clean[n]) for n in clean), f"a bad {name} changed no output"
    _assert_isolated(got, clean, where, shape)


@pytest.mark.parametrize("shape, entry, name, where, kind",
                         _params([TINY], [e.name for e in ENTRIES], True))
def test_isolation_tiny(shape, entry, name, where, kind):
    _check(shape, entry, name, where, kind)


@pytest.mark.parametrize("shape, entry, name, where, kind", _params(REAL, REAL_ENTRIES, False))
def test_isolation_real_shards(shape, entry, name, where, kind):
    _check(shape, entry, name, where, kind)
