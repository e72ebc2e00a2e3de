"""What passes between the two physical NeuronCores of an LNC=2 launch: `core_barrier` runs (the
programs wait for each other, nkicpu/grid.py); `sendrecv` is not modeled. `nki.isa` (NKI 0.7's
names) and `nki.lnc` (NKI 0.8's) both call these.
"""
from .errors import not_modeled, rule_error
from .operands import NkiInstruction, engine_name, tensor_arg
from .record import access_of
from .run import current_run


# The engines a barrier may run on: the compute engines the cost model has queues for. The stub
# names none; SyncE has no instruction queue in nkicpu's model (nkicpu/schedule.py).
_BARRIER_ENGINES = ("gpsimd", "vector", "scalar", "tensor")


def core_barrier(where, data, cores, engine, name):
    """A core_barrier (SDK isa stub, core_barrier): each core updates a semaphore of the other and
    waits for the other's, on `engine` only (GpSimd by default; `engine.unknown`, the default
    before NKI 0.3.0, is GpSimd too: nki/migration/index.rst); `cores` is (0, 1), the two physical
    cores of an LNC=2 launch; `data` is the shared HBM tensor both cores access around it.

    The programs of the launch wait for each other here (nkicpu/grid.py); the run stops checking
    accesses to `data` on either side of the barrier for races, and the barrier is recorded on
    its engine as writing `data` (it changes no element, but for the cost model's dependency rule
    every later access to `data` on this core must wait for it and it for every earlier one).

    The NKI library also calls it with `cores=(0)` when it runs on one shard, and once with an SBUF
    tile as `data` (LIB core/moe/moe_cte/bwmm_shard_on_I.py); the stub allows neither, and nkicpu
    follows the stub."""
    tensor_arg(data, where, "data")
    eng = engine_name(engine, where)
    run = current_run(where)
    if run.programs != 2:
        launch = "launched without a grid" if run.programs is None else f"launched as kernel[{run.programs}]"
        raise rule_error("lnc-barrier", where, f"the kernel was {launch}; core_barrier synchronises the two "
                                               f"physical cores of an LNC=2 launch kernel[2] (nkicpu does not "
                                               f"model separate LNC=1 launches on the two cores of a pair)")
    if not isinstance(cores, (tuple, list)) or tuple(cores) != (0, 1):
        raise rule_error("lnc-barrier", where, f"only cores=(0, 1) is supported (the two physical cores of an "
                                               f"LNC=2 launch), got cores={cores!r}")
    if data.buffer.value != "shared_hbm":
        raise rule_error("lnc-barrier", where, f"data must be in shared HBM (nl.shared_hbm, or a kernel argument "
                                               f"of a launch grid), got {data!r} in {data.buffer.name}")
    eng = "gpsimd" if eng == "unknown" else eng
    if eng not in _BARRIER_ENGINES:
        raise not_modeled(f"{where} on engine.{eng} (it runs on {', '.join(_BARRIER_ENGINES)} here)")
    return NkiInstruction(run.core_barrier(access_of(data), eng, name))


def sendrecv(where):
    """Refuse `where` (nisa.sendrecv, nki.lnc.sendrecv): the programs of a launch grid run in turns
    here and cannot exchange SBUF data."""
    raise not_modeled(f"{where}: the programs of a launch grid run in turns here and cannot exchange "
                      f"SBUF data")
