"""Trace-time input validation shared by every kernel (the NKI library's `kernel_assert` idea).

Each check raises ValueError naming the argument, what was expected and what it got, so a
reader who passes a wrong tensor learns which one and why before anything runs.
"""


def expect(condition, arg, expected, got):
    if not condition:
        raise ValueError(f"{arg}: expected {expected}, got {got}")


def expect_shape(t, arg, shape):
    """`shape` may hold None for a dim that is free to vary."""
    ok = len(t.shape) == len(shape) and all(e is None or e == g for e, g in zip(shape, t.shape))
    want = "[" + ", ".join("*" if e is None else str(e) for e in shape) + "]"
    expect(ok, arg, f"shape {want}", list(t.shape))


def expect_rank(t, arg, rank):
    expect(len(t.shape) == rank, arg, f"a {rank}-d tensor", f"shape {list(t.shape)}")


def expect_dtype(t, arg, *dtypes):
    names = " or ".join(_name(d) for d in dtypes)
    expect(any(t.dtype == d for d in dtypes), arg, f"dtype {names}", _name(t.dtype))


def expect_multiple(value, of, arg, what):
    expect(value % of == 0, arg, f"{what} a multiple of {of}", value)


def _name(dtype):
    return getattr(dtype, "name", str(dtype))
