"""nkicpu: a CPU model of the NKI subset this project's kernels use, under NKI's own names.

`import kernels` registers this package as `nki` (with `nki.language`, `nki.isa`) where the Neuron
SDK is absent, so kernel files written for the SDK run here unchanged:

    nki.jit(kernel)                 a kernel; called inside a running kernel, it is inlined
    nki.simulate(kernel)(*arrays)   run on NumPy arrays, return NumPy outputs (a tuple for several)
    nkicpu.capture(kernel)(*arrays) the same run, plus the instruction record for the cost model
    kernel[2](*arrays)              an LNC launch grid: programs 0 and 1, one per physical NeuronCore,
                                    ordered by nisa.core_barrier (nki.lnc.core_barrier in NKI 0.8)

nkicpu models NKI 0.7 (Neuron 2.33), the newest release with published release notes; its
rules were checked against the Neuron SDK 2.32 API stubs and the 2.33 documentation. It runs NKI
0.8's nki.lnc.core_barrier, warns on the names 0.8 deprecates and names the replacement of those
0.7 and Neuron 2.34 removed (versions.py). Before a kernel runs, its source and that of every
function it reaches is checked against the Python subset NKI 0.6 compiles (subset.py).
"""
import inspect
import sys
from dataclasses import dataclass

import numpy as np

from . import isa, language, lnc
from .errors import NkiValidationError, not_modeled, rule_error
from .memory import MemoryRegion, check_dtype
from .run import Run, running
from .subset import check_kernel
from .tensor import NkiTensor
from .versions import CHECKED_AGAINST, NEURON_SDK_VERSION, NKI_VERSION, install_removed_neuronxcc

__all__ = ["jit", "simulate", "capture", "Capture", "install_as_nki", "language", "isa", "lnc",
           "NkiValidationError", "NKI_VERSION", "NEURON_SDK_VERSION", "CHECKED_AGAINST"]


# `nki.dtype`: the type of nl.float32, nl.bfloat16, ... (the NKI library annotates with it, e.g.
# LIB core/mlp/mlp_cte/mlp_cte_constants.py); nkicpu's dtypes are NumPy dtypes.
dtype = np.dtype

# LNC degrees of a trn2 launch grid kernel[n]: 1 or 2 physical cores (SDK
# nki/get-started/about/lnc.rst: "kernel[8]" is an error on the current architecture).
LNC_DEGREES = (1, 2)


class Kernel:
    """What `nki.jit` returns. Called from inside a running kernel, it is inlined like a helper;
    `kernel[n]` is the same kernel launched on an LNC grid of n programs (nl.program_id 0..n-1)."""

    def __init__(self, fn, programs=None):
        self.fn = fn
        self.programs = programs  # n of kernel[n]; None without a launch grid
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __getitem__(self, grid):
        if self.programs is not None:
            raise TypeError(f"{self.__name__}[{self.programs}] already has a launch grid")
        n = grid[0] if isinstance(grid, tuple) and len(grid) == 1 else grid
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n not in LNC_DEGREES:
            raise rule_error("lnc-grid", f"{self.__name__}[{grid!r}]",
                             f"a launch grid takes one number, the LNC degree: 1 or 2 on trn2, got {grid!r}")
        return Kernel(self.fn, programs=int(n))

    def __call__(self, *args, **kwargs):
        if running():
            if self.programs is not None:
                raise not_modeled(f"launching {self.__name__}[{self.programs}] from inside a running kernel")
            check_kernel(self.fn)  # a kernel passed in as an argument: reached only now
            return self.fn(*args, **kwargs)
        # Outside a kernel the SDK compiles and runs on a NeuronCore; here that is the CPU model.
        return simulate(self)(*args, **kwargs)


