"""Bad input to every registry entry: a named error at trace time, and no input written.

Each class of bad argument a new user passes (a float64 or int64 array, None, a Python float, a
list, an empty dim, a conv window out of range, conv_weight with too many rows, a batch that
disagrees across arguments) is tried on every entry of kernels.registry it applies to: the five
stage kernels, gdn_tkg, the composition steps (the fused gdn_block_tkg and its LNC=2 launch
among them), the verify form, the pool form and the layer. The error names the argument, what was expected and the value;
the caller's arrays are bit-identical afterwards. Then the fused block's own contract, case by
case (kernels/gdn_block_checks.py), for every step and the torch reference.
"""
import inspect
import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import kernels  # noqa: F401  registers `nki`
import nki
from kernels.configs import GDNShape
from kernels.gdn_block import gdn_block_tkg
from kernels.reference import gdn_block_tkg_ref, make_inputs, pipeline_inputs, to_torch
from kernels.registry import BLOCK_ARGS, ENTRIES, LAYER_ARGS, POOL_ARGS
from nkicpu import Kernel, NkiValidationError
from tests.gdn_testing import composition_steps

BF16 = ml_dtypes.bfloat16

# B = 2 and no other size 3, so that a batch of B + 1 = 3 in a message is the bad argument's.
SHAPE = GDNShape(B=2, H=128, nk=1, nv=2, dk=16, dv=16, K=4, name="tiny")     # conv_dim 64
INPUTS = pipeline_inputs(SHAPE)

# The dims of every tensor the registry's entries take, as GDNShape fields (an int is a literal
# size), to build inputs of consistent shape for a shape no reference can compute (a dim of 0).
LAYOUTS = {
    "hidden": ("B", 1, "H"), "W_in_qkv": ("H", "conv_dim"), "W_in_z": ("H", "value_dim"),
    "W_in_a": ("H", "nv"), "W_in_b": ("H", "nv"), "conv_weight": ("conv_dim", "K"),
    "conv_state": ("B", "conv_dim", "K"), "A_log": ("nv",), "dt_bias": ("nv",),
    "norm_weight": ("dv",), "recurrent_state": ("B", "nv", "dk", "dv"),
    "mixed_qkv": ("B", "conv_dim"), "z": ("B", "value_dim"), "a": ("B", "nv"), "b": ("B", "nv"),
    "conv_out": ("B", "conv_dim"), "q": ("B", "nv", "dk"), "k": ("B", "nv", "dk"),
    "v": ("B", "nv", "dv"), "o": ("B", "nv", "dv"),
}
# The block takes each dim from one argument (kernels/gdn_block_checks.block_dims) and blames it.
BLOCK_DIM_SOURCE = {"B": "hidden", "H": "hidden", "nv": "recurrent_state", "dk": "recurrent_state",
                    "dv": "recurrent_state"}

KERNELS = [e for e in ENTRIES if isinstance(e.load_kernel(), Kernel)]    # not the host pipelines
EMPTY_DIMS = ("B", "H", "nv", "dv", "dk")


def _entry_param(entries):
    return pytest.mark.parametrize("entry", entries, ids=[e.name for e in entries])


def parameters(entry):
    """The entry's parameter names (the registry names gqa_repeat's ints by GDNShape field)."""
    kernel = entry.load_kernel()
    return list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)


def _dims(name, shape):
    return tuple(d if isinstance(d, int) else getattr(shape, d) for d in LAYOUTS[name])


def arguments(entry, shape=SHAPE, **changes):
    """The entry's arguments at `shape`: the reference's pipeline tensors at SHAPE, or tensors of
    ones of `shape`'s dims at any other shape; `changes` replace arguments by name."""
    x = INPUTS if shape == SHAPE else {n: np.ones(_dims(n, shape), INPUTS[n].dtype) for n in LAYOUTS}
    args = dict(zip(entry.args, entry.arguments(shape, x)))
    args.update(changes)
    return list(args.values())


def rejects(entry, args, arg, got):
    """Run the entry on `args`: it must fail with a message naming `arg`, an expectation and the
    value (`got`, a regex), and leave every array argument bit-identical."""
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises((AssertionError, TypeError, NkiValidationError)) as e:
        entry.load_kernel()(*args)
    message = str(e.value)
    assert re.search(rf"(^|\] |argument ){re.escape(arg)}: expected .+, got {got}", message), message
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{entry.name} wrote an input"


def test_layouts_are_the_reference_shapes():
    for name, x in INPUTS.items():
        if name in LAYOUTS:
            assert x.shape == _dims(name, SHAPE), name


# --- arguments no NKI kernel takes: nkicpu names the parameter --------------------------------

