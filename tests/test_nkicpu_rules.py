"""Every hardware rule nkicpu enforces, each against a small kernel that breaks it.

A broken rule raises NkiValidationError("[rule-name] nisa.call: what and why"); each case matches
the rule's name and the key words of its message. `test_every_enforced_rule_has_a_case` reads the
rule names out of nkicpu's source, so a new rule without a test here fails the suite.

Also here: capacity is counted over live allocations, uninitialised memory reads back as NaN /
the int sentinel, unmodeled arguments raise NotImplementedError, torch tensors a clear TypeError.
"""
import pathlib
import re
import sys

import numpy as np
import pytest

import nkicpu
from nkicpu.errors import ActivationRangeWarning
from nkicpu_testing import F32, hbm, load, nisa, nki, NkiValidationError, nl, ps, sb, store
from test_nkicpu_isa_api import CASES as ISA_API_CASES
from test_nkicpu_subset import CASES as SUBSET_CASES

SBUF_BYTES = nkicpu.memory.SBUF_USABLE_BYTES  # per partition, trn2: 224 KiB less the runtime's reserve
PSUM_BANK_F32 = nl.tile_size.psum_bank_fmax  # fp32 elements per partition in one 2 KiB bank


def mm(dst=None, s=None, m=None, **kw):
    """nc_matmul with legal defaults for whatever a case does not set: K=32, M=8, N=16."""
    nisa.nc_matmul(dst=ps(8, 16) if dst is None else dst, stationary=sb(32, 8) if s is None else s,
                   moving=sb(32, 16) if m is None else m, **kw)


def _accumulate_after_memset():
    p = ps(8, 16)
    nisa.memset(dst=p, value=0.0)
    mm(dst=p, accumulate=True)


def _keep_all_live(n, shape, buffer):
    tiles = []
    for _ in range(n):
        tiles.append(nl.ndarray(shape, nl.float32, buffer=buffer))


def _two_live_tiles_overflow_sbuf():
    half = SBUF_BYTES // 4 // 2 + 1   # fp32 elements: each tile a bit over half a partition
    a = sb(128, half)
    b = sb(128, half)  # noqa: F841


def filled(shape, value, dtype=nl.float32, buffer=nl.sbuf):
    """A tile holding `value` everywhere (inputs of the activation-range and legal cases)."""
    t = nl.ndarray(shape, dtype, buffer=buffer)
    nisa.memset(dst=t, value=value)
    return t