def jit(fn=None, **kwargs):
    # Since NKI 0.3.0 `mode=` is deprecated and ignored and `platform_target=` raises
    # (SDK release-notes/components/nki.rst 0.3.0; nki/migration/index.rst "nki.jit(platform_target=...)").
    kwargs.pop("mode", None)
    if "platform_target" in kwargs:
        raise rule_error("jit-options", "nki.jit", f"platform_target={kwargs['platform_target']!r} was removed in "
                                                   f"NKI 0.3.0; set NEURON_PLATFORM_TARGET_OVERRIDE instead (nkicpu "
                                                   f"models trn2)")
    if kwargs:
        raise not_modeled(f"nki.jit options {sorted(kwargs)}")
    if fn is None:
        return jit
    return fn if isinstance(fn, Kernel) else Kernel(fn)


@dataclass
class Capture:
    """A finished run: its outputs, every instruction it issued and the allocations they name.

    Allocation ids number a run's allocations from 1. `allocations` maps the id of each tensor the
    kernel allocated to its `AllocationInfo`; `arguments` maps each NumPy argument's position (or
    keyword) to the id of its HBM copy. The peaks are per partition; for a launch grid, `peak_*` is
    the largest over its cores (each core has its own SBUF and PSUM) and `*_per_core` lists them by
    program id."""
    outputs: object
    instructions: list
    allocations: dict
    arguments: dict
    peak_sbuf_bytes: int
    peak_psum_banks: int
    peak_sbuf_bytes_per_core: tuple
    peak_psum_banks_per_core: tuple


def _wrap_input(run, x, key, name, buffer):
    if not isinstance(x, np.ndarray):
        return x  # Python scalars, tuples, None, dataclasses pass through as compile-time constants
    alloc = run.argument(key, x, check_dtype(x.dtype, name), buffer)
    return NkiTensor.whole(alloc)


