"""Every kernel the book builds, in one list: the stages, `gdn_tkg`, the composition steps, the
verify form of the last (every token's window and state) and the last on two NeuronCores.

Host code. The sweep, the trn runner, the tests and the book read this list instead of keeping
their own. An entry names its kernel and its torch reference as "module:function" (imported when
used, so this module needs no torch and loads no kernel), the arguments it takes (names of
`kernels.reference.pipeline_inputs` entries, or of `GDNShape` fields for the int arguments of
gqa_repeat), each output with the accuracy rule it is held to (`kernels.accuracy`), and how many
tokens per sequence it takes (hidden [B, T, H] with T <= max_tokens).
"""
import importlib
from dataclasses import dataclass

from .accuracy import CONV_STATE, EXACT, OUTPUT, STATE
from .gdn_block_checks import MAX_TOKENS

# The fused kernel's arguments, in signature order.
BLOCK_ARGS = ("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b", "conv_weight", "conv_state",
              "A_log", "dt_bias", "norm_weight", "recurrent_state")
BLOCK_OUTPUTS = (("out", OUTPUT), ("new_conv_state", CONV_STATE), ("new_recurrent_state", STATE))
# The verify form's: every token's window and state. Past the first token a window's older columns
# are projections too (rounded by a GEMM over B * T rows), so the windows take the output rule.
VERIFY_OUTPUTS = (("out", OUTPUT), ("conv_states", OUTPUT), ("recurrent_states", STATE))


def _load(target):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Entry:
    name: str
    kernel: str                 # "module:function": @nki.jit kernel, or host code launching several
    reference: str              # "module:function" of the torch reference, same arguments
    args: tuple                 # argument names, in order
    outputs: tuple              # ((name, accuracy rule), ...) in return order
    what: str                   # one line: what it is, or what the step changed
    step: int = None            # composition step number; None for a stage, gdn_tkg and verify
    launches: tuple = ()        # a host pipeline: the entries it launches, in order
    lnc: int = 1                # launch grid: kernel[lnc], programs on lnc NeuronCores
    max_tokens: int = 1         # tokens per sequence it takes: hidden [B, T, H], T <= max_tokens

    @property
    def kind(self):
        return "stage" if self.name in STAGES else "composition"

    def load_kernel(self):
        kernel = _load(self.kernel)
        return kernel[self.lnc] if self.lnc > 1 else kernel

    def load_reference(self):
        return _load(self.reference)

    def arguments(self, shape, inputs):
        """The kernel's arguments for a `GDNShape` and its `pipeline_inputs(shape)` dict."""
        return tuple(inputs[n] if n in inputs else getattr(shape, n) for n in self.args)


def _step(step, name, kernel, what, **kw):
    return Entry(name, kernel, "kernels.reference:gdn_block_tkg_ref", BLOCK_ARGS, BLOCK_OUTPUTS,
                 what, step=step, **kw)


_STAGE_ENTRIES = (
    Entry("in_proj", "kernels.in_proj:in_proj_kernel", "kernels.reference:in_proj_ref",
          ("hidden", "W_in_qkv", "W_in_z", "W_in_a", "W_in_b"),
          (("mixed_qkv", OUTPUT), ("z", OUTPUT), ("a", OUTPUT), ("b", OUTPUT)),
          "stage 1: the four input projections"),
    Entry("conv1d_decode", "kernels.conv1d_decode:conv1d_decode_kernel",
          "kernels.reference:conv1d_decode_ref", ("mixed_qkv", "conv_weight", "conv_state"),
          (("conv_out", OUTPUT), ("new_conv_state", EXACT)),
          "stage 2: causal conv1d decode step, SiLU, window slide"),
    Entry("gqa_repeat", "kernels.gqa_repeat:gqa_repeat_kernel", "kernels.reference:gqa_repeat_ref",
          ("conv_out", "nk", "dk", "dv"), (("q", EXACT), ("k", EXACT), ("v", EXACT)),
          "stage 3: split q, k, v and repeat q, k to the value heads"),
    Entry("gated_delta_rule", "kernels.gated_delta_rule:gated_delta_rule_kernel",
          "kernels.reference:gated_delta_rule_ref",
          ("q", "k", "v", "a", "b", "A_log", "dt_bias", "recurrent_state"),
          (("o", OUTPUT), ("new_state", STATE)),
          "stage 4: gates, l2norm and the gated delta rule"),
    Entry("rmsnorm_gated", "kernels.rmsnorm_gated:rmsnorm_gated_kernel",
          "kernels.reference:rmsnorm_gated_ref", ("o", "z", "norm_weight"), (("out", OUTPUT),),
          "stage 5: RMSNormGated"),
)
STAGES = tuple(e.name for e in _STAGE_ENTRIES)

