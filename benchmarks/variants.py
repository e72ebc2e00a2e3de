"""What the sweep profiles: one entry per kernel variant, and the realistic inputs they all draw from.

A variant is a name, the kernel (as "module:function", imported when its row runs) and a function
that picks the kernel's arguments from a `GDNShape` and the dict
`kernels.reference.pipeline_inputs(shape)` returns; or, for a composition step that is several
launches from the host (kernels.steps), the names of the variants it launches one after another.
The five stage kernels come first, then the composition steps in the book's order.

Each stage sees the intermediates a real decode step would give it: `pipeline_inputs` draws the
block inputs with `make_inputs` and runs the torch reference stage by stage, so conv1d gets in_proj's
output, the recurrence gets the GQA-repeated, conv-activated q, k, v, and so on.
"""
import importlib
from dataclasses import dataclass
from typing import Callable

from kernels.configs import GDNShape


@dataclass(frozen=True)
class Variant:
    name: str
    kernel: str                                   # "module:function" of an @nki.jit entry point
    args: Callable[[GDNShape, dict], tuple]       # (shape, pipeline_inputs(shape)) -> kernel arguments
    kind: str = "stage"                           # "stage" or "composition"
    launches: tuple = ()                          # a host pipeline: the variants it runs, in order
    lnc: int = 1                                  # launch grid: kernel[lnc], programs on lnc NeuronCores

    def load_kernel(self):
        module, _, function = self.kernel.partition(":")
        kernel = getattr(importlib.import_module(module), function)
        return kernel[self.lnc] if self.lnc > 1 else kernel


def _pick(*names):
    return lambda shape, x: tuple(x[n] for n in names)


VARIANTS = [
    Variant("in_proj", "kernels.in_proj:in_proj_kernel",
            _pick("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b")),
    Variant("conv1d_decode", "kernels.conv1d_decode:conv1d_decode_kernel",
            _pick("mixed_qkv", "conv_weight", "conv_state")),
    Variant("gqa_repeat", "kernels.gqa_repeat:gqa_repeat_kernel",
            lambda s, x: (x["conv_out"], s.nk, s.dk, s.dv)),
    Variant("gated_delta_rule", "kernels.gated_delta_rule:gated_delta_rule_kernel",
            _pick("q", "k", "v", "a", "b", "A_log", "dt_bias", "recurrent_state")),
    Variant("rmsnorm_gated", "kernels.rmsnorm_gated:rmsnorm_gated_kernel",
            _pick("o", "z", "norm_weight")),
]
BLOCK_ARGS = _pick("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b", "conv_weight", "conv_state", "A_log",
                   "dt_bias", "norm_weight", "recurrent_state")
STAGES = tuple(v.name for v in VARIANTS)


def _composition(name, kernel):
    return Variant(name, kernel, BLOCK_ARGS, kind="composition")


# The composition steps of the book (book/composition.ipynb), each the whole decode step.
VARIANTS += [
    Variant("gdn_tkg", "kernels.gdn_tkg:gdn_tkg",
            _pick("q", "k", "v", "a", "b", "z", "A_log", "dt_bias", "norm_weight", "recurrent_state"),
            kind="composition"),
    Variant("0_staged", "kernels.steps:gdn_block_staged", BLOCK_ARGS, kind="composition", launches=STAGES),
    Variant("1_staged_tkg", "kernels.steps:gdn_block_staged_tkg", BLOCK_ARGS, kind="composition",
            launches=STAGES[:3] + ("gdn_tkg",)),
    _composition("2_scratch", "kernels.steps:gdn_block_tkg_scratch"),
    _composition("3_onchip", "kernels.steps:gdn_block_tkg_onchip"),
    _composition("4_gqa_index", "kernels.steps:gdn_block_tkg_gqa_index"),
    _composition("5_fused", "kernels.gdn_block:gdn_block_tkg"),
    Variant("6_lnc2", "kernels.gdn_block:gdn_block_tkg", BLOCK_ARGS, kind="composition", lnc=2),
]
VARIANTS_BY_NAME = {v.name: v for v in VARIANTS}