CASES = [
    # (rule, key words of the message, a kernel body that breaks it)
    ("partition-dim", r"partition dim .*<= 128, got 129", lambda: sb(129, 4)),
    ("partition-dim", r"partition dim \(shape\[0\]\) of a tensor in psum must be <= 128, got 256", lambda: ps(256, 2)),
    ("on-chip-operand", r"src must be in SBUF or PSUM, got shared_hbm",
     lambda: nisa.tensor_copy(dst=sb(4, 4), src=hbm(4, 4))),
    ("partition-contiguous", r"src must address consecutive partitions",
     lambda: nisa.tensor_copy(dst=sb(4, 4), src=sb(8, 4)[0:8:2, :])),
    ("dst-broadcast", r"stride-0 \(broadcast\) dim",
     lambda: nisa.tensor_copy(dst=sb(4, 1).broadcast(1, 4), src=sb(4, 4))),
    ("dst-broadcast", r"stride-0 \(broadcast\) dim",
     lambda: nisa.dma_copy(dst=hbm(1, 4).ap([[0, 4], [1, 4]]), src=sb(4, 4))),
    ("operand-shape", r"dst and src must have the same partitions and elements per partition.*4x5",
     lambda: nisa.tensor_copy(dst=sb(4, 4), src=sb(4, 5))),
    ("operand-shape", r"data1 and data2 must have the same partitions",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=sb(8, 4), data2=sb(4, 4), op=nl.add)),
    ("operand-shape", r"dst must be \[6, 4\]",
     lambda: nisa.nc_transpose(dst=sb(4, 6), data=sb(4, 6), engine=nisa.engine.vector)),
    ("operand-shape", r"dst must have 8 partitions and 4 elements per partition",
     lambda: nisa.tensor_reduce(dst=sb(8, 1), op=nl.add, data=sb(8, 4, 6), axis=2)),
    ("gpsimd-psum", r"GpSimd cannot access PSUM",
     lambda: nisa.tensor_copy(dst=sb(4, 4), src=ps(4, 4), engine=nisa.engine.gpsimd)),
    ("gpsimd-psum", r"GpSimd cannot access PSUM",
     lambda: nisa.memset(dst=ps(4, 4), value=0.0, engine=nisa.engine.gpsimd)),
    ("gpsimd-psum", r"GpSimd cannot access PSUM",
     lambda: nisa.tensor_tensor(dst=sb(4, 4), data1=ps(4, 4), data2=sb(4, 4), op=nl.power)),
    ("gpsimd-psum", r"GpSimd cannot access PSUM",
     lambda: nisa.tensor_scalar(dst=sb(4, 4), data=ps(4, 4), op0=nl.rsqrt, operand0=0.0, engine=nisa.engine.gpsimd)),
    ("gpsimd-psum", r"iota runs on GpSimd and writes SBUF only",
     lambda: nisa.iota(dst=ps(4, 4, dtype=nl.int32), pattern=[[1, 4]])),
    ("dma-psum", r"DMA never reads PSUM", lambda: nisa.dma_copy(dst=hbm(4, 4), src=ps(4, 4))),
    ("dma-psum", r"dst is in PSUM", lambda: nisa.dma_copy(dst=ps(4, 4), src=hbm(4, 4))),
    ("dma-size", r"dst has 16 elements .*src 20", lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(4, 5))),
    ("hwdge-dtype", r"hwdge needs equal dtypes, got bfloat16 -> float32",
     lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(4, 4, dtype=nl.bfloat16), dge_mode=nisa.dge_mode.hwdge)),
    ("dma-engine", r"trigger engine of a hwdge DMA only",
     lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(4, 4), engine=nisa.engine.sync)),
    ("dma-engine", r"engine.sync or engine.scalar, got engine.vector",
     lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(4, 4), dge_mode=nisa.dge_mode.hwdge, engine=nisa.engine.vector)),
    ("dma-transpose-buffers", r"HBM or SBUF into SBUF, got shared_hbm -> shared_hbm",
     lambda: nisa.dma_transpose(dst=hbm(4, 16), src=hbm(16, 4))),
    ("dma-transpose-buffers", r"got psum -> sbuf", lambda: nisa.dma_transpose(dst=sb(4, 16), src=ps(16, 4))),
    ("dma-transpose-mode", r"got swdge and error",
     lambda: nisa.dma_transpose(dst=sb(4, 16), src=hbm(16, 4), dge_mode=nisa.dge_mode.swdge)),
    ("dma-transpose-mode", r"got unknown and skip",
     lambda: nisa.dma_transpose(dst=sb(4, 16), src=hbm(16, 4), oob_mode=nisa.oob_mode.skip)),
    ("dma-transpose-axes", r"got axes=\(0, 1\) for a 2-d src",
     lambda: nisa.dma_transpose(dst=sb(4, 16), src=hbm(16, 4), axes=(0, 1))),
    ("dma-transpose-axes", r"got axes=None for a 5-d src",
     lambda: nisa.dma_transpose(dst=sb(2, 2, 2, 2, 2), src=hbm(2, 2, 2, 2, 2))),
    ("dma-transpose-shape", r"transposed src.shape \[4, 16\], rank included .*got \[4, 1, 16\]",
     lambda: nisa.dma_transpose(dst=sb(4, 1, 16), src=hbm(16, 4))),
    ("dma-transpose-dtype", r"one dtype of 2 or 4 bytes .*got bfloat16 -> float32",
     lambda: nisa.dma_transpose(dst=sb(4, 16), src=hbm(16, 4, dtype=nl.bfloat16))),
    ("dma-transpose-dtype", r"got int8 -> int8",
     lambda: nisa.dma_transpose(dst=sb(4, 16, dtype=nl.int8), src=hbm(16, 4, dtype=nl.int8))),
    ("dma-transpose-dtype", r"one dtype of 2 bytes \(dge_mode=hwdge\), got float32",
     lambda: nisa.dma_transpose(dst=sb(4, 16), src=hbm(16, 4), dge_mode=nisa.dge_mode.hwdge)),
    ("dma-transpose-hwdge", r"got \[8, 4\]", lambda: nisa.dma_transpose(
        dst=sb(4, 8, dtype=nl.bfloat16), src=hbm(8, 4, dtype=nl.bfloat16), dge_mode=nisa.dge_mode.hwdge)),
    ("dma-transpose-hwdge", r"a multiple of 16 \(3-/4-d\); got \[4, 2, 8\]", lambda: nisa.dma_transpose(
        dst=sb(8, 2, 4, dtype=nl.bfloat16), src=hbm(4, 2, 8, dtype=nl.bfloat16), dge_mode=nisa.dge_mode.hwdge)),
    ("memset-value", r"value must be a number for a float32 dst, got True", lambda: nisa.memset(dst=sb(4, 4), value=True)),
    ("memset-value", r"value must be an int for a int32 dst, got 1.5",
     lambda: nisa.memset(dst=sb(4, 4, dtype=nl.int32), value=1.5)),
    ("memset-value", r"value must be an int .*got True",
     lambda: nisa.memset(dst=sb(4, 4, dtype=nl.int32), value=True)),
    ("iota-size", r"make 5 elements per partition; dst has 4",
     lambda: nisa.iota(dst=sb(4, 4, dtype=nl.int32), pattern=[[1, 5]])),
    ("matmul-inputs-sbuf", r"stationary and moving must be in SBUF, got sbuf and psum", lambda: mm(m=ps(32, 16))),
    ("matmul-dst-psum", r"dst must be a PSUM tile, got sbuf", lambda: mm(dst=sb(8, 16))),
    ("matmul-dst-fp32", r"dst must be float32 on trn2, got bfloat16", lambda: mm(dst=ps(8, 16, dtype=nl.bfloat16))),
    ("matmul-dtypes", r"fp32 only with fp32", lambda: mm(s=sb(32, 8), m=sb(32, 16, dtype=nl.bfloat16))),
    ("matmul-dtypes", r"inputs \['int8'\]",
     lambda: mm(s=sb(32, 8, dtype=nl.int8), m=sb(32, 16, dtype=nl.int8))),
    ("matmul-contraction", r"share the contraction \(partition\) size, got 64 and 32", lambda: mm(s=sb(64, 8))),
    ("matmul-stationary-free", r"stationary free size must be <= 128, got 129",
     lambda: mm(dst=ps(128, 16), s=sb(32, 129))),
    ("matmul-moving-free", r"moving free size must be <= 512 \(one PSUM bank\), got 513",
     lambda: mm(dst=ps(8, 513), m=sb(32, 513))),
    ("matmul-dst-shape", r"dst must be \[8, 16\]", lambda: mm(dst=ps(8, 32))),
    ("psum-bank", r"within one 2 KiB PSUM bank", lambda: mm(dst=ps(8, 1024)[:, 504:520])),
    ("psum-bank", r"within one 2 KiB PSUM bank",
     lambda: nisa.nc_transpose(dst=ps(64, 1024)[:, 500:564], data=sb(64, 64), engine=nisa.engine.tensor)),
    ("matmul-tiling", r"tile_position and tile_size must be set together", lambda: mm(tile_position=(0, 0))),
    ("matmul-tiling", r"tile_size entries must be 32, 64 or 128", lambda: mm(tile_position=(0, 0), tile_size=(48, 128))),
    ("matmul-tiling", r"must be a multiple of tile_size", lambda: mm(tile_position=(16, 0), tile_size=(32, 128))),
    ("matmul-tiling", r"stationary tile \[64, 8\] must fit tile_size \(32, 128\)",
     lambda: mm(s=sb(64, 8), m=sb(64, 16), tile_position=(0, 0), tile_size=(32, 128))),
    ("matmul-accumulate", r"accumulate=True onto PSUM that no matmul has written", lambda: mm(accumulate=True)),
    ("matmul-accumulate", r"\(memset or uninitialised\) is undefined", _accumulate_after_memset),
    ("transpose-buffers", r"TensorE transpose reads SBUF and writes PSUM",
     lambda: nisa.nc_transpose(dst=sb(64, 64), data=sb(64, 64), engine=nisa.engine.tensor)),
    ("transpose-size", r"TensorE transposes at most \[128, 128\], got \[64, 129\]",
     lambda: nisa.nc_transpose(dst=ps(128, 64), data=sb(64, 129))),
    ("transpose-size", r"VectorE transposes at most \[32, 32\], got \[16, 33\]",
     lambda: nisa.nc_transpose(dst=sb(33, 16), data=sb(16, 33), engine=nisa.engine.vector)),
    ("transpose-dtype", r"dst dtype must equal data dtype bfloat16, got float32",
     lambda: nisa.nc_transpose(dst=ps(64, 64), data=sb(64, 64, dtype=nl.bfloat16))),
    ("activation-function", r"op=nl.add is not a ScalarE activation function",
     lambda: nisa.activation(dst=sb(8, 4), op=nl.add, data=sb(8, 4))),
    ("activation-bias", r"bias must be a \[8, 1\] tile, got \[8, 2\]",
     lambda: nisa.activation(dst=sb(8, 4), op=nl.exp, data=sb(8, 4), bias=sb(8, 2))),
    ("activation-reduce-op", r"reduce_op must be nl.add, got nl.maximum",
     lambda: nisa.activation(dst=sb(8, 4), op=nl.exp, data=sb(8, 4), reduce_op=nl.maximum,
                             reduce_cmd=nisa.reduce_cmd.reset_reduce)),
    ("activation-reduce-op", r"reduce_cmd=reduce needs reduce_op=nl.add",
     lambda: nisa.activation(dst=sb(8, 4), op=nl.exp, data=sb(8, 4), reduce_cmd=nisa.reduce_cmd.reduce)),
    ("activation-reduce-res", r"reduce_res must be a \[8, 1\] tile, got \[8, 2\]",
     lambda: nisa.activation_reduce(dst=sb(8, 4), op=nl.exp, data=sb(8, 4), reduce_op=nl.add, reduce_res=sb(8, 2))),
    ("scalar-operand", r"operand0 must be a scalar or a \[8, 1\] tile, got \[8, 2\]",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.add, operand0=sb(8, 2))),
    ("scalar-operand", r"operand0 must be a scalar or a \[8, 1\] tile, got \[4, 1\]",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.add, operand0=sb(4, 1))),
    ("scalar-operand", r"operand1 tile must be float32, got bfloat16",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.add, operand0=1.0, op1=nl.add,
                                operand1=sb(8, 1, dtype=nl.bfloat16))),
    ("scalar-operand", r"scale tile must be float32, got bfloat16",
     lambda: nisa.activation(dst=sb(8, 4), op=nl.exp, data=sb(8, 4), scale=sb(8, 1, dtype=nl.bfloat16))),
    ("scalar-operand", r"operand0 must be a scalar or a \[8, 1\] tile",
     lambda: nisa.scalar_tensor_tensor(dst=sb(8, 4), data=sb(8, 4), op0=nl.multiply, operand0=sb(8, 4),
                                       op1=nl.add, operand1=sb(8, 4))),
    ("alu-op", r"op=nl.exp is not an ALU operator",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=sb(8, 4), data2=sb(8, 4), op=nl.exp)),
    ("alu-op", r"op=nl.abs is unary; tensor_tensor needs a binary operator",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=sb(8, 4), data2=sb(8, 4), op=nl.abs)),
    ("alu-op", r"arithmetic operators only",
     lambda: nisa.scalar_tensor_tensor(dst=sb(8, 4, dtype=nl.int32), data=sb(8, 4, dtype=nl.int32), op0=nl.bitwise_and,
                                       operand0=3, op1=nl.add, operand1=sb(8, 4, dtype=nl.int32))),
    ("alu-op", r"op1=nl.rsqrt is unary",
     lambda: nisa.scalar_tensor_tensor(dst=sb(8, 4), data=sb(8, 4), op0=nl.multiply, operand0=2.0,
                                       op1=nl.rsqrt, operand1=sb(8, 4))),
    ("alu-op", r"must both be bitvec or both arithmetic",
     lambda: nisa.tensor_scalar(dst=sb(8, 4, dtype=nl.int32), data=sb(8, 4, dtype=nl.int32), op0=nl.add,
                                operand0=1.0, op1=nl.bitwise_and, operand1=1.0)),
    ("alu-op", r"op0=nl.square is an ALU operator on trn3 only",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.square, operand0=None)),
    ("alu-op", r"op0=nl.relu is an ALU operator on trn3 only",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.relu, operand0=0)),
    ("bitvec-dtype", r"bitvec operator nl.bitwise_and needs integer tiles, got \['float32'\]",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=sb(8, 4), data2=sb(8, 4), op=nl.bitwise_and)),
    ("bitvec-dtype", r"bitvec operator nl.bitwise_or needs integer tiles",
     lambda: nisa.tensor_reduce(dst=sb(8, 1, dtype=nl.int32), op=nl.bitwise_or, data=sb(8, 4), axis=1)),
    ("no-divide", r"no divide ALU op .*multiply by nisa.reciprocal",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=sb(8, 4), data2=sb(8, 4), op=nl.divide)),
    ("no-divide", r"no divide ALU op",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.divide, operand0=2.0)),
    ("psum-operands", r"data1 and data2 cannot both be in PSUM",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=ps(8, 4), data2=ps(8, 4), op=nl.add)),
    ("psum-operands", r"data and operand1 cannot both be in PSUM",
     lambda: nisa.scalar_tensor_tensor(dst=sb(8, 4), data=ps(8, 4), op0=nl.multiply, operand0=2.0, op1=nl.add,
                                       operand1=ps(8, 4))),
    ("scalar-engine-ops", r"only \(multiply, add\), \(multiply, None\), \(add, None\); got \('subtract', None\)",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.subtract, operand0=1.0, engine=nisa.engine.scalar)),
    ("scalar-engine-ops", r"got \('add', 'multiply'\)",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.add, operand0=1.0, op1=nl.multiply,
                                operand1=2.0, engine=nisa.engine.scalar)),
    ("gpsimd-ops", r"allowed only for rsqrt, got \('add', None\)",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=sb(8, 4), op0=nl.add, operand0=1.0, engine=nisa.engine.gpsimd)),
    ("engine", r"tensor_copy runs on vector, scalar or gpsimd, got tensor",
     lambda: nisa.tensor_copy(dst=sb(4, 4), src=sb(4, 4), engine=nisa.engine.tensor)),
    ("engine", r"memset runs on vector or gpsimd, got scalar",
     lambda: nisa.memset(dst=sb(4, 4), value=0.0, engine=nisa.engine.scalar)),
    ("engine", r"nc_transpose runs on tensor or vector, got gpsimd",
     lambda: nisa.nc_transpose(dst=sb(4, 4), data=sb(4, 4), engine=nisa.engine.gpsimd)),
    ("engine", r"tensor_tensor runs on vector or gpsimd, got scalar",
     lambda: nisa.tensor_tensor(dst=sb(4, 4), data1=sb(4, 4), data2=sb(4, 4), op=nl.add, engine=nisa.engine.scalar)),
    ("engine", r"nl.power runs on GpSimd only, got engine vector",
     lambda: nisa.tensor_tensor(dst=sb(4, 4), data1=sb(4, 4), data2=sb(4, 4), op=nl.power, engine=nisa.engine.vector)),
    ("engine", r"tensor_scalar runs on vector, scalar or gpsimd, got tensor",
     lambda: nisa.tensor_scalar(dst=sb(4, 4), data=sb(4, 4), op0=nl.add, operand0=1.0, engine=nisa.engine.tensor)),
    ("reduce-op", r"op=nl.equal is not a legal reduction operator",
     lambda: nisa.tensor_reduce(dst=sb(8, 1), op=nl.equal, data=sb(8, 4), axis=1)),
    ("reduce-axis", r"never 0\), got 0", lambda: nisa.tensor_reduce(dst=sb(8, 1), op=nl.add, data=sb(8, 4), axis=0)),
    ("reduce-axis", r"last contiguous free dims of a 3-d tile .*got 1",
     lambda: nisa.tensor_reduce(dst=sb(8, 6), op=nl.add, data=sb(8, 4, 6), axis=1)),
    ("reduce-axis", r"got \(1, 3\)",
     lambda: nisa.tensor_reduce(dst=sb(8, 3), op=nl.add, data=sb(8, 2, 3, 4), axis=(1, 3))),
    ("sbuf-capacity", rf"needs {SBUF_BYTES + 4} B per partition but only {SBUF_BYTES} B",
     lambda: sb(128, SBUF_BYTES // 4 + 1)),
    ("sbuf-capacity", rf"of {SBUF_BYTES} B are free in live allocations \(trn2 SBUF: 229376 B less 16392 B",
     _two_live_tiles_overflow_sbuf),
    ("sbuf-capacity", r"needs 229376 B per partition",                 # the full 224 KiB: part is the runtime's
     lambda: sb(128, 224 * 1024 // 4)),
    ("psum-capacity", rf"needs {nl.tile_size.psum_num_banks + 1} bank\(s\) of 2 KiB per partition but trn2 PSUM "
                      rf"has {nl.tile_size.psum_num_banks} banks",
     lambda: ps(128, 8 * PSUM_BANK_F32 + 1)),
    ("psum-capacity", r"0 are free in live allocations",
     lambda: _keep_all_live(9, (128, PSUM_BANK_F32), nl.psum)),
    ("gpsimd-float-arithmetic", r"GpSimd \(Pool\) does not run float tensor_tensor op=nl.multiply .*'float32'",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=sb(8, 4), data2=sb(8, 4), op=nl.multiply,
                                engine=nisa.engine.gpsimd)),
    ("gpsimd-float-arithmetic", r"op=nl.add .*'bfloat16'.*use engine=nisa.engine.vector",   # an int dst is no way out
     lambda: nisa.tensor_tensor(dst=sb(8, 4, dtype=nl.int32), data1=sb(8, 4, dtype=nl.bfloat16),
                                data2=sb(8, 4, dtype=nl.bfloat16), op=nl.add, engine=nisa.engine.gpsimd)),
    ("psum-subword-write", r"bfloat16 elements starting at byte offset 2 of a partition.*4-byte words",
     lambda: nisa.nc_transpose(dst=ps(4, 2, dtype=nl.bfloat16)[:, 1], data=sb(1, 4, dtype=nl.bfloat16),
                               engine=nisa.engine.tensor)),     # the second of two [P, 1] transposes side by side
    ("psum-subword-write", r"starting at byte offset 2",                         # every other element: runs of one
     lambda: nisa.nc_transpose(dst=ps(4, 8, dtype=nl.bfloat16)[:, 1:8:2], data=sb(4, 4, dtype=nl.bfloat16),
                               engine=nisa.engine.tensor)),
    ("ap-start-partition", r"src spans 8 partitions from partition 8; .*must start at partition \(0, 32, 64, 96\)",
     lambda: nisa.tensor_copy(dst=sb(8, 4), src=sb(16, 4)[8:16])),
    ("ap-start-partition", r"dst spans 64 partitions from partition 32; .*\(0, 64\)",
     lambda: nisa.tensor_copy(dst=sb(128, 4)[32:96], src=sb(64, 4))),
    ("ap-start-partition", r"dst spans 96 partitions from partition 32; .*\(0,\)",
     lambda: nisa.memset(dst=sb(128, 4)[32:128], value=0.0)),
    ("ap-start-partition", r"stationary spans 16 partitions from partition 16",
     lambda: mm(s=sb(32, 8)[16:32], m=sb(32, 16)[0:16])),
    ("ap-free-dims", r"src has 5 free dims .*at most 4",
     lambda: nisa.tensor_copy(dst=sb(4, 32), src=sb(4, 3, 3, 3, 3, 3)[:, 0:2, 0:2, 0:2, 0:2, 0:2])),
    ("ap-size", r"dst has a free dim of 70000 elements; .*uint16",
     lambda: nisa.memset(dst=sb(2, 70000, dtype=nl.bfloat16), value=0.0)),
    ("ap-stride", r"src has a free stride of 40000 elements; .*int16",
     lambda: nisa.tensor_copy(dst=sb(2, 2), src=sb(2, 2, 40000, dtype=nl.bfloat16)[:, :, 0])),
    ("matmul-placement", r"stationary starts at partition 32 and moving at 0",
     lambda: mm(s=sb(64, 8)[32:64], m=sb(32, 16))),
    ("matmul-placement", r"partitions 0..31, outside the PE rows 32..63 of tile_position \(32, 0\)",
     lambda: mm(tile_position=(32, 0), tile_size=(32, 128))),
    ("matmul-placement", r"dst starts at PSUM partition 0; .*first column 32",       # column tile 32, dst at 0
     lambda: mm(tile_position=(0, 32), tile_size=(128, 32))),
    ("matmul-placement", r"dst starts at PSUM partition 32; .*first column 0 \(no tiling",
     lambda: mm(dst=ps(64, 16)[32:40])),
    ("matmul-placement", r"dst starts at PSUM partition 32; .*a TensorE transpose writes from partition 0",
     lambda: nisa.nc_transpose(dst=ps(64, 4)[32:40], data=sb(4, 8), engine=nisa.engine.tensor)),
    ("input-start-partition", r"inputs start on different partitions \{'data1': 64, 'data2': 0\}",
     lambda: nisa.tensor_tensor(dst=sb(64, 4), data1=sb(128, 4)[64:128], data2=sb(64, 4), op=nl.multiply)),
    ("input-start-partition", r"SBUF inputs start on different partitions \{'data1': 32, 'data2': 0\}",
     lambda: nisa.tensor_tensor(dst=sb(32, 4), data1=sb(64, 4)[32:64], data2=sb(32, 4), op=nl.add)),
    ("input-start-partition", r"\{'data': 0, 'operand0': 32\}",
     lambda: nisa.tensor_scalar(dst=sb(32, 4), data=sb(32, 4), op0=nl.add, operand0=sb(64, 1)[32:64])),
    ("input-start-partition", r"\{'data': 0, 'operand1': 96\}",
     lambda: nisa.scalar_tensor_tensor(dst=sb(32, 4), data=sb(32, 4), op0=nl.multiply, operand0=2.0,
                                       op1=nl.add, operand1=sb(128, 4)[96:128])),
    ("input-start-partition", r"\{'data0': 0, 'data1': 0, 'initial': 32\}",
     lambda: nisa.tensor_tensor_scan(dst=sb(32, 4), data0=sb(32, 4), data1=sb(32, 4), initial=sb(64, 1)[32:64],
                                     op0=nl.multiply, op1=nl.add)),
    ("input-start-partition", r"\{'src': 32, 'predicate': 0\}",
     lambda: nisa.tensor_copy_predicated(dst=sb(32, 4), src=sb(64, 4)[32:64], predicate=sb(32, 4, dtype=nl.uint8))),
]

# Rules whose only evidence is a compile error reported to the project while the docs allow the
# pattern: nkicpu runs it as documented (element k to element k) and warns (NkiRuleWarning).
WARNED = [
    # (rule, key words of the warning, a kernel body (HBM argument x, SBUF dst), x's shape, dst's shape)
    ("dma-partition-count", r"dst has 6 in dim 0 \(\[6, 4\] in sbuf\), src 2 \(\[2, 3, 4\] in private_hbm\).*"
                            r"ask only for equal element counts",
     lambda x, dst: nisa.dma_copy(dst=dst, src=x), (2, 3, 4), (6, 4)),
    ("dma-partition-count", r"dst has 1 in dim 0 .*src 3 .*compile error reported",    # SBUF -> SBUF too
     lambda x, dst: nisa.dma_copy(dst=dst, src=load(x)), (3, 4), (1, 12)),
]


# Inputs outside a ScalarE function's valid range: a warning, and the exact function (rsqrt(0) is inf).
OUT_OF_RANGE = [
    (r"op=nl.rsqrt input data \* scale \+ bias = 0.0 at data index \[0, 0\] \(32 input\(s\) "
     r"out of range\) is outside its valid range \[2\^-87, 2\^97\]", nl.rsqrt, 0.0, 1.0, 0.0),
    (r"op=nl.log input .* = -2.0 .*\[2\^-64, 2\^64\]", nl.log, 2.0, -1.0, 0.0),
    (r"op=nl.reciprocal input .* = 0.0 .*\+-\[2\^-42, 2\^42\]", nl.reciprocal, 1.0, 1.0, -1.0),
    (r"op=nl.sqrt input .* = 1\.3\d*e\+36 .*\[2\^-116, 2\^118\]", nl.sqrt, 2.0 ** 120, 1.0, 0.0),
    (r"op=nl.sin input .* = 4.0 .*\[-pi, pi\]", nl.sin, 4.0, 1.0, 0.0),
    (r"op=nl.arctan input .* = -2.0 .*\[-pi/2, pi/2\]", nl.arctan, 2.0, -1.0, 0.0),
]

# The nearest legal form of each rule added with the trn2 compile checks: it must still pass.
LEGAL = [
    ("gpsimd-float-arithmetic", "float multiply on VectorE",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=sb(8, 4), data2=sb(8, 4), op=nl.multiply)),
    ("gpsimd-float-arithmetic", "nl.power runs on GpSimd (documented)",
     lambda: nisa.tensor_tensor(dst=sb(8, 4), data1=sb(8, 4), data2=sb(8, 4), op=nl.power)),
    ("gpsimd-float-arithmetic", "int32 arithmetic on GpSimd",
     lambda: nisa.tensor_tensor(dst=sb(8, 4, dtype=nl.int32), data1=sb(8, 4, dtype=nl.int32),
                                data2=sb(8, 4, dtype=nl.int32), op=nl.add, engine=nisa.engine.gpsimd)),
    ("gpsimd-float-arithmetic", "tensor_scalar rsqrt on GpSimd (documented)",
     lambda: nisa.tensor_scalar(dst=sb(8, 4), data=filled((8, 4), 4.0), op0=nl.rsqrt, operand0=0.0,
                                engine=nisa.engine.gpsimd)),
    ("gpsimd-float-arithmetic", "copies, memset and iota on GpSimd",
     lambda: (nisa.tensor_copy(dst=sb(8, 4), src=filled((8, 4), 1.0, nl.bfloat16), engine=nisa.engine.gpsimd),
              nisa.memset(dst=sb(8, 4), value=1.0, engine=nisa.engine.gpsimd),
              nisa.iota(dst=sb(8, 4), pattern=[[1, 4]]))),
    ("psum-subword-write", "bf16 transpose into whole words",
     lambda: nisa.nc_transpose(dst=ps(4, 2, dtype=nl.bfloat16), data=sb(2, 4, dtype=nl.bfloat16),
                               engine=nisa.engine.tensor)),
    ("psum-subword-write", "fp32 transpose of one row",
     lambda: nisa.nc_transpose(dst=ps(4, 1), data=sb(1, 4), engine=nisa.engine.tensor)),
    ("psum-subword-write", "bf16 copy at a word offset",
     lambda: nisa.tensor_copy(dst=ps(4, 8, dtype=nl.bfloat16)[:, 2:4], src=sb(4, 2, dtype=nl.bfloat16))),
    ("psum-subword-write", "VectorE / ScalarE writes at a half-word offset (PSUM is SRAM to them)",
     lambda: (nisa.tensor_copy(dst=ps(4, 8, dtype=nl.bfloat16)[:, 1:3], src=sb(4, 2, dtype=nl.bfloat16)),
              nisa.tensor_copy(dst=ps(4, 8, dtype=nl.bfloat16)[:, 1:8:2], src=sb(4, 4, dtype=nl.bfloat16)),
              nisa.activation(dst=sb(4, 4), op=nl.exp, data=filled((4, 4), 0.0), reduce_op=nl.add,
                              reduce_res=ps(4, 2, dtype=nl.bfloat16)[:, 1:2],
                              reduce_cmd=nisa.reduce_cmd.reset_reduce))),
    ("psum-subword-write", "one bf16 element per partition at offset 0 (the NKI library's one-token transpose)",
     lambda: nisa.nc_transpose(dst=ps(4, 1, dtype=nl.bfloat16), data=sb(1, 4, dtype=nl.bfloat16),
                               engine=nisa.engine.tensor)),
    ("input-start-partition", "PSUM rows of column tile 1 (partitions 32..) added into SBUF on 0.. (LIB qkv_tkg.py, "
                              "router_topk.py, mlp_tkg)",
     lambda: _column_tiles_accumulated()),
    ("input-start-partition", "a PSUM input on partitions 0.. beside an SBUF input on 32..",
     lambda: nisa.tensor_tensor(dst=sb(32, 4), data1=filled((32, 4), 1.0, buffer=nl.psum),
                                data2=filled((64, 4), 2.0)[32:64], op=nl.add)),
    ("dma-partition-count", "HBM side reshaped to the partition count",
     lambda: nisa.dma_copy(dst=sb(6, 4), src=hbm(2, 3, 4).reshape((6, 4)))),
    ("dma-partition-count", "HBM -> HBM with different dim 0",
     lambda: nisa.dma_copy(dst=hbm(6, 4), src=hbm(2, 3, 4))),
    ("ap-start-partition", "64 partitions from 0 and from 64",
     lambda: nisa.tensor_copy(dst=sb(128, 4)[64:128], src=sb(128, 4)[0:64])),
    ("ap-start-partition", "32 partitions from 96, and a quadrant-tiled matmul",
     lambda: (nisa.tensor_copy(dst=sb(32, 4), src=sb(128, 4)[96:128]),
              mm(s=sb(64, 8)[32:64], m=sb(64, 16)[32:64], tile_position=(32, 0), tile_size=(32, 128)))),
    ("ap-free-dims", "4 free dims",
     lambda: nisa.tensor_copy(dst=sb(4, 16), src=sb(4, 3, 3, 3, 3, 3)[:, 0, 0:2, 0:2, 0:2, 0:2])),
    ("ap-free-dims", "6 dims that merge into 1",
     lambda: nisa.tensor_copy(dst=sb(4, 2, 2, 2, 2, 2, 2), src=sb(4, 64))),
    ("ap-size", "a long run viewed as two dims (stride 17500)",
     lambda: nisa.memset(dst=sb(2, 70000, dtype=nl.bfloat16).reshape((2, 4, 17500)), value=0.0)),
    ("ap-stride", "the largest int16 stride",
     lambda: nisa.tensor_copy(dst=sb(2, 2), src=sb(2, 2, 32767, dtype=nl.bfloat16)[:, :, 0])),
    ("sbuf-capacity", "tiles filling the usable SBUF exactly",
     lambda: (sb(128, SBUF_BYTES // 4 // 2), nisa.memset(dst=sb(128, SBUF_BYTES // 4 // 2), value=0.0))),
    ("matmul-placement", "column tile 32 writes PSUM partitions 32.. (LIB qkv_tkg, router_topk)",
     lambda: mm(dst=ps(64, 16)[32:40], tile_position=(0, 32), tile_size=(128, 32))),
    ("matmul-placement", "row tile 32 reads operands on partitions 32..63",
     lambda: mm(s=sb(64, 8)[32:64], m=sb(64, 16)[32:64], tile_position=(32, 0), tile_size=(32, 128))),
    ("matmul-placement", "no tiling, operands on one partition range",
     lambda: mm(s=sb(64, 8)[32:64], m=sb(64, 16)[32:64])),
    ("input-start-partition", "inputs on partitions 0.., dst on 64.. (LIB rope.py RoPE_sbuf)",
     lambda: nisa.tensor_tensor(dst=sb(128, 4)[64:128], data1=filled((64, 4), 1.0), data2=filled((64, 4), 2.0),
                                op=nl.add)),
    ("input-start-partition", "data and its operand tiles on partitions 32..",
     lambda: (nisa.tensor_scalar(dst=sb(32, 4), data=filled((64, 4), 1.0)[32:64], op0=nl.add,
                                 operand0=filled((64, 1), 1.0)[32:64]),
              nisa.scalar_tensor_tensor(dst=sb(32, 4), data=filled((64, 4), 1.0)[32:64], op0=nl.multiply,
                                        operand0=2.0, op1=nl.add, operand1=filled((64, 4), 1.0)[32:64]))),
    ("matmul-accumulate", "accumulate=False starts the group, then accumulate=True",
     lambda: _start_then_accumulate()),
    ("matmul-accumulate", "accumulate=None over overlapping regions (the convolution pattern)",
     lambda: _convolution_pattern()),
]


def _column_tiles_accumulated():
    """Column tile 1 of a tiled matmul writes PSUM partitions 32..; its rows go into an SBUF sum on 0..."""
    p = ps(64, 16)
    mm(dst=p[0:8], s=filled((32, 8), 1.0), m=filled((32, 16), 1.0), tile_position=(0, 0), tile_size=(128, 32))
    mm(dst=p[32:40], s=filled((32, 8), 1.0), m=filled((32, 16), 1.0), tile_position=(0, 32), tile_size=(128, 32))
    acc = sb(8, 16)
    nisa.tensor_copy(dst=acc, src=p[0:8])
    nisa.tensor_tensor(dst=acc, data1=acc, data2=p[32:40], op=nl.add)


def _start_then_accumulate():
    p = ps(8, 16)
    nisa.memset(dst=p, value=0.0)
    mm(dst=p, accumulate=False)      # a matmul overwrites the memset: the group starts here
    mm(dst=p, accumulate=True)


def _convolution_pattern():
    p = ps(8, 32)
    mm(dst=p[:, 0:16])
    mm(dst=p[:, 8:24])               # 8..15 accumulate, 16..23 first write
    mm(dst=p[:, 0:16], accumulate=True)


@pytest.mark.parametrize("rule,words,body", CASES, ids=[c[0] for c in CASES])
def test_rule(rule, words, body):
    with pytest.raises(NkiValidationError, match=re.escape(f"[{rule}]") + ".*" + words):
        nki.simulate(nki.jit(body))()


@pytest.mark.parametrize("rule,what,body", LEGAL, ids=[f"{r}: {w}" for r, w, _ in LEGAL])
def test_nearest_legal_form_passes(rule, what, body):
    def kernel():
        body()
        return store(sb(1, 1))

    opcodes = [i.opcode for i in nkicpu.capture(nki.jit(kernel))().instructions]
    assert len(opcodes) >= 2 and opcodes[-1] == "dma_copy"     # the body's instructions ran, then the store


@pytest.mark.parametrize("rule,words,body,src_shape,dst_shape", WARNED, ids=[c[0] for c in WARNED])
def test_warned_rule_runs_as_documented(rule, words, body, src_shape, dst_shape):
    """The pattern runs: dst holds src's elements in order, and a NkiRuleWarning names the rule."""
    src = np.arange(np.prod(src_shape), dtype=F32).reshape(src_shape)

    @nki.jit
    def k(x):
        dst = sb(*dst_shape)
        body(x, dst)
        return store(dst)

    with pytest.warns(nkicpu.errors.NkiRuleWarning, match=re.escape(f"[{rule}]") + ".*" + words):
        got = nki.simulate(k)(src)
    np.testing.assert_array_equal(got, src.reshape(dst_shape))


def test_warned_rule_is_an_error_in_this_projects_tests():
    """pyproject.toml turns NkiRuleWarning into an error, so the project's own kernels keep to the rule."""
    with pytest.raises(nkicpu.errors.NkiRuleWarning, match=r"\[dma-partition-count\]"):
        nki.simulate(nki.jit(lambda: nisa.dma_copy(dst=sb(6, 4), src=hbm(2, 3, 4))))()


def test_every_compile_check_rule_has_a_legal_form():
    new = {"gpsimd-float-arithmetic", "psum-subword-write", "dma-partition-count", "ap-start-partition",
           "ap-free-dims", "ap-size", "ap-stride", "sbuf-capacity", "matmul-placement", "input-start-partition",
           "matmul-accumulate"}
    assert new <= enforced_rules() and new <= {r for r, _, _ in LEGAL}


@pytest.mark.parametrize("words,op,value,scale,bias", OUT_OF_RANGE, ids=[c[1].name for c in OUT_OF_RANGE])
def test_activation_out_of_range_warns_and_computes(words, op, value, scale, bias):
    """ScalarE computes a function outside its valid range all the same (its polynomial extrapolated):
    nkicpu warns, naming the op, the input and the range, and computes the exact function."""
    @nki.jit
    def k():
        y = sb(8, 4)
        nisa.activation(dst=y, op=op, data=filled((8, 4), value), scale=scale, bias=bias)
        return store(y)

    with pytest.warns(ActivationRangeWarning, match=r"nisa.activation: " + words):
        got = nki.simulate(k)()
    x = np.float32(value) * np.float32(scale) + np.float32(bias)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(got, np.full((8, 4), op.fn(np.float32(x)), F32))


def test_activation_out_of_range_is_an_error_in_this_projects_tests():
    """pyproject.toml turns the warning into an error, so the project's kernels stay in range."""
    with pytest.raises(ActivationRangeWarning):
        nki.simulate(nki.jit(lambda: nisa.activation(dst=sb(8, 4), op=nl.sin, data=filled((8, 4), 4.0))))()


def test_activation_range_names_the_first_bad_input_and_its_index():
    x = np.ones((8, 3, 4), F32)
    x[3, 1, 2], x[5, 0, 0] = -5.0, -1.0

    @nki.jit
    def k(x):
        y = nl.ndarray(x.shape, nl.float32)
        nisa.activation(dst=y, op=nl.sqrt, data=load(x))
        return store(y)

    with pytest.warns(ActivationRangeWarning, match=r"nisa.activation: op=nl.sqrt input data \* scale \+ bias = "
                                                    r"-5.0 at data index \[3, 1, 2\] \(2 input\(s\)"):
        nki.simulate(k)(x)
    x[3, 1, 2] = x[5, 0, 0] = 2.0 ** -116                        # the lower bound itself is valid
    np.testing.assert_array_equal(nki.simulate(k)(x), np.sqrt(x))


def test_activation_range_leaves_nan_inputs_alone():
    """Uninitialised memory (NaN) still flows through to the output instead of raising."""
    @nki.jit
    def k(x):
        y = nl.ndarray((4, 8), nl.float32)
        nisa.activation(dst=y, op=nl.rsqrt, data=nl.ndarray((4, 8), nl.float32))
        return store(y)

    assert np.all(np.isnan(nki.simulate(k)(np.zeros(1, F32))))


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_activation_of_a_non_finite_input_is_nan_for_that_element_only(bad):
    """On the hardware a ScalarE function of a non-finite input gives a non-finite or garbage value
    for that element alone; nkicpu gives NaN there and leaves every other element exact."""
    @nki.jit
    def k(x):
        t = load(x)
        y = nl.ndarray((4, 8), nl.float32)
        nisa.activation(dst=y, op=nl.rsqrt, data=t)
        return store(y)

    x = np.full((4, 8), 4.0, F32)
    x[1, 3] = bad
    y = nki.simulate(k)(x)
    assert np.isnan(y[1, 3])
    y[1, 3] = 0.5
    np.testing.assert_array_equal(y, np.full((4, 8), 0.5, F32))


def enforced_rules():
    src = pathlib.Path(nkicpu.__file__).parent
    names = set()
    for f in src.glob("*.py"):
        names |= set(re.findall(r'rule_(?:error|warning)\(\s*"([a-z0-9-]+)"', f.read_text()))
    return names


def test_every_enforced_rule_has_a_case():
    covered = {c[0] for c in CASES + WARNED} | {"output-shared-hbm", "kernel-arguments"}   # these two: below
    # Launch-grid and nki.jit rules need a grid or a decorator around the kernel: tests/test_nkicpu_api.py,
    # and for core_barrier tests/test_nkicpu_core_barrier.py.
    covered |= {"lnc-grid", "lnc-race", "lnc-shared-hbm", "lnc-outputs", "jit-options", "lnc-barrier"}
    covered |= {c[0] for c in SUBSET_CASES}   # the Python-subset rules: tests/test_nkicpu_subset.py
    covered |= {c[0] for c in ISA_API_CASES}  # the rules of the instructions outside isa.py: tests/test_nkicpu_isa_api.py
    assert enforced_rules() <= covered, f"rules without a test: {sorted(enforced_rules() - covered)}"


@pytest.mark.parametrize("buffer", ["sbuf", "hbm", "private_hbm"])
def test_output_must_be_shared_hbm(buffer):
    buf = getattr(nl, buffer)   # host code: kernel code may not call getattr

    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=buf)
        nisa.dma_copy(dst=t, src=x)
        return t

    with pytest.raises(NkiValidationError, match=r"\[output-shared-hbm\] k: output 0 .*buffer=nl.shared_hbm"):
        nki.simulate(k)(np.zeros((4, 4), F32))


def test_kernel_arguments_are_not_lists_and_signatures_have_no_keyword_only_params():
    @nki.jit
    def k(x, shape):
        return store(load(x))

    @nki.jit
    def kw(x, *, scale=1.0):
        return store(load(x))

    x = np.zeros((2, 2), F32)
    assert nki.simulate(k)(x, (2, 2)).shape == (2, 2)           # a tuple is a compile-time constant
    with pytest.raises(NkiValidationError,
                       match=r"\[kernel-arguments\] k argument shape: expected an array or a tuple .*got a list of 2"):
        nki.simulate(k)(x, [2, 2])
    with pytest.raises(NkiValidationError, match=r"\[kernel-arguments\] kw: keyword-only parameters \['scale'\]"):
        nki.simulate(kw)(x)


def test_checks_hold_for_what_the_tile_size_constants_allow():
    """The documented maxima pass; one more fails (the constants and the rules agree)."""
    K, M, N = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax

    def body(m_free, n_free):
        mm(dst=ps(min(m_free, K), n_free), s=sb(K, m_free), m=sb(K, n_free))  # dst cannot exceed 128 partitions

    @nki.jit
    def at_the_limits():
        body(M, N)
        return store(sb(1, 1))

    mms = [i for i in nkicpu.capture(at_the_limits)().instructions if i.opcode == "nc_matmul"]
    assert [(i.args["K"], i.args["M"], i.args["N"]) for i in mms] == [(K, M, N)]
    with pytest.raises(NkiValidationError, match="matmul-moving-free"):
        nki.simulate(nki.jit(lambda: body(M, N + 1)))()
    with pytest.raises(NkiValidationError, match="matmul-stationary-free"):
        nki.simulate(nki.jit(lambda: body(M + 1, N)))()


# -- capacity over live allocations -----------------------------------------------------------

def test_sbuf_capacity_counts_live_allocations_only():
    free = SBUF_BYTES // 4 // 2 - 64     # fp32 elements: two such tiles fit in a partition, three do not
    tile_bytes = free * 4

    @nki.jit
    def rotate(x):
        for i in range(4):                          # each iteration drops the previous tile
            t = nl.ndarray((128, free), nl.float32)
            nisa.memset(dst=t, value=float(i))
        out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t[0:1, 0:1])
        return out

    c = nkicpu.capture(rotate)(np.zeros(1, F32))
    assert c.outputs[0, 0] == 3.0
    assert tile_bytes <= c.peak_sbuf_bytes < 3 * tile_bytes

    @nki.jit
    def hoard(x):
        kept = []
        for i in range(3):
            kept.append(nl.ndarray((128, free), nl.float32))

    with pytest.raises(NkiValidationError, match=r"\[sbuf-capacity\]"):
        nki.simulate(hoard)(np.zeros(1, F32))


def test_psum_capacity_counts_live_allocations_only():
    @nki.jit
    def rotate(s, m):
        out = nl.ndarray((20, 8, 16), nl.float32, buffer=nl.shared_hbm)
        st, mv = load(s), load(m)
        for i in range(20):                         # 20 accumulation groups, one bank each, 8 banks in PSUM
            p = nl.ndarray((8, 16), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=p, stationary=st, moving=mv)
            r = nl.ndarray((8, 16), nl.float32)
            nisa.tensor_copy(dst=r, src=p)
            nisa.dma_copy(dst=out[i], src=r)
        return out

    s, m = np.ones((32, 8), F32), np.ones((32, 16), F32)
    c = nkicpu.capture(rotate)(s, m)
    assert np.all(c.outputs == 32.0)
    assert c.peak_psum_banks <= 2

    with pytest.raises(NkiValidationError, match=r"\[psum-capacity\]"):
        nki.simulate(nki.jit(lambda: _keep_all_live(nl.tile_size.psum_num_banks + 1, (8, 16), nl.psum)))()


# -- uninitialised memory ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype,buffer", [(nl.float32, nl.sbuf), (nl.bfloat16, nl.sbuf), (nl.float32, nl.psum),
                                          (nl.int32, nl.sbuf), (nl.uint8, nl.sbuf)])