ENTRIES = _STAGE_ENTRIES + (
    Entry("gdn_tkg", "kernels.gdn_tkg:gdn_tkg", "kernels.reference:gdn_tkg_ref",
          ("q", "k", "v", "a", "b", "z", "A_log", "dt_bias", "norm_weight", "recurrent_state"),
          (("out", OUTPUT), ("new_state", STATE)), "stages 4 and 5 in one kernel"),
    _step(0, "0_staged", "kernels.steps:gdn_block_staged",
          "five stage kernels, activations through HBM", launches=STAGES),
    _step(1, "1_staged_tkg", "kernels.steps:gdn_block_staged_tkg", "stages 4 and 5 fused: gdn_tkg",
          launches=STAGES[:3] + ("gdn_tkg",)),
    _step(2, "2_scratch", "kernels.steps:gdn_block_tkg_scratch",
          "one kernel, HBM scratch between stages"),
    _step(3, "3_onchip", "kernels.steps:gdn_block_tkg_onchip", "intermediates stay on chip"),
    _step(4, "4_gqa_index", "kernels.steps:gdn_block_tkg_gqa_index",
          "GQA by indexing, no copy"),
    _step(5, "5_fused", "kernels.steps:gdn_block_tkg_z_queued",
          "z after the recurrence when its weights outweigh the state: "
          "they stream under the compute"),
    _step(6, "6_lnc2", "kernels.steps:gdn_block_tkg_whole_qk",
          "heads split across the two NeuronCores of an LNC=2 launch", lnc=2),
    _step(7, "7_qk_slices", "kernels.steps:gdn_block_tkg_z_queued",
          "each core projects only its own key heads' q | k columns, where the runs stream well",
          lnc=2),
    _step(8, "8_z_early", "kernels.steps:gdn_block_tkg_z_early",
          "z's weight DMAs issued inside the recurrence, ahead of its state stores"),
    _step(9, "9_loads_first", "kernels.steps:gdn_block_tkg_loads_first",
          "the small inputs loaded ahead of the weights, the conv windows turned while they "
          "stream"),
    _step(10, "10_queue_roles", "kernels.steps:gdn_block_tkg_queue_roles",
          "z last: every weight on one queue in TensorE's order, z's matmuls as its chunks land"),
    _step(11, "11_off_path", "kernels.steps:gdn_block_tkg_off_path",
          "small work off the critical path: a and b in one matmul per row tile; the gates, "
          "window stores, z's matmuls and the norm's rsqrt moved"),
    _step(12, "12_ready_first", "kernels.gdn_block:gdn_block_tkg",
          "ready work first in each engine's order: z's evictions after the conv, q and k in one "
          "matmul per row tile, the head parameters ahead, one-bank sums evicted by block",
          max_tokens=MAX_TOKENS),
    Entry("verify", "kernels.gdn_block:gdn_block_tkg_verify",
          "kernels.reference:gdn_block_tkg_verify_ref", BLOCK_ARGS, VERIFY_OUTPUTS,
          "step 12 keeping every token's window and state: speculative decoding's verify step",
          max_tokens=MAX_TOKENS),
    Entry("lnc2", "kernels.gdn_block:gdn_block_tkg", "kernels.reference:gdn_block_tkg_ref",
          BLOCK_ARGS, BLOCK_OUTPUTS,
          "step 12 launched on an LNC=2 grid: its value heads split between two NeuronCores",
          lnc=2, max_tokens=MAX_TOKENS),
)
BY_NAME = {e.name: e for e in ENTRIES}
STEPS = tuple(e for e in ENTRIES if e.step is not None)
