"""The `nki.isa` enums (engine, reduce_cmd, dge_mode, oob_mode, matmul_perf_mode, nc_version,
dma_engine), their deprecated aliases, the `nki.isa.constants` module the NKI library imports them
from, and the check that an enum argument is a member of its enum.

Members follow the Neuron SDK 2.32 isa stub (nki/api/nki/isa/__init__.py); `nki.isa` re-exports
them all.
"""
from enum import Enum
from types import ModuleType


class engine(Enum):
    tensor = 1
    vector = 5
    scalar = 2
    gpsimd = 3
    dma = 4
    sync = 6
    unknown = 0


# Deprecated aliases the SDK isa stub still documents ("deprecated: use engine.tensor", ...).
tensor_engine, vector_engine, scalar_engine = engine.tensor, engine.vector, engine.scalar
gpsimd_engine, unknown_engine = engine.gpsimd, engine.unknown


class reduce_cmd(Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(Enum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(Enum):
    error = 0
    skip = 1


class matmul_perf_mode(Enum):
    none = "none"
    double_row = "double_row"


class nc_version(Enum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(Enum):
    dma = 1
    gpsimd_dma = 2


# `nki.isa.constants`: not in the SDK API stubs or docs, but the module the NKI library imports these
# enums from (`from nki.isa.constants import dge_mode, oob_mode`, LIB core/moe/moe_cte/moe_cte_utils.py;
# `matmul_perf_mode`, core/output_projection/output_projection_tkg.py); only those names are in it.
constants = ModuleType("nki.isa.constants", "The nki.isa enums under the module path the NKI library imports.")
constants.dge_mode, constants.oob_mode, constants.matmul_perf_mode = dge_mode, oob_mode, matmul_perf_mode


REDUCE_CMD = reduce_cmd  # the enum, under a name the `reduce_cmd=` parameters do not shadow
ENUMS = {"engine": engine, "reduce_cmd": reduce_cmd, "dge_mode": dge_mode, "oob_mode": oob_mode,
         "perf_mode": matmul_perf_mode}


def check_enum(value, arg, where):
    """An enum argument must be a member of its nisa enum; raw integers are rejected (NKI 0.3.0)."""
    cls = ENUMS[arg]
    if not isinstance(value, cls):
        raise TypeError(f"{where}: {arg} must be a nisa.{cls.__name__} member, got {value!r} "
                        f"(raw integer enum constants are rejected since NKI 0.3.0)")
    return value
