"""The kernel source reads as the book teaches it: no function in kernels/ runs past
MAX_FUNCTION_LINES lines of code or takes more than MAX_PARAMETERS parameters, except the `@nki.jit`
entry points and the bodies that take a kernel's arguments plus at most EXTRA_PARAMETERS more (a
fused step's plan and body); and every statement of the shipped kernel's module runs over the
sweep's shards (kernels/gdn_block.py: no switch for an earlier step, no dead branch)."""
import ast
import sys
from pathlib import Path

import kernels  # noqa: F401  registers `nki`
import nki
from kernels import gdn_block
from kernels.configs import SWEEP_BATCHES, SWEEP_SHARDS
from kernels.reference import pool_inputs
from kernels.reference import make_inputs, token_inputs
from kernels.registry import POOL_ARGS

KERNELS = Path(kernels.__file__).parent
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 10
EXTRA_PARAMETERS = 4


def _functions():
    """(path, ast node) of every function and method in kernels/."""
    for path in sorted(KERNELS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                yield path, node


def _params(node):
    return [a.arg for a in node.args.args + node.args.kwonlyargs if a.arg != "self"]


def _is_entry(node):
    return any(isinstance(d, ast.Attribute) and d.attr == "jit" for d in node.decorator_list)


def _code_lines(path, node):
    """Lines of code of a function: not its docstring, blank lines or comment lines."""
    lines = path.read_text().splitlines()
    body = node.body
    doc = range(0)
    if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        doc = range(body[0].lineno, body[0].end_lineno + 1)
    return sum(1 for n in range(node.lineno, node.end_lineno + 1)
               if n not in doc and lines[n - 1].strip() and not lines[n - 1].strip().startswith("#"))


ENTRY_PARAMS = [set(_params(node)) for _, node in _functions() if _is_entry(node)]


def test_functions_are_short_and_take_few_parameters():
    long, wide = [], []
    for path, node in _functions():
        where = f"{path.relative_to(KERNELS.parent)}:{node.lineno} {node.name}"
        if _code_lines(path, node) > MAX_FUNCTION_LINES:
            long.append(f"{where} ({_code_lines(path, node)} lines)")
        params = set(_params(node))
        body_of_a_kernel = any(e <= params and len(params) - len(e) <= EXTRA_PARAMETERS
                               for e in ENTRY_PARAMS)
        if len(params) > MAX_PARAMETERS and not _is_entry(node) and not body_of_a_kernel:
            wide.append(f"{where} ({len(params)} parameters)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines of code: {long}"
    assert not wide, f"functions over {MAX_PARAMETERS} parameters: {wide}"


def _statements(module):
    """Line numbers of the executable statements of a module's functions (docstrings aside)."""
    tree = ast.parse(Path(module.__file__).read_text())
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for stmt in ast.walk(node):
                if isinstance(stmt, ast.stmt) and not isinstance(stmt, ast.FunctionDef) and not (
                        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                    lines.add(stmt.lineno)
    return lines


def test_every_statement_of_the_shipped_kernel_runs_over_the_sweep():
    """kernels/gdn_block.py over the sweep's shards at every sweep batch, T = 1 and 4, one core and
    two, all three forms: each statement of its functions runs at least once."""
    path = gdn_block.__file__
    ran = set()

    def trace(frame, event, arg):
        if frame.f_code.co_filename != path:
            return None
        if event == "line":
            ran.add(frame.f_lineno)
        return trace

    sys.settrace(trace)
    try:
        for shape in SWEEP_SHARDS:
            for B in SWEEP_BATCHES:
                for T in (1, 4):
                    s = shape.with_batch(B)
                    x = make_inputs(s, seed=1) if T == 1 else token_inputs(s, T, seed=1)
                    pool = pool_inputs(x)
                    for kernel, args in ((gdn_block.gdn_block_tkg, x.values()),
                                         (gdn_block.gdn_block_tkg_verify, x.values()),
                                         (gdn_block.gdn_block_tkg_pool,
                                          [pool[n] for n in POOL_ARGS])):
                        for lnc in (1, 2):
                            run = kernel[lnc] if lnc > 1 else kernel
                            nki.simulate(run)(*args)
                    if not _statements(gdn_block) - ran:
                        return
    finally:
        sys.settrace(None)
    missing = sorted(_statements(gdn_block) - ran)
    assert not missing, f"statements of kernels/gdn_block.py never run over the sweep: {missing}"
