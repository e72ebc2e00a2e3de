"""Every kernel the book builds, in one list: the stages, `gdn_tkg`, the composition steps (steps 6
and 7 also on two NeuronCores), the verify form of the last (every token's window and state) and
its pool form (states read and written in place by slot, one core and two).

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
# What the block's DMAs carry, for timelines (nkicpu.profile.dma_kinds): by argument position
# (BLOCK_ARGS) and by output name (the pool form's: the argument it writes in place); the other
# reads are small loads, the other writes stores.
BLOCK_DMA_KINDS = {"arguments": {1: "weights", 3: "weights", 4: "weights", 2: "z's weights",
                                 10: "state"},
                   "outputs": {"new_recurrent_state": "state"},
                   "pool_outputs": {10: "state"}}     # the pool form writes its state pool
# The verify form's: every token's window and state. Past the first token a window's older columns
# are projections too (rounded by a GEMM over B * T rows), so the windows take the output rule.
VERIFY_OUTPUTS = (("out", OUTPUT), ("conv_states", OUTPUT), ("recurrent_states", STATE))
# The pool form's: the states are pools, read and written in place by slot.
POOL_ARGS = (BLOCK_ARGS[:6] + ("conv_state_pool",) + BLOCK_ARGS[7:10]
             + ("recurrent_state_pool", "read_indices", "write_indices"))
POOL_OUTPUTS = (("out", OUTPUT), ("conv_state_pool", OUTPUT), ("recurrent_state_pool", STATE))
# The whole layer's (gdn_layer_tkg): the pool form's arguments with the input norm's weight after
# hidden and W_out before the indices; this rank's fp32 out_proj partial sum instead of out.
LAYER_ARGS = (("hidden", "input_norm_weight") + POOL_ARGS[1:11]
              + ("W_out", "read_indices", "write_indices"))
LAYER_OUTPUTS = (("partial", OUTPUT),) + POOL_OUTPUTS[1:]
LAYER_DMA_KINDS = {"arguments": {2: "weights", 4: "weights", 5: "weights", 3: "z's weights",
                                 11: "state", 12: "out_proj's weights"},
                   "outputs": {11: "state"}}      # the state pool, written in place


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
        """The kernel's arguments for a `GDNShape` and its `pipeline_inputs(shape)` dict (the pool
        form's pools and indices from its states: reference.pool_inputs; the layer's weights:
        reference.layer_inputs)."""
        from .reference import layer_inputs, pool_inputs     # here: the registry loads no torch
        if "read_indices" in self.args and "read_indices" not in inputs:
            inputs = pool_inputs(inputs)
        if "W_out" in self.args and "W_out" not in inputs:
            inputs = layer_inputs(inputs)
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
    _step(0, "0_staged", "kernels.steps.staged:gdn_block_staged",
          "five launches: the stage kernels, activations through HBM", launches=STAGES),
    _step(1, "1_staged_tkg", "kernels.steps.staged:gdn_block_staged_tkg",
          "stages 4 and 5 fused: gdn_tkg, four launches", launches=STAGES[:3] + ("gdn_tkg",)),
    _step(2, "2_scratch", "kernels.steps.scratch:gdn_block_tkg_scratch",
          "one kernel: HBM scratch between the stages"),
    _step(3, "3_onchip", "kernels.steps.onchip:gdn_block_tkg_onchip",
          "intermediates on chip: every activation in SBUF, GQA by indexing"),
    _step(4, "4_z_last", "kernels.steps.z_last:gdn_block_tkg_z_last",
          "z after the recurrence: where its weights outweigh the state, they stream under it"),
    _step(5, "5_two_cores", "kernels.steps.two_cores:gdn_block_tkg_two_cores",
          "two cores: the value heads split over the NeuronCores of an LNC=2 launch", lnc=2),
    _step(6, "6_queues", "kernels.steps.queues:gdn_block_tkg_queues",
          "DMA queues in issue order: z's weights ahead of the state stores, every weight on one "
          "queue in TensorE's order"),
    _step(6, "6_queues_lnc2", "kernels.steps.queues:gdn_block_tkg_queues",
          "DMA queues in issue order: step 6 on two NeuronCores", lnc=2),
    _step(7, "7_ready_first", "kernels.gdn_block:gdn_block_tkg",
          "ready work first: the small inputs and windows ahead, a | b and the gates first, z's "
          "sums held where they would block", max_tokens=MAX_TOKENS),
    _step(7, "7_ready_first_lnc2", "kernels.gdn_block:gdn_block_tkg",
          "ready work first: the shipped kernel on two NeuronCores", lnc=2,
          max_tokens=MAX_TOKENS),
    Entry("verify", "kernels.gdn_block:gdn_block_tkg_verify",
          "kernels.reference:gdn_block_tkg_verify_ref", BLOCK_ARGS, VERIFY_OUTPUTS,
          "the shipped kernel keeping every token's window and state: speculative decoding's "
          "verify step", max_tokens=MAX_TOKENS),
    Entry("pool", "kernels.gdn_block:gdn_block_tkg_pool", "kernels.reference:gdn_block_tkg_pool_ref",
          POOL_ARGS, POOL_OUTPUTS, "the shipped kernel on persistent state pools, read and "
          "written in place by slot: the serving form", max_tokens=MAX_TOKENS),
    Entry("pool_lnc2", "kernels.gdn_block:gdn_block_tkg_pool",
          "kernels.reference:gdn_block_tkg_pool_ref", POOL_ARGS, POOL_OUTPUTS,
          "the serving form on two NeuronCores", lnc=2, max_tokens=MAX_TOKENS),
    Entry("layer", "kernels.gdn_layer:gdn_layer_tkg", "kernels.reference:gdn_layer_tkg_ref",
          LAYER_ARGS, LAYER_OUTPUTS, "the whole layer in one launch: input RMSNorm, the serving "
          "form, out_proj (this rank's partial sum)", max_tokens=MAX_TOKENS),
    Entry("layer_lnc2", "kernels.gdn_layer:gdn_layer_tkg", "kernels.reference:gdn_layer_tkg_ref",
          LAYER_ARGS, LAYER_OUTPUTS, "the whole layer on two NeuronCores, their out_proj sums "
          "added through shared HBM", lnc=2, max_tokens=MAX_TOKENS),
)
BY_NAME = {e.name: e for e in ENTRIES}
STEPS = tuple(e for e in ENTRIES if e.step is not None)
# The composition ladder before the rebuild around one idea per step: each old sweep key and the
# entry that now holds its idea (written into the sweep's JSON metadata).
RENAMED = {"0_staged": "0_staged", "1_staged_tkg": "1_staged_tkg", "2_scratch": "2_scratch",
           "3_onchip": "3_onchip", "4_gqa_index": "3_onchip", "5_fused": "4_z_last",
           "6_lnc2": "5_two_cores", "7_qk_slices": "5_two_cores", "8_z_early": "6_queues",
           "9_loads_first": "7_ready_first", "10_queue_roles": "6_queues",
           "11_off_path": "7_ready_first", "12_ready_first": "7_ready_first",
           "lnc2": "7_ready_first_lnc2", "verify": "verify"}