def test_uninitialised_reads_show_up(dtype, buffer):
    @nki.jit
    def k(x):
        t = nl.ndarray((4, 8), dtype, buffer=buffer)     # never written
        s = nl.ndarray((4, 8), dtype)
        nisa.tensor_copy(dst=s, src=t)
        return store(s)

    got = nki.simulate(k)(np.zeros(1, F32))
    if np.issubdtype(got.dtype, np.integer):
        assert np.all(got == nkicpu.memory.INT_SENTINEL) and nkicpu.memory.INT_SENTINEL == 4  # the SDK simulator's
    else:
        assert np.all(np.isnan(got.astype(F32)))


def test_uninitialised_output_region_is_nan():
    @nki.jit
    def k(x):
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:4], src=load(x))      # the right half is never written
        return out

    got = nki.simulate(k)(np.ones((4, 4), F32))
    assert np.all(got[:, :4] == 1) and np.all(np.isnan(got[:, 4:]))


# -- what nkicpu does not model ---------------------------------------------------------------

def _select_dynamic():
    t = sb(8, 4)
    t.select(1, sb(1, 1, dtype=nl.int32))


def _gather_and_scatter():
    idx = sb(4, 1, dtype=nl.int32)
    nisa.memset(dst=idx, value=0)
    nisa.dma_copy(dst=hbm(4, 4).ap([[4, 4], [1, 4]], vector_offset=idx), src=hbm(4, 4).ap([[4, 4], [1, 4]],
                                                                                         vector_offset=idx))


