"""One kernel run: its allocations, capacity accounting, engine registers and instruction record."""
import numpy as np

from .memory import PMAX, Accounting
from .record import Instruction

_current = None


class Run:
    def __init__(self):
        self.accounting = Accounting()
        self.instructions = []
        self.allocations = {}          # id -> (name, buffer, dtype, shape): metadata only
        # ScalarE's 128 per-lane fp32 reduce registers; unset until a reduce_cmd resets them.
        self.scalar_reduce_regs = np.full(PMAX, np.nan, dtype=np.float32)
        self.core = 0                  # the program (physical core) now running; see Kernel.__getitem__

    def __enter__(self):
        global _current
        if _current is not None:
            raise RuntimeError("nkicpu: a kernel is already running; a nested @nki.jit call is inlined, "
                               "not simulated again")
        _current = self
        return self

    def __exit__(self, *exc):
        global _current
        _current = None

    def record(self, engine, opcode, reads, writes, **args):
        ins = Instruction(index=len(self.instructions), engine=engine, opcode=opcode,
                          reads=list(reads), writes=list(writes), args=args, core=self.core)
        self.instructions.append(ins)
        return ins


def current_run(where):
    if _current is None:
        raise RuntimeError(f"nkicpu: {where} is only valid inside a running kernel (nki.simulate(kernel)(...))")
    return _current


def running():
    return _current is not None
