"""`nki.language` on the CPU: tensors, buffers, dtypes, tile sizes, loops, the SPMD queries, the
`nl.*` operator objects that `nisa` calls take as `op=`, and the experimental wrappers over `nisa`
(nl.load, nl.sum, nl.add(x, y), ...: nkicpu/language_wrappers.py).

Names, argument order and defaults follow the Neuron SDK 2.32 API stubs
(nki/api/nki/language/__init__.py). Python loops are unrolled, as in NKI 0.7+.
"""
import numpy as np

from . import memory
from .errors import not_modeled, rule_error
from .memory import DTYPES, PMAX, MemoryRegion, check_dtype, is_hbm, is_on_chip, is_psum, is_sbuf
from .ops import OPS
from .run import current_run, running
from .tensor import DynamicSlice, NkiTensor

__all__ = ["NkiTensor", "is_hbm", "is_on_chip", "is_psum", "is_sbuf",   # the API names imported from other modules
           "broadcast_to", "empty_like", "load", "max", "min", "shared_constant", "shared_identity_matrix", "store",
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


class _TileSize:
    """trn2 tile-size constants (the SDK 2.32 stub's nl.tile_size): the home of the TensorE and
    VectorE limits; the memory sizes come from `nkicpu.memory`."""
    pmax = PMAX
    psum_bank_fmax_bytes = memory.PSUM_BANK_BYTES
    psum_bank_fmax = psum_fmax = memory.PSUM_BANK_BYTES // 4   # fp32 elements in one bank
    psum_num_banks = memory.PSUM_NUM_BANKS
    gemm_stationary_fmax = 128                                 # the PE array's columns
    gemm_moving_fmax = psum_bank_fmax                          # a matmul's output row fills one bank
    bn_stats_fmax = 512
    sbuf_size_bytes = PMAX * memory.SBUF_PARTITION_BYTES
    sbuf_fmax_bytes = memory.SBUF_PARTITION_BYTES
    sbuf_fmax = memory.SBUF_PARTITION_BYTES // 4
    # "Usable SBUF free dimension per partition" (the tile_size docs): what is left for a kernel
    # after the runtime's reserved region, the figure nkicpu's sbuf-capacity rule holds kernels to.
    total_available_sbuf_size = memory.SBUF_USABLE_BYTES
    # Byte alignment of a free-dim address: the values the NKI front end's tracer binds for every
    # NeuronCore generation (github.com/leanprover/KLR, KLR/Trace.lean `kernelEnv`, at 1ca4ae0);
    # PSUM's 4 is its 4-byte word (isa.py, _psum_whole_words).
    psum_min_align = 4
    sbuf_min_align = 1


tile_size = _TileSize()


# -- allocation -----------------------------------------------------------------------------
def ndarray(shape, dtype, buffer=sbuf, name="", address=None):
    where = f"nl.ndarray({name or 'unnamed'})"
    if address is not None:
        raise not_modeled("manual placement (address=)")
    if not isinstance(buffer, MemoryRegion):
        raise TypeError(f"{where}: buffer must be nl.sbuf, nl.psum, nl.hbm, nl.private_hbm or nl.shared_hbm, got {buffer!r}")
    shape = tuple(shape)
    if not shape or any(not isinstance(s, (int, np.integer)) or s < 1 for s in shape):
        raise ValueError(f"{where}: shape must be a tuple of positive ints, got {shape}")
    dt = check_dtype(dtype, where)
    if is_on_chip(buffer) and shape[0] > PMAX:
        raise rule_error("partition-dim", where, f"the partition dim (shape[0]) of a tensor in {buffer.name} must be "
                                                 f"<= {PMAX}, got {shape[0]}")
    alloc = current_run("nl.ndarray").allocate(shape, dt, buffer, name)
    return NkiTensor.whole(alloc)


def _filled(shape, dtype, buffer, name, value):
    from . import isa
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    isa.memset(t, value if memory.is_float(np.dtype(dtype)) else int(value))
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


# The experimental wrappers over nisa (imported last: language_wrappers reaches back into this module).
# nl.copy stays the operator object above (activation op=nl.copy); calling it runs the wrapper.
# sum, max and min shadow the builtins in this module from here on.
from .language_wrappers import (broadcast_to, empty_like, load, max, min, shared_constant,  # noqa: E402
                                shared_identity_matrix, store, sum)


def device_print(print_prefix, tensor):
    print(print_prefix, np.asarray(tensor.numpy()))


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(f"module 'nki.language' has no attribute {attr!r}")  # hasattr() probes
    raise not_modeled(f"nki.language.{attr}")
