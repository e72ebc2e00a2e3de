"""The programs of a launch grid `kernel[n]`, in turns: one runs at a time, and core_barrier orders them.

On hardware the programs of an LNC=2 launch run at the same time, one per physical core, and
`nisa.core_barrier` makes each wait until every one has reached it (SDK isa stub, core_barrier).
Here they take turns, the same way every run: program 0 runs until its first core_barrier (or its
end), then program 1 until its first, and so on; when the last program reaches its k-th barrier,
program 0 continues to its (k+1)-th, then program 1, and so on. So everything a program does after
its k-th barrier comes, in the run and its instruction record, after everything every program did
before its own k-th barrier, which is what the barrier guarantees on hardware. Every program must
call core_barrier the same number of times (rule `lnc-barrier`).

A program suspended at a barrier needs a stack of its own. The caller's thread runs the programs
one after the other while none has to wait; a program that must wait at a barrier starts the next
program in a new thread. Only the program whose turn it is runs, the others wait on one condition
variable, so the run stays deterministic; a launch without a barrier starts no thread. (The SDK
simulator runs the two programs of an LNC=2 launch as two threads at the same time,
nki/guides/nki_simulator.rst.)
"""
import contextvars
import threading

from .errors import rule_error


class _Abandon(BaseException):
    """Unwinds a program suspended at a barrier after another program failed (not an Exception:
    nothing between the barrier and the thread's start catches it)."""


def _mismatch(calls, program, ended, after):
    return rule_error("lnc-barrier", "core_barrier",
                      f"program {program} called it {calls} time(s), program {ended} ended after {after}: "
                      f"every program of a launch grid must call core_barrier the same number of times")


class Turns:
    """Runs `body(core)` for every program of `run`'s grid, in turns ordered by core_barrier."""

    def __init__(self, run, body):
        self.run, self.body = run, body
        self.n = run.num_programs
        self.cond = threading.Condition()
        self.turn = 0                    # the program that may run now
        self.reached = [0] * self.n      # the core_barrier calls each program has made
        self.started = [False] * self.n
        self.ended = [False] * self.n
        self.results = [None] * self.n
        self.threads = {}                # program -> its thread, for programs not run by the caller's
        self.caller = threading.current_thread()
        self.error = None                # the first exception any program raised
        self.done = False

    def run_all(self):
        """Run every program; their results by program id, or the first exception any program raised."""
        core = 0
        while True:
            self._program(core)
            with self.cond:
                self.cond.wait_for(lambda: self.error is not None or self.done or not self.started[self.turn])
                if self.error is not None or self.done:
                    break
                core = self.turn
        for core, thread in self.threads.items():  # after an error: unwind the suspended programs, one at a time
            with self.cond:
                self.turn = core
                self.cond.notify_all()
            thread.join()
        if self.error is not None:
            raise self.error
        return self.results

    def _program(self, core):
        with self.cond:
            self.started[core] = True
            self.run.core = core
        try:
            result = self.body(core)
            with self.cond:
                self._end(core)
                self.results[core] = result
        except _Abandon:
            pass
        except BaseException as e:  # noqa: B036  re-raised by run_all in the caller's thread
            with self.cond:
                if self.error is None:
                    self.error = e
                self.cond.notify_all()

    def _end(self, core):
        """Program `core` returned: no other may have called core_barrier more often; the next one's turn."""
        self.ended[core] = True
        for other in range(self.n):
            if self.reached[other] > self.reached[core]:
                raise _mismatch(self.reached[other], other, core, self.reached[core])
        if core + 1 == self.n:      # every earlier program ended before this one's last stretch
            self.done = True
        else:
            self._give_turn(core + 1, suspend=False)
        self.cond.notify_all()

    def barrier(self, core):
        """Program `core` reached a core_barrier: wait until every program has reached it and it is
        this program's turn again."""
        with self.cond:
            k = self.reached[core] + 1
            for other in range(self.n):
                if self.ended[other] and self.reached[other] < k:
                    raise _mismatch(k, core, other, self.reached[other])
            self.reached[core] = k
            if core + 1 == self.n:  # the last to reach it: every program has, in program order
                self.run.pass_barrier()
                self._give_turn(0, suspend=True)
            else:
                self._give_turn(core + 1, suspend=True)
            self.cond.notify_all()
            caller = threading.current_thread() is self.caller
            self.cond.wait_for(lambda: self.turn == core or (caller and self.error is not None))
            if self.error is not None:
                raise _Abandon()
            self.run.core = core

    def _give_turn(self, core, suspend):
        """The turn passes to `core`; a program not started yet starts in a thread of its own if the
        one passing the turn waits at a barrier or runs in such a thread (else the caller's thread
        starts it, in run_all)."""
        self.turn = core
        caller_free = not suspend and threading.current_thread() is self.caller   # back to run_all, which starts it
        if self.started[core] or caller_free:
            return
        self.started[core] = True
        context = contextvars.copy_context()    # the run is a ContextVar (nkicpu/run.py)
        thread = threading.Thread(target=context.run, args=(self._program, core), daemon=True,
                                  name=f"nkicpu program {core}")
        self.threads[core] = thread
        thread.start()
