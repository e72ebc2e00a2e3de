"""One kernel run: its allocations, capacity accounting, engine registers and instruction record.

A launch grid `kernel[n]` runs its programs here in turns (nkicpu/grid.py), each as one physical
NeuronCore with its own SBUF/PSUM accounting and ScalarE/VectorE registers; they share only HBM.
Without a core_barrier a program runs to its end before the next starts; `nisa.core_barrier`
(`nki.lnc.core_barrier`) orders them: program 0 runs to its k-th barrier, then program 1 to its
k-th, and only then does either continue. On hardware the programs run at the same time, so the run
rejects a read of an HBM element another program wrote (unless the reader wrote it too) and a write
that changes the bits of an element another program wrote or read, unless a barrier on that element
lies between the two accesses: when every program has reached its k-th barrier, the run forgets who
touched the elements every program's barrier names (`data`), since what each program did to them
before the barrier is ordered before what any program does after it. A duplicate write of the same
bits is harmless: below its sharding threshold the NKI library's rmsnorm_tkg lets both cores of an
LNC=2 launch write the whole output (LIB core/subkernels/rmsnorm_tkg.py).
"""
import itertools
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .errors import rule_error
from .grid import Turns
from .memory import PMAX, Accounting, Allocation, MemoryRegion, dtype_name
from .record import AllocationInfo, Instruction

# The run this thread (or task) is in: `nl.*` and `nisa.*` calls find it here.
_active = ContextVar("nkicpu_run", default=None)


@dataclass
class _Program:
    """What each program of a grid (each physical core) has of its own in a run."""
    accounting: Accounting
    # ScalarE's 128 per-lane fp32 reduce registers; unset until a reduce_cmd resets them.
    scalar_reduce_regs: np.ndarray = field(default_factory=lambda: np.full(PMAX, np.nan, dtype=np.float32))
    # VectorE's per-lane fp32 accumulators (tensor_scalar_reduce, range_select); unset likewise.
    vector_reduce_regs: np.ndarray = field(default_factory=lambda: np.full(PMAX, np.nan, dtype=np.float32))
    shared_used: int = 0           # how many of program 0's shared_hbm allocations it has allocated again


