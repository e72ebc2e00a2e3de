"""kernels.registry: every entry loads, takes arguments the pipeline provides, and names as many
outputs as its reference returns; an entry that takes T tokens returns the shapes the block's
specs give for T."""
import inspect

import numpy as np
import pytest

from kernels import accuracy, check_pool_indices, registry
from kernels.configs import GDNShape
from kernels.gdn_block_checks import MAX_TOKENS
from kernels.reference import (block_input_specs, block_output_specs, gdn_block_tkg_ref, pipeline_inputs,
                               to_torch, token_inputs)

SHAPE = GDNShape(B=2, H=128, nk=1, nv=2, dk=16, dv=16, name="tiny")


@pytest.fixture(scope="module")
def inputs():
    return pipeline_inputs(SHAPE)


@pytest.mark.parametrize("entry", registry.ENTRIES, ids=lambda e: e.name)
def test_entry_is_complete(entry, inputs):
    assert callable(entry.load_kernel())
    args = entry.arguments(SHAPE, inputs)
    assert len(args) == len(entry.args)
    want = entry.load_reference()(*[to_torch(a) if hasattr(a, "dtype") else a for a in args])
    want = want if isinstance(want, tuple) else (want,)
    assert len(want) == len(entry.outputs), entry.name
    assert all(rule in accuracy.RULES for _, rule in entry.outputs)
    for launch in entry.launches:
        assert launch in registry.BY_NAME


def test_steps_are_numbered_in_order():
    """One entry per step on the cores its idea needs: steps 0 to 7 on one core but step 5 (the two
    cores), steps 5 to 7 on two; each name starts with its step's number."""
    one = [e.step for e in registry.STEPS if e.lnc == 1]
    two = [e.step for e in registry.STEPS if e.lnc == 2]
    assert one == [0, 1, 2, 3, 4, 6, 7] and two == [5, 6, 7]
    assert [e.step for e in registry.STEPS] == sorted(e.step for e in registry.STEPS)
    assert all(e.name.startswith(f"{e.step}_") for e in registry.STEPS)
    assert [e.kind for e in registry.ENTRIES[:5]] == ["stage"] * 5


def test_old_sweep_keys_map_to_entries():
    """Every key of the sweep before the ladder's rebuild names the entry that holds its idea."""
    assert set(registry.RENAMED.values()) <= set(registry.BY_NAME)
    assert len(registry.RENAMED) == 15 and registry.RENAMED["lnc2"] == "7_ready_first_lnc2"


def test_block_args_are_the_signature_order():
    """BLOCK_ARGS (one home) is the block reference's signature and make_inputs' entries, in order."""
    assert tuple(inspect.signature(gdn_block_tkg_ref).parameters) == registry.BLOCK_ARGS
    assert tuple(block_input_specs(SHAPE)) == registry.BLOCK_ARGS
    assert tuple(block_output_specs(SHAPE)) == tuple(name for name, _ in registry.BLOCK_OUTPUTS)
    assert tuple(block_output_specs(SHAPE, verify=True)) == tuple(n for n, _ in registry.VERIFY_OUTPUTS)


TOKEN_ENTRIES = [e for e in registry.ENTRIES if e.max_tokens > 1 and e.args == registry.BLOCK_ARGS]
POOL_ENTRIES = [e for e in registry.ENTRIES if e.args == registry.POOL_ARGS]
LAYER_ENTRIES = [e for e in registry.ENTRIES if e.args == registry.LAYER_ARGS]


def test_the_fused_kernel_its_verify_pool_and_layer_forms_take_tokens():
    assert [e.name for e in TOKEN_ENTRIES] == ["7_ready_first", "7_ready_first_lnc2", "verify"]
    assert [e.name for e in POOL_ENTRIES] == ["pool", "pool_lnc2"]
    assert [e.name for e in LAYER_ENTRIES] == ["layer", "layer_lnc2"]
    serving = POOL_ENTRIES + LAYER_ENTRIES
    assert all(e.max_tokens == MAX_TOKENS for e in TOKEN_ENTRIES + serving)
    assert [e.name for e in registry.ENTRIES if e.max_tokens > 1] == [
        e.name for e in TOKEN_ENTRIES + serving]
    assert registry.BY_NAME["verify"].step is None
    assert registry.BY_NAME["7_ready_first_lnc2"].lnc == 2 == registry.BY_NAME["pool_lnc2"].lnc


@pytest.mark.parametrize("T", (1, 4))
def test_pool_arguments_keep_the_states_at_their_slots(T):
    """The sweep's pool rows: sequence b reads slot b of pools of B * T slots, in place."""
    x = token_inputs(SHAPE, T)
    args = dict(zip(registry.POOL_ARGS, POOL_ENTRIES[0].arguments(SHAPE, x)))
    B = SHAPE.B
    assert args["conv_state_pool"].shape[0] == args["recurrent_state_pool"].shape[0] == B * T
    assert np.array_equal(args["recurrent_state_pool"][args["read_indices"]], x["recurrent_state"])
    assert args["write_indices"].dtype == np.int32 and args["write_indices"].shape == (B, T)
    assert np.array_equal(args["write_indices"][:, 0], args["read_indices"])
    check_pool_indices(args["read_indices"], args["write_indices"], B * T)


@pytest.mark.parametrize("entry", TOKEN_ENTRIES, ids=lambda e: e.name)
@pytest.mark.parametrize("T", (2, MAX_TOKENS))
def test_token_entry_returns_the_specs_shapes(entry, T):
    """The reference on T tokens per sequence: the outputs block_output_specs gives for T (the
    verify form's with every token's states), in the registry's order and dtypes."""
    x = token_inputs(SHAPE, T)
    assert x["hidden"].shape == block_input_specs(SHAPE, T)["hidden"][0] == (SHAPE.B, T, SHAPE.H)
    got = entry.load_reference()(*(to_torch(x[n]) for n in entry.args))
    specs = block_output_specs(SHAPE, T, verify=entry.outputs == registry.VERIFY_OUTPUTS)
    assert tuple(specs) == tuple(name for name, _ in entry.outputs)
    for t, (dims, dtype) in zip(got, specs.values()):
        assert tuple(t.shape) == dims and str(t.dtype).removeprefix("torch.") == np.dtype(dtype).name
