"""NKI kernels of the Qwen3.5 gated delta-net decode step, stage by stage.

Importing this package makes `import nki` work: on a machine with the Neuron SDK it is the SDK's
`nki`; elsewhere it is `nkicpu`, this project's CPU model of the NKI subset the kernels use,
registered under the names `nki`, `nki.language` and `nki.isa`. Set NKICPU=1 to use `nkicpu`
even where the SDK is installed (to compare the two on a trn instance).
"""
import os

# Equal to pyproject.toml's version and below 0.1.7, the first release of Hugging Face's `kernels`:
# transformers reads it when it probes for the hub package and must reject it (README).
__version__ = "0.1.0"


def _install_nki():
    if os.environ.get("NKICPU", "0") != "1":
        try:
            import nki  # noqa: F401  the Neuron SDK (PyPI's placeholder `nki` raises ImportError)
            return "neuron-sdk"
        except ImportError:
            pass
    import nkicpu
    nkicpu.install_as_nki()
    return "nkicpu"


NKI_BACKEND = _install_nki()

from .gdn_block import gdn_block_tkg, gdn_block_tkg_pool, gdn_block_tkg_verify  # noqa: E402
from .gdn_layer import gdn_layer_tkg  # noqa: E402
from .pool_indices import check_pool_indices  # noqa: E402

__all__ = ["gdn_block_tkg", "gdn_block_tkg_verify", "gdn_block_tkg_pool", "gdn_layer_tkg",
           "check_pool_indices", "NKI_BACKEND"]
