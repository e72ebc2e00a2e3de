"""Trace-time input checks shared by every kernel, in the NKI library's `kernel_assert` style.

Each check is an `assert` whose message names the argument, what was expected and what it got,
so a reader who passes a wrong tensor learns which one and why before anything runs.
"""


def expect(condition, arg, expected, got):
    assert condition, f"{arg}: expected {expected}, got {got}"


def expect_shape(t, arg, shape):
    """`shape` may hold None for a dim that is free to vary (any size >= 1)."""
    ok = len(t.shape) == len(shape)
    want = "["
    for i in range(len(shape)):
        if ok and (t.shape[i] < 1 if shape[i] is None else shape[i] != t.shape[i]):
            ok = False
        want = want + (", " if i else "") + ("*" if shape[i] is None else str(shape[i]))
    expect(ok, arg, f"shape {want}]", list(t.shape))


def expect_rank(t, arg, rank):
    """A `rank`-d tensor with no empty dim: a size-0 dim, caught where a kernel first reads an
    argument's shape, would otherwise reach a division or an allocation unnamed."""
    expect(len(t.shape) == rank, arg, f"a {rank}-d tensor", f"shape {list(t.shape)}")
    expect(_nonempty(t.shape), arg, "no empty dim (every dim >= 1)", f"shape {list(t.shape)}")


def _nonempty(shape):
    ok = True
    for i in range(len(shape)):
        ok = ok and shape[i] >= 1
    return ok


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
