"""The NKI version nkicpu models, the sources its rules were checked against, and what it does
with the names NKI 0.8 deprecates and those that NKI 0.7 and Neuron 2.34 remove.

nkicpu targets NKI 0.7 (Neuron 2.33), the newest release with published release notes
(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/release-notes/components/nki.html).
Its signatures and rules were checked against the Neuron SDK 2.32 API stubs (NKI 0.6,
nki/api/nki/*/__init__.py in aws-neuron/aws-neuron-sdk) and the 2.33 pages; where 0.7 changed a
name kernels meet, nkicpu follows 0.7:

- 0.7 removes `nl.dynamic_range` (use `nl.fori_loop` / `nl.while_loop`, or a Python `range`,
  unrolled) (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/migration/index.html);
- 0.7 checks a kernel's LNC against the compiler's: a kernel launches on two cores as
  `kernel[2]` or with NEURON_LOGICAL_NC_CONFIG=2; 0.7 says the bracket "is being deprecated"
  (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/compiler/error-codes/EVRF066.html).
  nkicpu takes `kernel[2]`, the form the simulator runs (nki.simulate(kernel[2])).

NKI 0.8 (Neuron 2.34) deprecates `nki.isa.sendrecv`, `nki.isa.core_barrier` (now in `nki.lnc`),
the `register_*` calls and `VirtualRegister` (now `scalar_load` / `scalar_store` and `NkiScalar`)
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/announcements/neuron2.x/
announce-intent-eos-nki-virtualregister-lnc-apis.html), and Neuron 2.34 removes the `neuronxcc.nki`
namespace, a compile error inside kernels since NKI 0.4
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/_sources/about-neuron/announcements/
neuron2.x/announce-removal-neuronxcc-nki-2-34.rst). nkicpu runs `nki.lnc.core_barrier`, refuses
`nki.lnc.sendrecv` as it refuses `nki.isa.sendrecv` (not modeled), warns (NkiDeprecationWarning)
on the deprecated names and raises an error naming the replacement for the removed ones.
"""
import importlib.abc
import importlib.util
import sys
import warnings

from .errors import NkiDeprecationWarning

NKI_VERSION = "0.7"
NEURON_SDK_VERSION = "2.33"
CHECKED_AGAINST = "the Neuron SDK 2.32 API stubs (NKI 0.6) and the Neuron 2.33 documentation (NKI 0.7)"

# Names NKI 0.8 deprecates: what to use instead.
DEPRECATED_0_8 = {
    "nisa.core_barrier": "nki.lnc.core_barrier",
    "nisa.sendrecv": "nki.lnc.sendrecv (without pipe_id)",
    "nisa.register_alloc": "nisa.scalar_load / nisa.scalar_store (NkiScalar)",
    "nisa.register_move": "nisa.scalar_load / nisa.scalar_store (NkiScalar)",
    "nisa.register_load": "nisa.scalar_load (NkiScalar)",
    "nisa.register_store": "nisa.scalar_store",
    "nisa.VirtualRegister": "nisa.NkiScalar (from nisa.scalar_load)",
}

# Names that are gone: what to use instead.
REMOVED = {
    "nl.dynamic_range": ("NKI 0.7", "nl.fori_loop or nl.while_loop for a loop on the device (not modeled "
                                    "by nkicpu), or a Python range, unrolled"),
    "neuronxcc.nki": ("Neuron 2.34 (a compile error inside kernels since NKI 0.4)",
                      "import nki, nki.language as nl, nki.isa as nisa"),
}


def deprecated(name):
    """Warn that NKI 0.8 deprecates `name` (a key of DEPRECATED_0_8), naming its replacement."""
    warnings.warn(NkiDeprecationWarning(f"{name} is deprecated in NKI 0.8 (Neuron 2.34): use "
                                        f"{DEPRECATED_0_8[name]}; nkicpu models NKI {NKI_VERSION}, where "
                                        f"{name} is still the documented name"), stacklevel=3)


def removed(name, error=AttributeError):
    """The error for a removed name (a key of REMOVED), naming its replacement."""
    when, instead = REMOVED[name]
    return error(f"{name} was removed in {when}: use {instead}")


class RemovedNeuronxccNki(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: `import neuronxcc.nki` (or `neuronxcc`) where no neuronxcc is
    installed fails with the replacement named instead of a bare ModuleNotFoundError. A probe,
    importlib.util.find_spec("neuronxcc"), still gets None: the finder answers import statements
    only."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "neuronxcc" and not fullname.startswith("neuronxcc.nki"):
            return None
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is importlib.util.find_spec.__code__:
                return None
            frame = frame.f_back
        raise removed("neuronxcc.nki", lambda message: ModuleNotFoundError(
            f"no module named {fullname!r} here; {message}", name=fullname))


def install_removed_neuronxcc():
    if not any(isinstance(f, RemovedNeuronxccNki) for f in sys.meta_path):
        sys.meta_path.append(RemovedNeuronxccNki())
