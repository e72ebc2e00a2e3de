"""kernels.registry: every entry loads, takes arguments the pipeline provides, and names as many
outputs as its reference returns."""
import inspect

import pytest

from kernels import accuracy, registry
from kernels.configs import GDNShape
from kernels.reference import block_input_specs, block_output_specs, gdn_block_tkg_ref, pipeline_inputs, to_torch

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
    assert [e.step for e in registry.STEPS] == list(range(len(registry.STEPS)))
    assert [e.kind for e in registry.ENTRIES[:5]] == ["stage"] * 5
    assert registry.BY_NAME["6_lnc2"].lnc == registry.BY_NAME["7_qk_slices"].lnc == 2


def test_block_args_are_the_signature_order():
    """BLOCK_ARGS (one home) is the block reference's signature and make_inputs' entries, in order."""
    assert tuple(inspect.signature(gdn_block_tkg_ref).parameters) == registry.BLOCK_ARGS
    assert tuple(block_input_specs(SHAPE)) == registry.BLOCK_ARGS
    assert tuple(block_output_specs(SHAPE)) == tuple(name for name, _ in registry.BLOCK_OUTPUTS)
