"""nkicpu: a CPU model of the NKI subset this project's kernels use, under NKI's own names.

`import kernels` registers this package as `nki` (with `nki.language`, `nki.isa`) where the Neuron
SDK is absent, so kernel files written for the SDK run here unchanged:

    nki.jit(kernel)                 a kernel; called inside a running kernel, it is inlined
    nki.simulate(kernel)(*arrays)   run on NumPy arrays, return NumPy outputs (a tuple for several)
    nkicpu.capture(kernel)(*arrays) the same run, plus the instruction record for the cost model
"""
import inspect
import sys
from dataclasses import dataclass

import numpy as np

from . import isa, language
from .errors import NkiValidationError, not_modeled, rule_error
from .memory import Allocation, MemoryRegion, check_dtype
from .run import Run, running
from .tensor import NkiTensor

__all__ = ["jit", "simulate", "capture", "Capture", "install_as_nki", "language", "isa", "NkiValidationError"]


class Kernel:
    """What `nki.jit` returns. Called from inside a running kernel, it is inlined like a helper."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __getitem__(self, grid):
        raise not_modeled("SPMD / LNC launch grids (kernel[n]); nkicpu runs one program")

    def __call__(self, *args, **kwargs):
        if running():
            return self.fn(*args, **kwargs)
        # Outside a kernel the SDK compiles and runs on a NeuronCore; here that is the CPU model.
        return simulate(self)(*args, **kwargs)


def jit(fn=None, **kwargs):
    if kwargs:
        raise not_modeled(f"nki.jit options {sorted(kwargs)}")
    if fn is None:
        return jit
    return fn if isinstance(fn, Kernel) else Kernel(fn)


@dataclass
class Capture:
    """A finished run: its outputs, every instruction it issued and the allocations they name."""
    outputs: object
    instructions: list
    allocations: dict
    peak_sbuf_bytes: int
    peak_psum_banks: int


def _wrap_input(x, i):
    if not isinstance(x, np.ndarray):
        return x  # Python scalars, tuples, dataclasses pass through as compile-time constants
    dtype = check_dtype(x.dtype, f"kernel argument {i}")
    alloc = Allocation(x.shape or (1,), dtype, MemoryRegion.private_hbm, f"arg{i}", None)
    alloc.data[...] = x.reshape(-1)
    return NkiTensor(alloc, x.shape or (1,), language._row_major(x.shape or (1,)), 0)


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def capture(kernel):
    fn = kernel.fn if isinstance(kernel, Kernel) else kernel

    def run(*args, **kwargs):
        for i, a in enumerate(list(args) + list(kwargs.values())):
            if _is_torch(a):
                raise TypeError(f"nkicpu.simulate: argument {i} is a torch tensor; pass NumPy arrays "
                                f"(kernels.reference.to_numpy converts)")
            if isinstance(a, list):
                raise rule_error("kernel-arguments", fn.__name__, f"argument {i} is a list; NKI kernels take "
                                                                  f"tuples, not lists")
        keyword_only = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
        if keyword_only:
            raise rule_error("kernel-arguments", fn.__name__, f"keyword-only parameters {keyword_only}: NKI kernel "
                                                              f"signatures may not use a `*` separator")
        with Run() as r:
            wrapped = [_wrap_input(a, i) for i, a in enumerate(args)]
            kw = {k: _wrap_input(v, k) for k, v in kwargs.items()}
            result = fn(*wrapped, **kw)
            outs = result if isinstance(result, tuple) else (result,)
            for j, o in enumerate(outs):
                if not isinstance(o, NkiTensor):
                    raise TypeError(f"{fn.__name__}: output {j} must be an NkiTensor, got {type(o).__name__}")
                if o.buffer is not MemoryRegion.shared_hbm:
                    raise rule_error("output-shared-hbm", fn.__name__,
                                     f"output {j} ({o!r}) must be allocated with buffer=nl.shared_hbm")
            arrays = tuple(np.array(o.numpy()) for o in outs)
            # As the SDK simulator does, a kernel that writes its inputs updates the caller's arrays.
            for a, w in zip(list(args) + list(kwargs.values()), wrapped + list(kw.values())):
                if isinstance(a, np.ndarray) and a.flags.writeable:
                    new = w._alloc.data.reshape(a.shape)
                    if a.tobytes() != new.tobytes():  # bitwise: a written -0.0 or NaN payload counts
                        a[...] = new
        return Capture(outputs=arrays if isinstance(result, tuple) else arrays[0], instructions=r.instructions,
                       allocations=r.allocations, peak_sbuf_bytes=r.accounting.peak_sbuf_bytes,
                       peak_psum_banks=r.accounting.peak_psum_banks)

    return run


def simulate(kernel):
    def run(*args, **kwargs):
        return capture(kernel)(*args, **kwargs).outputs
    return run


def install_as_nki():
    """Register nkicpu under the names `nki`, `nki.language` and `nki.isa`."""
    module = sys.modules[__name__]
    sys.modules["nki"] = module
    sys.modules["nki.language"] = language
    sys.modules["nki.isa"] = isa
