"""nkicpu refuses kernel code outside the Python subset NKI 0.6 compiles (nkicpu/subset.py).

Per rule: kernels that break it, and the nearest legal kernel, the same computation in the subset,
which runs and gives the right numbers. Then: a violation two calls deep in another module, a
nested @nki.jit kernel, the error naming function, file and line, the check on for every way a
kernel runs, and every kernel entry point of the project (kernels/) passing the check.
"""
import enum
import importlib
import inspect
import pathlib
import pkgutil
import re
import sys
from dataclasses import dataclass

import numpy as np
import pytest

import kernels
import nkicpu
import nkicpu_subset_helpers as helpers
from nkicpu.subset import REFUSED_BUILTINS
from nkicpu_subset_helpers import every_other_row, half_rows_out
from nkicpu_testing import F32, NkiValidationError, load, nisa, nki, nl, rand, store

X = rand((6, 4), F32)
CALLS = 0


def _row(x, i):
    return x[i:i + 1]


def _rows_to_hbm(x, tiles):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i in range(len(tiles)):
        nisa.dma_copy(dst=out[i:i + 1], src=tiles[i])
    return out


# -- comprehensions --------------------------------------------------------------------------
def comprehension_bad(x):
    return _rows_to_hbm(x, [load(x[i:i + 1]) for i in range(x.shape[0])])


def set_comprehension_bad(x):
    assert len({d for d in x.shape}) == 2, "two distinct dims"
    return store(load(x))


def dict_comprehension_bad(x):
    dims = {f"d{i}": x.shape[i] for i in range(2)}
    return store(load(x[0:dims["d0"]]))


def generator_bad(x):
    assert sum(d for d in x.shape) == 10, "6 + 4"
    return store(load(x))


def comprehension_good(x):
    tiles = []
    for i in range(x.shape[0]):
        tiles.append(load(x[i:i + 1]))
    return _rows_to_hbm(x, tiles)


# -- yield -----------------------------------------------------------------------------------
def _row_starts(n):
    for i in range(0, n, 2):
        yield i


def yield_bad(x):
    out = half_rows_out(x)
    j = 0
    for s in _row_starts(x.shape[0]):
        nisa.dma_copy(dst=out[j:j + 1], src=x[s:s + 1])
        j += 1
    return out


def yield_good(x):
    out = half_rows_out(x)
    every_other_row(x, out)
    return out


# -- lambda, inner def -----------------------------------------------------------------------
def lambda_bad(x):
    row = lambda i: x[i:i + 1]  # noqa: E731
    return _rows_to_hbm(x, [load(row(0)), load(row(1)), load(row(2)), load(row(3)), load(row(4)),
                            load(row(5))])


def inner_def_bad(x):
    def row(i):
        return x[i:i + 1]
    tiles = []
    for i in range(x.shape[0]):
        tiles.append(load(row(i)))
    return _rows_to_hbm(x, tiles)


def module_level_def_good(x):
    tiles = []
    for i in range(x.shape[0]):
        tiles.append(load(_row(x, i)))
    return _rows_to_hbm(x, tiles)


# -- raise -----------------------------------------------------------------------------------
def raise_bad(x):
    if x.shape[0] > nl.tile_size.pmax:
        raise ValueError(f"x has {x.shape[0]} rows, more than {nl.tile_size.pmax} partitions")
    return store(load(x))


def assert_good(x):
    assert x.shape[0] <= nl.tile_size.pmax, f"x has {x.shape[0]} rows, more than 128"
    return store(load(x))


# -- builtins, slice objects, starred targets ------------------------------------------------
def enumerate_bad(x):
    tiles = [load(x[0:3]), load(x[3:6])]
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i, t in enumerate(tiles):
        nisa.dma_copy(dst=out[3 * i:3 * i + 3], src=t)
    return out


def range_len_good(x):
    tiles = [load(x[0:3]), load(x[3:6])]
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for i in range(len(tiles)):
        nisa.dma_copy(dst=out[3 * i:3 * i + 3], src=tiles[i])
    return out


def slice_bad(x):
    rows = slice(0, 2)
    return store(load(x[rows]))


def slice_expression_good(x):
    return store(load(x[0:2]))


