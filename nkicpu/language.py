"""`nki.language` on the CPU: tensors, buffers, dtypes, tile sizes, loops, the SPMD queries, the
`nl.*` operator objects that `nisa` calls take as `op=`, and the experimental wrappers over `nisa`
(nl.load, nl.sum, nl.add(x, y), ...: nkicpu/language_wrappers.py).

Names, argument order and defaults follow the Neuron SDK 2.32 API stubs
(nki/api/nki/language/__init__.py). Python loops are unrolled, as in NKI 0.7+.
"""
import numpy as np

from . import isa as _nisa
from . import memory, versions
from .allocate import ndarray
from .errors import not_modeled
from .memory import DTYPES, MemoryRegion, is_hbm, is_on_chip, is_psum, is_sbuf
from .ops import OPS
from .run import current_run, running
from .tensor import DynamicSlice, NkiTensor
from .tiles import tile_size

# The API names imported from other modules:
__all__ = ["NkiTensor", "is_hbm", "is_on_chip", "is_psum", "is_sbuf", "ndarray", "tile_size", "broadcast_to", "empty_like", "load", "max", "min", "shared_constant", "shared_identity_matrix", "store",
           "sum"]

# -- buffers and dtypes ---------------------------------------------------------------------
sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
private_hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm
hbm = private_hbm  # documented alias

globals().update(DTYPES)
globals().update(OPS)


class NKIObject:
    """Base of the classes kernel code builds or takes (language guide, 'Class Support')."""


# -- allocation -----------------------------------------------------------------------------
def _filled(shape, dtype, buffer, name, value):
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    _nisa.memset(t, value if memory.is_float(np.dtype(dtype)) else int(value))
    return t


def zeros(shape, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, buffer, name, 0.0)


def ones(shape, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, buffer, name, 1.0)


def full(shape, fill_value, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, buffer, name, float(fill_value))


# -- indexing and loops ---------------------------------------------------------------------
def ds(start, size):
    return DynamicSlice(start, size)


def affine_range(start, stop=None, step=1):
    return range(start, stop, step) if stop is not None else range(start)


sequential_range = static_range = affine_range


# -- SPMD launch grid: kernel[n] (SDK nki/get-started/about/lnc.rst) --------------------------------
def _grid():
    """(program id, number of programs, grid rank) of the running kernel; (0, 1, 0) without a grid."""
    run = current_run("the SPMD queries") if running() else None
    if run is None or run.programs is None:
        return 0, 1, 0
    return run.core, run.programs, 1


def _axis(axis, where):
    if axis != 0:
        raise ValueError(f"{where}: a launch grid kernel[n] has one axis (0), got {axis!r}")


def program_id(axis=0):
    _axis(axis, "nl.program_id")
    return _grid()[0]


def num_programs(axes=0):
    _axis(axes, "nl.num_programs")
    return _grid()[1]


def program_ndim():
    return _grid()[2]


# The experimental wrappers over nisa. nl.copy stays the operator object above (activation
# op=nl.copy); calling it runs the wrapper. sum, max and min shadow the builtins in this module from
# here on, so they are imported last.
from .language_wrappers import (broadcast_to, empty_like, load, max, min, shared_constant,  # noqa: E402
                                shared_identity_matrix, store, sum)


def device_print(print_prefix, tensor):
    print(print_prefix, np.asarray(tensor.numpy()))


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(f"module 'nki.language' has no attribute {attr!r}")  # hasattr() probes
    if f"nl.{attr}" in versions.REMOVED:
        raise versions.removed(f"nl.{attr}")
    raise not_modeled(f"nki.language.{attr}")