NOT_AN_NKI_ARGUMENT = {
    "float64": (lambda x: x.astype(np.float64), r"dtype\('float64'\)"),
    "int64": (lambda x: x.astype(np.int64), r"dtype\('int64'\)"),
    "None": (lambda x: None, "None"),
    "Python-float": (lambda x: 1.5, r"1\.5"),
    "list": (lambda x: x.tolist() if isinstance(x, np.ndarray) else [x], "a list of"),
}


@_entry_param(KERNELS)
@pytest.mark.parametrize("case", list(NOT_AN_NKI_ARGUMENT))
def test_every_argument_named(entry, case):
    """Each argument in turn; a tensor's error comes from nkicpu (dtype, list, or the kernel
    reading .shape of what is not a tensor), gqa_repeat's int arguments' from its own check."""
    make, got = NOT_AN_NKI_ARGUMENT[case]
    for i, arg in enumerate(parameters(entry)):
        args = arguments(entry)
        if case in ("float64", "int64") and not isinstance(args[i], np.ndarray):
            continue                    # an int argument has no dtype
        args[i] = make(args[i])
        rejects(entry, args, arg, got)


# --- dims: each checked against the argument it comes from, before anything is derived ---------

def _empty_dim_cases():
    cases = []
    for entry in ENTRIES:
        for dim in EMPTY_DIMS:
            shape = replace(SHAPE, **{dim: 0})
            args = arguments(entry, shape)
            empty = [n for n, a in zip(parameters(entry), args)
                     if (a == 0 if isinstance(a, int) else a.size == 0)]
            if empty:
                blamed = empty[0]
                if entry.args == BLOCK_ARGS:
                    blamed = BLOCK_DIM_SOURCE[dim]
                elif entry.args in (POOL_ARGS, LAYER_ARGS):   # the same dims, from the pools
                    blamed = BLOCK_DIM_SOURCE[dim].replace("recurrent_state", "recurrent_state_pool")
                cases.append(pytest.param(entry, dim, blamed, id=f"{entry.name}-{dim}=0"))
    return cases


@pytest.mark.parametrize("entry,dim,blamed", _empty_dim_cases())
def test_empty_dim(entry, dim, blamed):
    """B, H, nv, dk or dv = 0 (the other arguments of consistent shape): the first argument that
    holds the dim is blamed (for the block, the argument the dim comes from), with its shape."""
    shape = replace(SHAPE, **{dim: 0})
    args = arguments(entry, shape)
    value = dict(zip(parameters(entry), args))[blamed]
    rejects(entry, args, blamed, "0$" if isinstance(value, int) else re.escape(f"shape {list(value.shape)}"))


CONV_ENTRIES = [e for e in ENTRIES if "conv_weight" in e.args]


@_entry_param(CONV_ENTRIES)
@pytest.mark.parametrize("K", [1, 5])
def test_conv_window_out_of_range(entry, K):
    rejects(entry, arguments(entry, replace(SHAPE, K=K)), "conv_weight", f"{K}$")


@_entry_param(CONV_ENTRIES)
def test_conv_weight_rows_blamed_on_conv_weight(entry):
    rows = SHAPE.conv_dim + 64
    args = arguments(entry, conv_weight=np.ones((rows, SHAPE.K), np.float32))
    rejects(entry, args, "conv_weight", "(shape )?" + re.escape(f"[{rows}, {SHAPE.K}]"))


def _batch_cases():
    cases = []
    for entry in ENTRIES:
        batched = [n for n in entry.args if n in LAYOUTS and LAYOUTS[n][0] == "B"]
        for arg in batched[1:]:         # the first one sets B
            cases.append(pytest.param(entry, arg, id=f"{entry.name}-{arg}"))
    return cases


@pytest.mark.parametrize("entry,arg", _batch_cases())
def test_batch_mismatch_blamed_on_the_argument(entry, arg):
    bad = np.ones((SHAPE.B + 1,) + _dims(arg, SHAPE)[1:], INPUTS[arg].dtype)
    rejects(entry, arguments(entry, **{arg: bad}), arg, rf".*\b{SHAPE.B + 1}\b")


# --- the fused block's contract, case by case -------------------------------------------------

BAD_SHAPE = GDNShape(B=2, H=256, nk=2, nv=4, dk=32, dv=16, K=4, name="bad")   # conv_dim 192


def _bad(**changes):
    x = make_inputs(BAD_SHAPE, seed=11)
    return dict(x, **{k: (v(x) if callable(v) else v) for k, v in changes.items()})