def starred_bad(x):
    n, *rest = x.shape
    t = nl.ndarray((n, rest[0]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return store(t)


def unpack_by_index_good(x):
    n = x.shape[0]
    rest = x.shape[1:]
    t = nl.ndarray((n, rest[0]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return store(t)


# -- dicts -----------------------------------------------------------------------------------
def _swap_two_rows(x, first, second):
    out = nl.ndarray((2, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[0:1], src=second)
    nisa.dma_copy(dst=out[1:2], src=first)
    return out


def int_dict_key_bad(x):
    rows = {0: load(x[0:1]), 1: load(x[1:2])}
    return _swap_two_rows(x, rows[0], rows[1])


def string_dict_key_good(x):
    rows = {"first": load(x[0:1]), f"sec{'ond'}": load(x[1:2])}
    return _swap_two_rows(x, rows["first"], rows["second"])


# -- classes ---------------------------------------------------------------------------------
@dataclass
class PlainTiling:
    rows: int


@dataclass
class Tiling(nl.NKIObject):
    rows: int

    def count(self, n):
        return n // self.rows


@dataclass
class BadMethodTiling(nl.NKIObject):
    rows: int

    def starts(self, n):
        return [i * self.rows for i in range(n // self.rows)]


class Order(enum.Enum):
    FORWARD = 1
    BACKWARD = 2


def _copy_in_tiles(x, tiling, order):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    n = x.shape[0] // tiling.rows
    for j in range(n):
        src = j if order == Order.FORWARD else n - 1 - j
        nisa.dma_copy(dst=out[j * tiling.rows:(j + 1) * tiling.rows],
                      src=load(x[src * tiling.rows:(src + 1) * tiling.rows]))
    return out


def plain_class_bad(x):
    return _copy_in_tiles(x, PlainTiling(3), Order.BACKWARD)


def class_in_kernel_bad(x):
    class LocalTiling(nl.NKIObject):
        rows = 3
    return _copy_in_tiles(x, LocalTiling(), Order.BACKWARD)


def nki_object_method_bad(x):
    tiling = BadMethodTiling(3)
    return _copy_in_tiles(x, tiling, Order.BACKWARD)


def nki_object_good(x):
    tiling = Tiling(3)
    assert tiling.count(x.shape[0]) == 2, "two tiles of 3 rows"
    return _copy_in_tiles(x, tiling, Order.BACKWARD)


# -- control flow, global state --------------------------------------------------------------
def try_bad(x):
    try:
        t = load(x)
    except ValueError:
        t = load(x[0:1])
    return store(t)


def with_bad(x):
    with open(__file__):
        t = load(x)
    return store(t)


def match_bad(x):
    match x.shape[0]:
        case 6:
            t = load(x)
        case _:
            t = load(x[0:1])
    return store(t)


def if_good(x):
    if x.shape[0] == 6:
        t = load(x)
    else:
        t = load(x[0:1])
    return store(t)


def global_bad(x):
    global CALLS
    CALLS += 1
    return store(load(x))


def pure_good(x):
    return store(load(x))


# (rule, breaking kernels, the nearest legal kernel, what it computes from X)
CASES = [
    ("subset-comprehension",
     [comprehension_bad, set_comprehension_bad, dict_comprehension_bad, generator_bad],
     comprehension_good, lambda x: x),
    ("subset-yield", [yield_bad], yield_good, lambda x: x[::2]),
    ("subset-lambda", [lambda_bad], module_level_def_good, lambda x: x),
    ("subset-inner-def", [inner_def_bad], module_level_def_good, lambda x: x),
    ("subset-raise", [raise_bad], assert_good, lambda x: x),
    ("subset-builtin", [enumerate_bad], range_len_good, lambda x: x),
    ("subset-slice", [slice_bad], slice_expression_good, lambda x: x[0:2]),
    ("subset-starred-target", [starred_bad], unpack_by_index_good, lambda x: x),
    ("subset-dict-key", [int_dict_key_bad], string_dict_key_good, lambda x: x[[1, 0]]),
    ("subset-class", [plain_class_bad, class_in_kernel_bad], nki_object_good,
     lambda x: np.concatenate([x[3:6], x[0:3]])),
    ("subset-control-flow", [try_bad, with_bad, match_bad], if_good, lambda x: x),
    ("subset-global", [global_bad], pure_good, lambda x: x),
]
BREAKING = [(rule, bad) for rule, bads, _, _ in CASES for bad in bads]


@pytest.mark.parametrize("rule,bad", BREAKING, ids=[bad.__name__ for _, bad in BREAKING])
def test_breaking_kernel_is_refused(rule, bad):
    with pytest.raises(NkiValidationError, match=re.escape(f"[{rule}]")):
        nki.simulate(nki.jit(bad))(X)


@pytest.mark.parametrize("rule,good,want", [(r, g, w) for r, _, g, w in CASES],
                         ids=[c[0] for c in CASES])
def test_nearest_legal_kernel_passes(rule, good, want):
    np.testing.assert_array_equal(nki.simulate(nki.jit(good))(X), want(X))


def test_every_subset_rule_has_cases():
    source = pathlib.Path(nkicpu.__file__).with_name("subset.py").read_text()
    rules = set(re.findall(r'rule_error\(\s*"(subset-[a-z-]+)"', source))
    assert rules == {c[0] for c in CASES}


@pytest.mark.parametrize("name", sorted(REFUSED_BUILTINS))
def test_every_refused_builtin(name, tmp_path, monkeypatch):
    """Each builtin of the list, called in a kernel of its own module."""
    (tmp_path / f"uses_{name}.py").write_text(f"from nkicpu_testing import load, store\n\n\n"
                                              f"def k(x):\n    {name}(x.shape)\n"
                                              f"    return store(load(x))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(f"uses_{name}")
    where = rf"k \(.*uses_{name}.py:5\)"   # the call's line in the module written above
    with pytest.raises(NkiValidationError, match=rf"\[subset-builtin\] {where}: {name}\(\)"):
        nki.simulate(nki.jit(module.k))(X)


def test_a_local_name_that_shadows_a_builtin_is_not_the_builtin():
    def k(x):
        zip = 2   # noqa: F841
        return store(load(x))

    def k2(x, all):
        return store(load(x[0:all]))

    np.testing.assert_array_equal(nki.simulate(nki.jit(k))(X), X)
    np.testing.assert_array_equal(nki.simulate(nki.jit(k2))(X, 3), X[0:3])


# -- kernel code is every function the kernel reaches ---------------------------------------
def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_violation_two_calls_deep_in_another_module_names_function_file_and_line():
    def k(x):
        out = half_rows_out(x)
        helpers.every_other_row_bad(x, out)   # a module attribute, resolved through the module
        return out

    line = _line_of(helpers._bad_starts, "for i in")
    with pytest.raises(NkiValidationError) as e:
        nki.simulate(nki.jit(k))(X)
    where = rf"_bad_starts \(\S*nkicpu_subset_helpers\.py:{line}\)"
    assert re.match(rf"\[subset-comprehension\] {where}: "
                    rf"a list comprehension .* build the list with a for loop and \.append\(\) "
                    rf"\(kernel code: reached from k -> every_other_row_bad -> _bad_starts\)$",
                    str(e.value)), str(e.value)


def test_the_same_helpers_in_the_subset_pass():
    def k(x):
        out = half_rows_out(x)
        every_other_row(x, out)
        return out

    np.testing.assert_array_equal(nki.simulate(nki.jit(k))(X), X[::2])


@nki.jit
def nested_bad(x):
    return store(load(x[0:len([d for d in x.shape])]))


def test_a_nested_jit_kernel_is_kernel_code():
    def outer(x):
        return nested_bad(x)

    with pytest.raises(NkiValidationError,
                       match=r"\[subset-comprehension\] nested_bad .*from outer -> nested_bad"):
        nki.simulate(nki.jit(outer))(X)


def test_the_methods_of_an_nki_object_class_a_kernel_builds_are_kernel_code():
    with pytest.raises(NkiValidationError, match=r"\[subset-comprehension\] BadMethodTiling.starts "
                                                 r".*reached from nki_object_method_bad -> starts"):
        nki.simulate(nki.jit(nki_object_method_bad))(X)


def test_a_function_passed_on_is_kernel_code():
    """The language guide's composable kernels pass functions as arguments: they are kernel code."""
    def apply(x, fn):
        return fn(x)

    def k(x):
        return apply(x, comprehension_bad)

    with pytest.raises(NkiValidationError, match=r"\[subset-comprehension\] comprehension_bad "
                                                 r".*reached from k -> comprehension_bad"):
        nki.simulate(nki.jit(k))(X)


def test_host_code_around_a_kernel_is_not_checked():
    """Comprehensions, lambdas and inner defs in the test around the kernel are host code."""
    rows = [i for i in range(X.shape[0])]
    make = lambda: nki.jit(pure_good)  # noqa: E731
    assert len(rows) == 6
    np.testing.assert_array_equal(nki.simulate(make())(X), X)


def test_the_check_is_on_for_every_way_a_kernel_runs():
    k = nki.jit(raise_bad)
    for run in (nki.simulate(k), nkicpu.capture(k), k, k[1]):
        with pytest.raises(NkiValidationError, match=r"\[subset-raise\]"):
            run(X)


def test_a_refused_kernel_issues_no_instruction():
    issued = []

    def k(x):
        t = load(x)
        issued.append(t)
        return _rows_to_hbm(x, [t for _ in range(1)])

    with pytest.raises(NkiValidationError, match=r"\[subset-comprehension\]"):
        nki.simulate(nki.jit(k))(X)
    assert issued == []   # refused before the kernel ran


# -- the project's kernels ----------------------------------------------------------------------
def project_kernels():
    """Every @nki.jit entry point defined in kernels/ and its subpackages (versions/)."""
    found = {}
    for info in pkgutil.walk_packages(kernels.__path__, "kernels."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, nkicpu.Kernel) and obj.fn.__module__ == module.__name__:
                found[f"{info.name.removeprefix('kernels.')}.{name}"] = obj
    return found


def test_project_kernels_are_found():
    names = set(project_kernels())
    assert {"gdn_block.gdn_block_tkg", "gdn_tkg.gdn_tkg", "conv1d_decode.conv1d_decode_kernel",
            "gated_delta_rule.gated_delta_rule_kernel", "rmsnorm_gated.rmsnorm_gated_kernel",
            "in_proj.in_proj_kernel", "gqa_repeat.gqa_repeat_kernel"} <= names, names


@pytest.mark.parametrize("name", sorted(project_kernels()))
def test_project_kernels_pass(name):
    nkicpu.subset.check_kernel(project_kernels()[name])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
