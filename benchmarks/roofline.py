"""The block's roofline: the least HBM traffic one GDN decode step needs, over the cores' bandwidth.

A kernel's own roofline (`nkicpu.profile.Profile.roofline_us`) counts the bytes it moves, so a
kernel that reads something twice (a weight on both cores of an LNC=2 grid, an activation through
HBM scratch) raises its own roofline and looks closer to it. The block's roofline counts what any
version must move: every weight, input and state byte read once, every output and new state byte
written once. With T tokens per sequence (the verify step) the weights and the incoming states
are still read once; the activation rows are T times as many, and the verify form writes T
windows and states. The sweep, the latency tables and the composition chapters judge a step
against it on the step's cores, and its likely time also against the floor the likely estimate's
DMA rate puts under those bytes (`costs.DMA_ACHIEVED_GBPS`), so that kernel waste reads apart
from that fixed haircut. Every figure here is modeled (trn2 cost model).
"""
import numpy as np

from kernels.reference import block_input_specs, block_output_specs
from nkicpu import costs


def _bytes(specs):
    return sum(int(np.prod(dims)) * np.dtype(dtype).itemsize for dims, dtype in specs.values())


def block_min_bytes(shape, T=1, verify=False):
    """The block's minimal HBM bytes at a `GDNShape` with T tokens per sequence: its 11 inputs
    read once (T hidden rows per sequence), its 3 results written once (T output rows; the
    states after the last token, or with `verify` every token's). Shapes and dtypes:
    `kernels.reference.block_input_specs`, `block_output_specs`."""
    return _bytes(block_input_specs(shape, T)) + _bytes(block_output_specs(shape, T, verify))


def block_roofline_us(shape, cores=1, T=1, verify=False):
    """The block's minimal bytes at the peak HBM rate of `cores` NeuronCores, µs: no version of
    the block on those cores can be faster (`costs.HBM_ROOFLINE_GBPS` per core)."""
    return costs.roofline_us(block_min_bytes(shape, T, verify), cores)


def block_floor_us(shape, cores=1, T=1, verify=False):
    """The block's minimal bytes at the likely estimate's DMA rate of `cores` NeuronCores, µs:
    the least likely time any version can have (`costs.DMA_ACHIEVED_GBPS` per core)."""
    return costs.roofline_us(block_min_bytes(shape, T, verify), cores, costs.DMA_ACHIEVED_GBPS)


def layer_min_bytes(shape, T=1):
    """The whole layer's (gdn_layer_tkg's) minimal HBM bytes at a `GDNShape` with T tokens per
    sequence: the block's, every token's checkpoint kept (the pool form writes each), without the
    block's output rows (they stay on chip), with input_norm_weight [H] fp32 and W_out
    [value_dim, H] bf16 read once and the partial sum [B, T, H] fp32 written once."""
    s = shape
    out_rows = s.B * T * s.value_dim * 2
    return (block_min_bytes(s, T, verify=True) - out_rows + s.H * 4 + s.value_dim * s.H * 2
            + s.B * T * s.H * 4)


def layer_roofline_us(shape, cores=1, T=1):
    """The layer's minimal bytes at the peak HBM rate of `cores` NeuronCores, µs."""
    return costs.roofline_us(layer_min_bytes(shape, T), cores)