BAD_INPUTS = {
    "H-not-multiple-of-128": (dict(hidden=np.zeros((2, 1, 200), BF16)),
                              r"hidden: expected hidden size H = hidden.shape\[2\] a multiple of 128, got 200"),
    "dk-over-128": (dict(recurrent_state=np.zeros((2, 4, 256, 16), np.float32)),
                    r"recurrent_state: expected head_k_dim recurrent_state.shape\[2\] <= 128, got 256"),
    "dv-over-128": (dict(recurrent_state=np.zeros((2, 4, 32, 130), np.float32)),
                    r"recurrent_state: expected head_v_dim recurrent_state.shape\[3\] <= 128, got 130"),
    "nv-not-multiple-of-nk": (make_inputs(replace(BAD_SHAPE, nv=3), seed=11),
                              r"W_in_qkv: expected conv_dim = W_in_qkv.shape\[1\] = 2 \* nk \* 32 \+ 3 \* 16 "
                              r"columns for an integer nk >= 1 dividing num_v_heads = 3, got conv_dim = 176"),
    "conv-dim": (dict(W_in_qkv=lambda x: x["W_in_qkv"][:, :191].copy()),
                 r"W_in_qkv: expected conv_dim = W_in_qkv.shape\[1\] = 2 \* nk \* 32 \+ 4 \* 16 .* "
                 r"got conv_dim = 191"),
    "conv-weight-rows": (dict(conv_weight=np.zeros((192 + 2 * 32, 4), np.float32)),
                         r"conv_weight: expected conv_dim = 192 rows \(W_in_qkv.shape\[1\]\), got \[256, 4\]"),
    "empty-batch": (dict(hidden=np.zeros((0, 1, 256), BF16)),
                    r"hidden: expected no empty dim \(every dim >= 1\), got shape \[0, 1, 256\]"),
    "no-value-heads": (dict(recurrent_state=np.zeros((2, 0, 32, 16), np.float32)),
                       r"recurrent_state: expected no empty dim \(every dim >= 1\), got shape \[2, 0, 32, 16\]"),
    "windows-differ": (dict(conv_state=lambda x: x["conv_state"][:, :, :3].copy()),
                       r"conv_state: expected window conv_state.shape\[2\] = 4 \(as conv_weight\), got \[2, 192, 3\]"),
    "hidden-dtype": (dict(hidden=lambda x: x["hidden"].astype(np.float32)),
                     r"hidden: expected dtype bfloat16, got float32"),
    "W-dtype": (dict(W_in_z=lambda x: x["W_in_z"].astype(np.float32)),
                r"W_in_z: expected dtype bfloat16, got float32"),
    "state-dtype": (dict(recurrent_state=lambda x: x["recurrent_state"].astype(BF16)),
                    r"recurrent_state: expected dtype float32, got bfloat16"),
    "conv-weight-dtype": (dict(conv_weight=lambda x: x["conv_weight"].astype(BF16)),
                          r"conv_weight: expected dtype float32, got bfloat16"),
    "hidden-rank": (dict(hidden=lambda x: x["hidden"][:, 0].copy()),
                    r"hidden: expected a 3-d tensor, got shape \[2, 256\]"),
    "state-rank": (dict(recurrent_state=lambda x: x["recurrent_state"][0].copy()),
                   r"recurrent_state: expected a 4-d tensor, got shape \[4, 32, 16\]"),
    "norm-weight-length": (dict(norm_weight=np.ones(32, np.float32)),
                           r"norm_weight: expected length head_v_dim = 16 .*got \[32\]"),
    "A_log-length": (dict(A_log=np.zeros(8, np.float32)),
                     r"A_log: expected length num_v_heads = 4 \(recurrent_state.shape\[1\]\), got \[8\]"),
    "dt_bias-length": (dict(dt_bias=np.zeros(5, np.float32)), r"dt_bias: expected length num_v_heads = 4 .*got \[5\]"),
    "W-shape": (dict(W_in_a=lambda x: x["W_in_a"][:, :3].copy()),
                r"W_in_a: expected shape \[H, 4\] = \[256, 4\], got \[256, 3\]"),
}

STEPS = composition_steps()                 # the composition steps, in book order


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_block_rejects(case):
    changes, match = BAD_INPUTS[case]
    with pytest.raises(AssertionError, match=match):
        nki.simulate(gdn_block_tkg)(*_bad(**changes).values())


@pytest.mark.parametrize("version", list(STEPS))
@pytest.mark.parametrize("case", ["nv-not-multiple-of-nk", "state-dtype"])
def test_every_step_rejects_alike(version, case):
    """Every composition step checks its arguments with the fused kernel's block_dims and
    check_block_dtypes, so it rejects the same input with the same message."""
    changes, match = BAD_INPUTS[case]
    with pytest.raises(AssertionError, match=match):
        STEPS[version](*_bad(**changes).values())


@pytest.mark.parametrize("case", ["conv-weight-rows", "nv-not-multiple-of-nk", "empty-batch",
                                  "no-value-heads", "W-shape"])
def test_reference_rejects_shapes_alike(case):
    """The torch reference derives the dims with the kernels' block_dims: the same message, raised
    as the host code's ValueError."""
    changes, match = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=match):
        gdn_block_tkg_ref(*(to_torch(v) for v in _bad(**changes).values()))