def _indirect_transpose():
    idx = sb(1, 1, dtype=nl.int32)
    nisa.memset(dst=idx, value=0)
    nisa.dma_transpose(dst=sb(4, 16), src=hbm(16, 4).ap([[4, 16], [1, 4]], scalar_offset=idx))


UNMODELED = [
    ("is_transpose accumulate", lambda: mm(dst=ps(8, 32), s=sb(32, 8), m=sb(32, 32), is_transpose=True, accumulate=True)),
    ("perf_mode", lambda: mm(perf_mode=nisa.matmul_perf_mode.double_row)),
    ("priority", lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(4, 4), priority=0)),
    ("address", lambda: nl.ndarray((4, 4), nl.float32, address=(0, 0))),
    ("indirect src and dst", _gather_and_scatter),
    ("indirect transpose", _indirect_transpose),
    ("ap of an indirect view", lambda: hbm(8, 4).ap([[4, 4], [1, 4]], scalar_offset=sb(1, 1, dtype=nl.int32))
                                                .ap([[4, 4], [1, 4]])),
    ("ap dtype", lambda: sb(4, 4).ap([[4, 4], [1, 4]], dtype=nl.int32)),
    ("view", lambda: sb(4, 4).view(nl.int32)),
    ("rearrange", lambda: sb(4, 6).rearrange(("p", ("a", "b")), ("p", "b", "a"), {"a": 2})),
    ("dynamic select", _select_dynamic),
    ("negative step", lambda: sb(4, 6)[:, ::-1]),
    ("load_reduce", lambda: nisa.activation(dst=sb(8, 4), op=nl.exp, data=sb(8, 4), reduce_op=nl.add,
                                            reduce_cmd=nisa.reduce_cmd.load_reduce)),
    ("bitvec tensor_scalar", lambda: nisa.tensor_scalar(dst=sb(8, 4, dtype=nl.int32), data=sb(8, 4, dtype=nl.int32),
                                                        op0=nl.bitwise_and, operand0=1.0)),
    ("logical reduce", lambda: nisa.tensor_reduce(dst=sb(8, 1), op=nl.logical_and, data=sb(8, 4), axis=1)),
    ("unary nl wrapper call", lambda: nl.exp(sb(4, 4))),
    ("nisa instruction", lambda: nisa.nc_match_replace8),
    ("nl name", lambda: nl.fori_loop),
    ("sendrecv", lambda: nisa.sendrecv(src=sb(4, 4), dst=sb(4, 4), send_to_rank=1, recv_from_rank=1, pipe_id=0)),
    ("nki.lnc.sendrecv", lambda: nki.lnc.sendrecv(src=sb(4, 4), dst=sb(4, 4), send_to_rank=1, recv_from_rank=1)),
]


