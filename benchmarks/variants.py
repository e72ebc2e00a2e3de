"""What the sweep profiles: one entry per kernel variant, and the realistic inputs they all draw from.

A variant is a name, the kernel (as "module:function", imported when its row runs) and a function
that picks the kernel's arguments from a `GDNShape` and the dict `stage_inputs(shape)` returns.
The five stage kernels are registered here; a composition step (a fused kernel) is one more
`Variant(...)` in `VARIANTS`.

Each stage sees the intermediates a real decode step would give it: `stage_inputs` draws the block
inputs with `make_inputs` and runs the torch reference stage by stage, so conv1d gets in_proj's
output, the recurrence gets the GQA-repeated, conv-activated q, k, v, and so on.
"""
import importlib
from dataclasses import dataclass
from typing import Callable

from kernels.configs import GDNShape
from kernels.reference import (conv1d_decode_ref, gated_delta_rule_ref, gqa_repeat_ref, in_proj_ref,
                               make_inputs, to_numpy, to_torch)


@dataclass(frozen=True)
class Variant:
    name: str
    kernel: str                                   # "module:function" of an @nki.jit entry point
    args: Callable[[GDNShape, dict], tuple]       # (shape, stage_inputs(shape)) -> kernel arguments
    kind: str = "stage"                           # "stage" or, later, "composition"

    def load_kernel(self):
        module, _, function = self.kernel.partition(":")
        return getattr(importlib.import_module(module), function)


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
VARIANTS_BY_NAME = {v.name: v for v in VARIANTS}


def stage_inputs(shape: GDNShape, seed=0):
    """NumPy arrays by name: the 11 block inputs (`make_inputs`) and every stage's intermediates.

    Adds mixed_qkv, z, a, b (in_proj), conv_out (conv1d), q, k, v (GQA repeat) and o (the
    recurrence), computed by the torch reference. The reference's new states are dropped.
    """
    x = make_inputs(shape, seed=seed)
    t = {name: to_torch(x[name]) for name in ("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b",
                                               "conv_weight", "conv_state", "A_log", "dt_bias",
                                               "recurrent_state")}
    mixed_qkv, z, a, b = in_proj_ref(t["hidden"], t["W_in_qkv"], t["W_in_z"], t["W_in_a"], t["W_in_b"])
    conv_out, _ = conv1d_decode_ref(mixed_qkv, t["conv_weight"], t["conv_state"])
    q, k, v = gqa_repeat_ref(conv_out, shape.nk, shape.dk, shape.dv)
    o, _ = gated_delta_rule_ref(q, k, v, a, b, t["A_log"], t["dt_bias"], t["recurrent_state"])
    x.update({name: to_numpy(value) for name, value in
              dict(mixed_qkv=mixed_qkv, z=z, a=a, b=b, conv_out=conv_out, q=q, k=k, v=v, o=o).items()})
    return x
