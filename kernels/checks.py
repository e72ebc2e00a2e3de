"""Trace-time input checks shared by every kernel, in the NKI library's `kernel_assert` style.

Each check is an `assert` whose message names the argument, what was expected and what it got,
so a reader who passes a wrong tensor learns which one and why before anything runs.
"""


def expect(condition, arg, expected, got):
    assert condition, f"{arg}: expected {expected}, got {got}"


def expect_shape(t, arg, shape):
    """`shape` may hold None for a dim that is free to vary."""
    ok = len(t.shape) == len(shape)
    want = "["
    for i in range(len(shape)):
        if ok and shape[i] is not None and shape[i] != t.shape[i]:
            ok = False
        want = want + (", " if i else "") + ("*" if shape[i] is None else str(shape[i]))
    expect(ok, arg, f"shape {want}]", list(t.shape))


def expect_rank(t, arg, rank):
    expect(len(t.shape) == rank, arg, f"a {rank}-d tensor", f"shape {list(t.shape)}")


def expect_dtype(t, arg, dtypes):
    """`dtypes`: one dtype or a tuple of them."""
    if not isinstance(dtypes, tuple):
        dtypes = (dtypes,)
    ok = False
    names = ""
    for i in range(len(dtypes)):
        ok = ok or t.dtype == dtypes[i]
        names = names + (" or " if i else "") + str(dtypes[i])
    expect(ok, arg, f"dtype {names}", str(t.dtype))


def expect_multiple(value, of, arg, what):
    expect(value % of == 0, arg, f"{what} a multiple of {of}", value)
