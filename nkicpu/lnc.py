"""`nki.lnc` on the CPU: NKI 0.8's module for what passes between the two physical NeuronCores of
an LNC=2 launch (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.lnc.html).

NKI 0.8 moved `nki.isa.core_barrier` and `nki.isa.sendrecv` here and kept the `nki.isa` names as
deprecated wrappers. nkicpu models NKI 0.7, where the `nki.isa` names are documented: both names
run the same barrier (`nkicpu.core_sync`), and the `nki.isa` one warns that 0.8 deprecates it
(nkicpu/versions.py). sendrecv exchanges SBUF data between the cores, which nkicpu does not model:
both of its names refuse. sendrecv_compute is not here.
"""
from . import core_sync
from .errors import not_modeled
from .isa_enums import dma_engine as _dma_engine
from .isa_enums import engine as _engine

__all__ = ["core_barrier", "sendrecv"]


def core_barrier(data, cores, engine=_engine.gpsimd, name=None):
    """Wait until both programs of an LNC=2 launch have reached this barrier (the signature of
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.lnc.core_barrier.html)."""
    return core_sync.core_barrier("nki.lnc.core_barrier", data, cores, engine, name)


def sendrecv(src, dst, send_to_rank, recv_from_rank, dma_engine=_dma_engine.dma, name=None):
    """NKI 0.7's nisa.sendrecv without pipe_id, which 0.8 drops; not modeled."""
    core_sync.sendrecv("nki.lnc.sendrecv")


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(f"module 'nki.lnc' has no attribute {attr!r}")  # hasattr() probes
    raise not_modeled(f"nki.lnc.{attr}")