@pytest.mark.parametrize("what,body", UNMODELED, ids=[u[0] for u in UNMODELED])
def test_unmodeled_raises_not_implemented(what, body):
    with pytest.raises(NotImplementedError, match="nkicpu does not model"):
        nki.simulate(nki.jit(body))()


def test_unmodeled_jit_options():
    with pytest.raises(NotImplementedError, match=r"nki.jit options \['debug_kernel'\]"):
        nki.jit(mode="auto", debug_kernel=True)(lambda: None)   # mode= alone is ignored (tests/test_nkicpu_api.py)


def test_python_protocol_probes_are_attribute_errors():
    """hasattr() / copy / inspect probe dunder names; they must not look like NKI names."""
    assert not hasattr(nl, "__wrapped__") and not hasattr(nisa, "__wrapped__")
    assert not hasattr(nl.tile_size, "__deepcopy__")


class Tensor:
    """Stands in for torch.Tensor (nkicpu recognises torch objects by their module) when torch is not loaded."""
    __module__ = "torch"


RAW_ENUMS = [
    ("engine", lambda: nisa.tensor_copy(dst=sb(4, 4), src=sb(4, 4), engine=5)),
    ("dge_mode", lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(4, 4), dge_mode=3)),
    ("oob_mode", lambda: nisa.dma_copy(dst=sb(4, 4), src=hbm(4, 4), oob_mode=0)),
    ("reduce_cmd", lambda: nisa.activation(dst=sb(8, 4), op=nl.exp, data=sb(8, 4), reduce_op=nl.add, reduce_cmd=3)),
    ("perf_mode", lambda: mm(perf_mode="none")),
]


@pytest.mark.parametrize("arg,body", RAW_ENUMS, ids=[r[0] for r in RAW_ENUMS])
def test_raw_enum_constants_are_rejected(arg, body):
    """NKI 0.3.0: raw integer enum constants are rejected (e.g. dge_mode=3 for dge_mode.none)."""
    with pytest.raises(TypeError, match=rf"{arg} must be a nisa.\w+ member, got .*raw integer enum constants"):
        nki.simulate(nki.jit(body))()


def test_string_buffer_names_are_rejected():
    with pytest.raises(TypeError, match="buffer must be nl.sbuf, nl.psum"):
        nki.simulate(nki.jit(lambda: nl.ndarray((4, 4), nl.float32, buffer="sbuf")))()


def test_torch_tensor_argument_is_a_clear_type_error():
    torch = sys.modules.get("torch")   # importing torch costs seconds; the full suite has loaded it already
    x = torch.zeros(4, 4) if torch is not None else Tensor()

    @nki.jit
    def k(a, x):
        return store(load(x))

    with pytest.raises(TypeError, match="k argument x is a torch tensor; pass NumPy arrays"):
        nki.simulate(k)(np.zeros(2, F32), x)
