"""Kernel helpers in a module of their own, for the transitive cases of tests/test_nkicpu_subset.py:
a kernel reaches `_bad_starts` two calls deep, through `every_other_row_bad`."""
import nki.isa as nisa
import nki.language as nl


def every_other_row_bad(x, out):
    """DMA rows 0, 2, 4, ... of x into out; its helper builds the row list with a comprehension."""
    starts = _bad_starts(x.shape[0])
    for j in range(len(starts)):
        nisa.dma_copy(dst=out[j:j + 1], src=x[starts[j]:starts[j] + 1])


def every_other_row(x, out):
    """The same in the subset."""
    starts = _starts(x.shape[0])
    for j in range(len(starts)):
        nisa.dma_copy(dst=out[j:j + 1], src=x[starts[j]:starts[j] + 1])


def _bad_starts(n):
    return [i for i in range(0, n, 2)]


def _starts(n):
    starts = []
    for i in range(0, n, 2):
        starts.append(i)
    return starts


def half_rows_out(x):
    return nl.ndarray(((x.shape[0] + 1) // 2, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