class Run:
    def __init__(self, programs=None):
        self.programs = programs       # n of a launch grid kernel[n]; None without a grid
        self._program = [_Program(Accounting()) for _ in range(self.num_programs)]
        self.instructions = []
        self.allocations = {}          # id -> AllocationInfo of the kernel's own tensors
        self.arguments = {}            # position (or keyword) -> id of a NumPy kernel argument
        self._ids = itertools.count(1)  # allocation ids: every run numbers its own from 1
        self.core = 0                  # the program (physical core) now running: selects its state below
        self._shared = []              # grid: program 0's shared_hbm allocations, in allocation order
        self._hbm_use = {}             # grid: alloc id -> _HbmUse of a shared HBM allocation
        self._turns = None             # grid: the programs' turns (grid.Turns) while they run
        self._barrier_data = []        # grid: the `data` access of each program's barrier of this round

    @property
    def num_programs(self):
        return self.programs or 1

    # The running program's own state.
    accounting = property(lambda self: self._program[self.core].accounting)
    scalar_reduce_regs = property(lambda self: self._program[self.core].scalar_reduce_regs)
    vector_reduce_regs = property(lambda self: self._program[self.core].vector_reduce_regs)

    @property
    def accountings(self):
        return [p.accounting for p in self._program]

    def __enter__(self):
        if _active.get() is not None:
            raise RuntimeError("nkicpu: a kernel is already running; a nested @nki.jit call is inlined, "
                               "not simulated again")
        self._token = _active.set(self)
        return self

    def __exit__(self, *exc):
        _active.reset(self._token)

    # -- programs of a launch grid -------------------------------------------------------------
    def run_programs(self, body):
        """Run `body(core)` for every program, in turns (grid.Turns); their results by program id."""
        self._turns = Turns(self, body)
        try:
            return self._turns.run_all()
        finally:
            self._turns = None

    def end_program(self):
        """The running program ended: after 0, it must have made all of program 0's shared_hbm allocations."""
        used = self._program[self.core].shared_used
        if self.core and used != len(self._shared):
            raise rule_error("lnc-shared-hbm", f"program {self.core}",
                             f"allocated {used} nl.shared_hbm tensor(s), program 0 allocated "
                             f"{len(self._shared)}: every program of a launch grid must run the same control flow")

    def core_barrier(self, data, engine, name):
        """The running program calls core_barrier on HBM access `data`: record it on `engine`, then
        wait (grid.Turns) until every program has reached its barrier of the same round."""
        k = self._turns.reached[self.core] + 1
        ins = Instruction(index=len(self.instructions), engine=engine, opcode="core_barrier", reads=[],
                          writes=[data], args={"round": k, "cores": (0, 1), "name": name}, core=self.core)
        self.instructions.append(ins)  # not a race: it changes no element (see _check_races)
        self._barrier_data.append(data)
        self._turns.barrier(self.core)
        return ins

    def pass_barrier(self):
        """Every program has reached its barrier of this round: accesses before it are ordered
        before accesses after it, on the elements every program's barrier names."""
        accesses, self._barrier_data = self._barrier_data, []
        for alloc in {a.alloc for a in accesses}:
            use = self._hbm_use[alloc]
            ordered = np.ones(use.data.size, dtype=bool)
            for a in accesses:
                named = np.zeros(use.data.size, dtype=bool)
                if a.alloc == alloc:
                    _elements(named, a)[...] = True
                ordered &= named
            use.writers[ordered] = 0
            use.readers[ordered] = 0

    # -- allocation ----------------------------------------------------------------------------
    def allocate(self, shape, dtype, buffer, name):
        """The storage of an `nl.ndarray`; in a grid, the k-th shared_hbm one is program 0's k-th."""
        shared = self.num_programs > 1 and buffer is MemoryRegion.shared_hbm
        if shared and self.core:
            return self._shared_again(shape, dtype, name)
        alloc = Allocation(next(self._ids), shape, dtype, buffer, name, self.accounting)
        self.allocations[alloc.id] = AllocationInfo(alloc.name, buffer.value, dtype_name(dtype), alloc.shape,
                                                    alloc.region)
        if shared:
            self._shared.append(alloc)
        self.track(alloc)
        return alloc

    def argument(self, key, array, dtype, buffer):
        """The HBM storage of NumPy kernel argument `key` (its position, or its keyword): a copy."""
        alloc = Allocation(next(self._ids), array.shape or (1,), dtype, buffer, f"arg{key}")
        alloc.data[...] = array.reshape(-1)
        self.arguments[key] = alloc.id
        self.track(alloc)
        return alloc

    def _shared_again(self, shape, dtype, name):
        program = self._program[self.core]
        k = program.shared_used
        where = f"nl.ndarray({name or 'unnamed'}) in program {self.core}"
        if k == len(self._shared):
            raise rule_error("lnc-shared-hbm", where, f"is nl.shared_hbm allocation #{k}, but program 0 made only "
                                                      f"{k}: every program of a launch grid must run the same "
                                                      f"control flow")
        alloc = self._shared[k]
        if alloc.shape != tuple(shape) or dtype_name(alloc.dtype) != dtype_name(dtype):
            raise rule_error("lnc-shared-hbm", where,
                             f"nl.shared_hbm allocation #{k} is {list(shape)} {dtype_name(dtype)}, but program 0's is "
                             f"{list(alloc.shape)} {dtype_name(alloc.dtype)}; it is the same storage in every program")
        program.shared_used += 1
        return alloc

    def track(self, alloc):
        """In a grid, follow who reads and writes each element of a shared HBM allocation, and the
        bits it held after its last write (`shadow`), to tell a changing write from a duplicate."""
        if self.num_programs > 1 and alloc.buffer is MemoryRegion.shared_hbm:
            size = alloc.data.size
            self._hbm_use[alloc.id] = _HbmUse(alloc.name, alloc.data, alloc.data.copy(),
                                              np.zeros(size, dtype=np.uint8), np.zeros(size, dtype=np.uint8))

    # -- the instruction record ----------------------------------------------------------------
    def record(self, engine, opcode, reads, writes, **args):
        ins = Instruction(index=len(self.instructions), engine=engine, opcode=opcode,
                          reads=list(reads), writes=list(writes), args=args, core=self.core)
        if self._hbm_use:
            self._check_races(ins)
        self.instructions.append(ins)
        return ins

    def _check_races(self, ins):
        mine = np.uint8(1 << self.core)
        others = ~mine
        for access, writes in [(a, False) for a in ins.reads] + [(a, True) for a in ins.writes]:
            use = self._hbm_use.get(access.alloc)
            if use is None:
                continue
            w, r = _elements(use.writers, access), _elements(use.readers, access)
            if writes:  # racy only if it changes bits another program wrote or read
                new, old = _elements(use.data, access), _elements(use.shadow, access)
                changed = _bits(new) != _bits(old)
                races = [("wrote", w, changed & (w & others != 0)), ("read", r, changed & (r & others != 0))]
            else:        # racy if another program wrote it and this one did not
                races = [("wrote", w, (w & others != 0) & (w & mine == 0))]
            for did, bits, bad in races:
                if bad.any():
                    first = np.flatnonzero(bad.ravel())[0]
                    other = int(bits.ravel()[first] & others).bit_length() - 1
                    raise rule_error("lnc-race", f"nisa.{ins.opcode} in program {self.core}",
                                     f"{'changes' if writes else 'reads'} {int(bad.sum())} element(s) of {use.name} "
                                     f"that program {other} {did}; the programs of a launch grid run at the same time "
                                     f"on hardware, and only a core_barrier on {use.name} between the two accesses "
                                     f"orders them")
            if writes:
                w |= mine
                old[...] = new
            else:
                r |= mine
            if access.dynamic is not None:   # _elements gave copies: store them back
                at = access.indices()
                if writes:
                    use.writers[at], use.shadow[at] = w, old
                else:
                    use.readers[at] = r


@dataclass
class _HbmUse:
    """One shared HBM allocation of a grid: per element, the programs that wrote / read it (bit per core)."""
    name: str
    data: np.ndarray
    shadow: np.ndarray
    writers: np.ndarray
    readers: np.ndarray


def _elements(array, access):
    """A view of `array` (one entry per storage element) over the elements an access touches; for an
    indirect access, a copy of the elements it moved in this run (`record.Access.indices`)."""
    if access.dynamic is not None:
        return array[access.indices()]
    counts = [n for _, n in access.pattern]
    strides = [s * array.itemsize for s, _ in access.pattern]
    return as_strided(array[access.offset:], shape=counts, strides=strides)


def _bits(a):
    return a.view(np.dtype(f"u{a.itemsize}"))


def current_run(where):
    run = _active.get()
    if run is None:
        raise RuntimeError(f"nkicpu: {where} is only valid inside a running kernel (nki.simulate(kernel)(...))")
    return run


def running():
    return _active.get() is not None
