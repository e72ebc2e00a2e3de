"""The NKI version nkicpu models (0.7, Neuron 2.33) and what it does with names that later
versions move: NKI 0.8's nki.lnc names run (core_barrier) or refuse as their 0.7 names do
(sendrecv, not modeled); the names 0.8 deprecates warn, naming the replacement; the names 0.7 and
Neuron 2.34 removed fail with an error that names the replacement (nkicpu/versions.py)."""
import importlib
import sys

import numpy as np
import pytest

import nkicpu
from nkicpu.errors import NkiDeprecationWarning
from nkicpu_testing import F32, load, nisa, nki, nl, rand, store


def test_the_version_it_models_is_stated():
    assert (nkicpu.NKI_VERSION, nkicpu.NEURON_SDK_VERSION) == ("0.7", "2.33")
    assert "2.32 API stubs" in nkicpu.CHECKED_AGAINST and "2.33" in nkicpu.CHECKED_AGAINST
    assert "NKI 0.7 (Neuron 2.33)" in nkicpu.__doc__


def test_nisa_core_barrier_warns_and_runs_as_nki_lnc_core_barrier():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[nl.program_id(0):nl.program_id(0) + 1], src=x[nl.program_id(0):nl.program_id(0) + 1])
        nisa.core_barrier(out, (0, 1))
        return out

    x = rand((2, 4), F32)
    with pytest.warns(NkiDeprecationWarning, match=r"nisa.core_barrier is deprecated in NKI 0.8 \(Neuron 2.34\): "
                                                   r"use nki.lnc.core_barrier; nkicpu models NKI 0.7"):
        got = nki.simulate(k[2])(x)
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("name,replacement,call", [
    ("sendrecv", r"nki.lnc.sendrecv \(without pipe_id\)",
     lambda t: nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0)),
    ("register_alloc", r"nisa.scalar_load / nisa.scalar_store \(NkiScalar\)", lambda t: nisa.register_alloc(0)),
    ("register_load", r"nisa.scalar_load \(NkiScalar\)", lambda t: nisa.register_load),
    ("VirtualRegister", r"nisa.NkiScalar", lambda t: nisa.VirtualRegister),
])
def test_deprecated_names_warn_with_the_replacement_and_stay_unmodeled(name, replacement, call):
    @nki.jit
    def k(x):
        call(load(x))
        return store(load(x))

    with pytest.warns(NkiDeprecationWarning, match=rf"nisa.{name} is deprecated in NKI 0.8 .*use {replacement}"):
        with pytest.raises(NotImplementedError, match=r"nkicpu does not model n"):
            nki.simulate(k)(rand((2, 2), F32))


def test_nl_dynamic_range_is_removed_and_names_its_replacement():
    with pytest.raises(AttributeError, match=r"nl.dynamic_range was removed in NKI 0.7: use nl.fori_loop or "
                                             r"nl.while_loop .*or a Python range"):
        nl.dynamic_range(4)
    assert not hasattr(nl, "dynamic_range")


@pytest.mark.skipif(importlib.util.find_spec("neuronxcc") is not None, reason="a neuronxcc is installed")
def test_neuronxcc_nki_is_removed_and_names_its_replacement():
    with pytest.raises(ModuleNotFoundError, match=r"no module named 'neuronxcc' here; neuronxcc.nki was removed in "
                                                  r"Neuron 2.34 .*use import nki, nki.language as nl"):
        importlib.import_module("neuronxcc.nki")
    assert "neuronxcc" not in sys.modules