def _argument_names(fn, args, kwargs):
    """How messages name each argument, positional ones first: `<kernel> argument <parameter>`.
    A call that does not bind to the kernel's signature fails here, naming the kernel."""
    signature = inspect.signature(fn)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{fn.__name__}: {e}") from None
    positional = [p.name for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [f"{fn.__name__} argument {positional[i] if i < len(positional) else i}"
            for i in range(len(args))] + [f"{fn.__name__} argument {k}" for k in kwargs]


def _not_a_tensor(error, values, names):
    """The TypeError for a kernel that read a tensor attribute (.shape, .dtype, ...) of a
    non-array argument (None, a float, a tuple), naming it; None if the object is not an argument."""
    for value, name in zip(values, names):
        if value is error.obj and not isinstance(value, np.ndarray):
            return TypeError(f"{name}: expected a tensor (the kernel reads its .{error.name}), got "
                             f"{value!r}")
    return None


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _outputs(name, result, inputs):
    """A kernel's outputs as a tuple, each in shared HBM or a kernel argument it wrote (aliased: the
    NKI library's kernels return inputs they update, e.g. LIB core/qkv/qkv_cte.py's k_cache)."""
    outs = result if isinstance(result, tuple) else (result,)
    for j, o in enumerate(outs):
        if not isinstance(o, NkiTensor):
            raise TypeError(f"{name}: output {j} must be an NkiTensor, got {type(o).__name__}")
        if o.buffer is not MemoryRegion.shared_hbm and not any(o._alloc is t._alloc for t in inputs):
            raise rule_error("output-shared-hbm", name, f"output {j} ({o!r}) must be allocated with "
                                                        f"buffer=nl.shared_hbm or be a kernel argument")
    return outs


def _same_tensor(a, b):
    return a._alloc is b._alloc and (a.shape, a.strides, a.offset) == (b.shape, b.strides, b.offset)


def capture(kernel):
    fn = kernel.fn if isinstance(kernel, Kernel) else kernel
    programs = kernel.programs if isinstance(kernel, Kernel) else None

    def run(*args, **kwargs):
        check_kernel(fn)  # the Python subset NKI 0.6 compiles (nkicpu/subset.py)
        keyword_only = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
        if keyword_only:
            raise rule_error("kernel-arguments", fn.__name__, f"keyword-only parameters {keyword_only}: NKI kernel "
                                                              f"signatures may not use a `*` separator")
        # As in the SDK simulator, inputs live in HBM, shared by the programs of a grid (nki_simulator.rst).
        buffer = MemoryRegion.shared_hbm if programs and programs > 1 else MemoryRegion.private_hbm
        with Run(programs) as r:    # first: a nested simulate fails as such, whatever its arguments
            values = list(args) + list(kwargs.values())
            names = _argument_names(fn, args, kwargs)
            for a, name in zip(values, names):
                if _is_torch(a):
                    raise TypeError(f"{name} is a torch tensor; pass NumPy arrays (kernels.reference.to_numpy "
                                    f"converts)")
                if isinstance(a, list):
                    raise rule_error("kernel-arguments", name, f"expected an array or a tuple (NKI kernels take "
                                                               f"tuples, not lists), got a list of {len(a)} items")
            keys = list(range(len(args))) + list(kwargs)
            wrapped = [_wrap_input(r, a, key, name, buffer) for a, key, name in zip(values, keys, names)]
            kw = dict(zip(kwargs, wrapped[len(args):]))
            wrapped = wrapped[:len(args)]
            inputs = [w for w in wrapped + list(kw.values()) if isinstance(w, NkiTensor)]

            def program(core):  # one program of the grid; they run in turns (nkicpu/grid.py)
                try:
                    result = fn(*wrapped, **kw)
                except AttributeError as e:     # e.g. None.shape: name the argument, if it is one
                    named = _not_a_tensor(e, values, names)
                    if named is None:
                        raise
                    raise named from e
                r.end_program()
                return isinstance(result, tuple), _outputs(fn.__name__, result, inputs)

            results = r.run_programs(program)
            is_tuple, outs = results[0]
            for core, (t, o) in enumerate(results[1:], 1):
                if t != is_tuple or len(o) != len(outs) or not all(map(_same_tensor, o, outs)):
                    raise rule_error("lnc-outputs", fn.__name__, f"program {core} returns {list(o)}, program 0 "
                                                                 f"{list(outs)}: every program returns the same "
                                                                 f"tensors")
            arrays = tuple(np.array(o.numpy()) for o in outs)
            # As the SDK simulator does, a kernel that writes its inputs updates the caller's arrays.
            for a, w in zip(list(args) + list(kwargs.values()), wrapped + list(kw.values())):
                if isinstance(a, np.ndarray) and a.flags.writeable:
                    new = w._alloc.data.reshape(a.shape)
                    if a.tobytes() != new.tobytes():  # bitwise: a written -0.0 or NaN payload counts
                        a[...] = new
        sbuf = tuple(acc.peak_sbuf_bytes for acc in r.accountings)
        psum = tuple(acc.peak_psum_banks for acc in r.accountings)
        return Capture(outputs=arrays if is_tuple else arrays[0], instructions=r.instructions,
                       allocations=r.allocations, arguments=r.arguments, peak_sbuf_bytes=max(sbuf),
                       peak_psum_banks=max(psum), peak_sbuf_bytes_per_core=sbuf, peak_psum_banks_per_core=psum)

    return run


def simulate(kernel):
    def run(*args, **kwargs):
        return capture(kernel)(*args, **kwargs).outputs
    return run


def install_as_nki():
    """Register nkicpu under the names `nki`, `nki.language`, `nki.isa` and `nki.lnc`; an import of
    `neuronxcc.nki` (removed in Neuron 2.34), where no neuronxcc is installed, names its replacement."""
    module = sys.modules[__name__]
    sys.modules["nki"] = module
    sys.modules["nki.language"] = language
    sys.modules["nki.isa"] = isa
    sys.modules["nki.isa.constants"] = isa.constants
    sys.modules["nki.lnc"] = lnc
    install_removed_neuronxcc()
