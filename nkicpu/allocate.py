"""`nl.ndarray`: a new tensor in a buffer of the running kernel, the one allocation every other
creator (nl.zeros, the nl wrappers' result tiles) goes through.
"""
import numpy as np

from .errors import not_modeled, rule_error
from .memory import PMAX, MemoryRegion, check_dtype, is_on_chip
from .run import current_run
from .tensor import NkiTensor

sbuf = MemoryRegion.sbuf


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
