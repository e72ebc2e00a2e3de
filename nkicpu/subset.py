"""The Python subset NKI 0.6 compiles, checked on the source of a kernel before it runs.

NKI 0.6's `@nki.jit` parses a subset of Python instead of running it, and the SDK's simulator
guide warns that a kernel using anything else "will execute successfully on the simulator but
fail to compile for hardware" (nki/guides/nki_simulator.rst). nkicpu runs kernels as Python, so it
reads their source (`ast`) and refuses what the compiler would. These are NKI 0.6's rules: NKI 0.7
traces kernels in Python (announce-nki-specialization-change.html), which accepts more, so a kernel
within the subset compiles under both; nkicpu keeps it for kernels that must still build with 0.6. Kernel code is the body of the
kernel and of every project function it reaches: called, passed on, a nested `@nki.jit` kernel,
the methods of an `NKIObject` class it builds; resolved through closures, `__globals__` and module
or class attributes. nki / nkicpu, the standard library, installed packages and builtins are not
kernel code. The rules, their sources and what to write instead are in the book's nkicpu chapter.
"""
import ast
import builtins
import enum
import linecache
import os
import site
import sys
import sysconfig
import types
import weakref

from .errors import NkiValidationError, rule_error
from .language import NKIObject

# Builtins kernel code may not call, with what to write instead. None has a public "unsupported"
# statement; the NKI library's kernels never call them, and all but the getattr family and
# any/all return an iterator, which is none of the value types of the NKI language guide.
REFUSED_BUILTINS = {
    "iter": "index the list or tuple: `for i in range(len(xs))`",
    "next": "index the list or tuple: `xs[i]`",
    "enumerate": "`for i in range(len(xs)):` then `x = xs[i]`",
    "zip": "`for i in range(len(xs)):` then `xs[i]`, `ys[i]`",
    "map": "a for loop that appends to a list",
    "filter": "a for loop with an if that appends to a list",
    "reversed": "`for i in range(len(xs) - 1, -1, -1)`",
    "getattr": "plain attribute access `obj.name`, or a dict with string keys",
    "setattr": "plain attribute assignment `obj.name = value`",
    "hasattr": "an explicit flag or `is None` default",
    "delattr": "plain attribute assignment",
    "any": "a for loop that sets a flag, or `a or b or c`",
    "all": "a for loop that clears a flag, or `a and b and c`",
}

_LIBRARY_DIRS = tuple(os.path.realpath(p) + os.sep for p in {
    *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
    *site.getsitepackages()})
_passed = weakref.WeakSet()  # functions whose whole reach passed: each is read once
_module_trees = {}            # filename -> its parsed source (None without one)


def check_kernel(fn):
    """Refuse (NkiValidationError naming the rule) kernel code outside the compiled subset."""
    entry = _project_function(fn)
    todo = [(entry, (entry,))] if entry is not None else []  # (function, the chain that reached it)
    seen = set()
    while todo:
        f, chain = todo.pop()
        if f in seen or f in _passed:
            continue
        seen.add(f)
        node, filename = _definition(f)
        if node is None:
            continue  # no source to read (generated, e.g. a dataclass __init__)
        checker = _Checker(f, node, filename, chain)
        try:
            checker.check()
        except NkiValidationError as e:
            raise e.with_traceback(None) from None  # the reader's traceback ends here, not in ast
        for g in checker.reached:
            todo.append((g, chain + (g,)))
    _passed.update(seen)


def _is_project_file(filename):
    if not filename or filename.startswith("<") and not linecache.getlines(filename):
        return False
    return not os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def _is_library_module(name):
    return name.split(".")[0] in ("nki", "nkicpu") or name in sys.builtin_module_names


def _project_function(obj):
    """The plain function behind `obj` if it is project code, else None."""
    if _is_library_module(type(obj).__module__):   # an nki.jit kernel: its function, as functools
        obj = getattr(obj, "__dict__", {}).get("__wrapped__", obj)   # wrappers keep it
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    if not isinstance(obj, types.FunctionType) or _is_library_module(obj.__module__ or ""):
        return None
    return obj if _is_project_file(obj.__code__.co_filename) else None


def _project_class(obj):
    if not isinstance(obj, type) or _is_library_module(obj.__module__):
        return False
    module = sys.modules.get(obj.__module__)
    return _is_project_file(getattr(module, "__file__", None) or "")


def _definition(fn):
    """The ast node that defines `fn` (a def or a lambda) and its file."""
    code = fn.__code__
    filename = code.co_filename
    if filename not in _module_trees:
        lines = linecache.getlines(filename, fn.__globals__)
        _module_trees[filename] = ast.parse("".join(lines)) if lines else None
    tree = _module_trees[filename]
    if tree is None:
        return None, filename
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            first, name = node.lineno, "<lambda>"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first, name = min([d.lineno for d in node.decorator_list] + [node.lineno]), node.name
        else:
            continue
        if (first, name) == (code.co_firstlineno, code.co_name):
            found.append(node)
    if len(found) > 1:  # several lambdas on one line: the one whose span holds its body's code
        start = min((p[0], p[2]) for p in code.co_positions() if None not in (p[0], p[2]))
        found = [n for n in found
                 if (n.lineno, n.col_offset) <= start <= (n.end_lineno, n.end_col_offset)]
    return (found[0] if found else None), filename


def _local_names(node):
    a = node.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(al.asname or al.name).split(".")[0] for al in n.names}
    return names


class _Checker(ast.NodeVisitor):
    """Visits one function's body; raises at the first construct outside the subset and collects
    the project functions it reaches (`reached`)."""

    def __init__(self, fn, node, filename, chain):
        self.fn, self.node, self.chain = fn, node, chain
        inside = os.path.realpath(filename).startswith(os.getcwd())
        self.filename = os.path.relpath(filename) if inside else filename
        self.locals = _local_names(node)
        self.closure = {}
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            if _filled(cell):
                self.closure[name] = cell.cell_contents
        self.reached = []

    def check(self):
        body = self.node.body
        for stmt in body if isinstance(body, list) else [body]:
            self.visit(stmt)

    def at(self, node, message):
        """rule_error's `where` and `message` for a construct at `node` of this function."""
        where = f"{self.fn.__qualname__} ({self.filename}:{node.lineno})"
        if len(self.chain) > 1:
            message += f" (kernel code: reached from {' -> '.join(f.__name__ for f in self.chain)})"
        return where, message

    # -- resolving names ---------------------------------------------------------------------
    def resolve(self, node):
        """The object a Name / Attribute chain denotes when known before the kernel runs."""
        if isinstance(node, ast.Name):
            if node.id in self.closure:
                return True, self.closure[node.id]
            if node.id in self.locals:
                return False, None
            if node.id in self.fn.__globals__:
                return True, self.fn.__globals__[node.id]
            return _lookup(vars(builtins), node.id)
        if isinstance(node, ast.Attribute):
            ok, base = self.resolve(node.value)
            module = isinstance(base, types.ModuleType) and not _is_library_module(base.__name__)
            if ok and (module or _project_class(base)):
                return _lookup(vars(base), node.attr)
        return False, None

    def reach(self, obj):
        f = _project_function(obj)
        if f is not None:
            self.reached.append(f)

    def visit_Name(self, node):
        ok, obj = self.resolve(node)
        if ok:
            self.reach(obj)

    def visit_Attribute(self, node):
        ok, obj = self.resolve(node)
        if ok:
            self.reach(obj)
        self.generic_visit(node)

    # -- the rules ---------------------------------------------------------------------------
    def visit_Call(self, node):
        ok, obj = self.resolve(node.func)
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if ok and obj is builtins.slice:
            raise rule_error("subset-slice", *self.at(
                node, "slice(...) objects are not NKI values; index with a slice expression "
                      "t[a:b]"))
        if ok and name in REFUSED_BUILTINS and obj is getattr(builtins, name):
            raise rule_error("subset-builtin", *self.at(
                node, f"{name}() is not in the Python subset NKI 0.6 compiles; write "
                      f"{REFUSED_BUILTINS[name]}"))
        if ok and _project_class(obj):
            self.instantiate(obj, node)
        self.generic_visit(node)

    def instantiate(self, cls, node):
        if issubclass(cls, enum.Enum):
            return  # enumerations are NKI values (language guide, 'Enumerations')
        if not issubclass(cls, NKIObject):
            raise rule_error("subset-class", *self.at(
                node, f"{cls.__name__}(...) builds a class that does not inherit NKIObject; "
                      f"declare it `class {cls.__name__}(nl.NKIObject)` (a @dataclass keeps its "
                      f"decorator)"))
        for klass in cls.__mro__[:cls.__mro__.index(NKIObject)]:
            for member in vars(klass).values():
                self.reach(member)  # its methods are kernel code too

    def visit_ListComp(self, node):
        raise rule_error("subset-comprehension", *self.at(
            node, "a list comprehension is not in the Python subset NKI 0.6 compiles ('unsupported "
                  "expression'); build the list with a for loop and .append()"))

    def visit_SetComp(self, node):
        raise rule_error("subset-comprehension", *self.at(
            node, "a set comprehension is not in the Python subset NKI 0.6 compiles; build a list "
                  "with a for loop"))

    def visit_DictComp(self, node):
        raise rule_error("subset-comprehension", *self.at(
            node, "a dict comprehension is not in the Python subset NKI 0.6 compiles; fill a dict "
                  "with string keys in a for loop"))

    def visit_GeneratorExp(self, node):
        raise rule_error("subset-comprehension", *self.at(
            node, "a generator expression is not in the Python subset NKI 0.6 compiles; write a "
                  "for loop (or build a list, then tuple(list))"))

    def visit_Yield(self, node):
        raise rule_error("subset-yield", *self.at(
            node, "yield makes a generator, which NKI 0.6 does not compile; append to a list and "
                  "return it"))

    visit_YieldFrom = visit_Yield

    def visit_Lambda(self, node):
        raise rule_error("subset-lambda", *self.at(
            node, "a lambda is not in the Python subset NKI 0.6 compiles; pass a module-level "
                  "function"))

    def visit_FunctionDef(self, node):
        raise rule_error("subset-inner-def", *self.at(
            node, f"def {node.name} inside kernel code: NKI does not support inner function "
                  f"definitions; define it at module level and pass what it needs as arguments"))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        raise rule_error("subset-class", *self.at(
            node, f"class {node.name} is defined inside kernel code; define it at module level, "
                  f"inheriting nl.NKIObject"))

    def visit_Raise(self, node):
        raise rule_error("subset-raise", *self.at(
            node, "raise is not in the Python subset NKI 0.6 compiles; check with "
                  "`assert cond, message`"))

    def visit_Dict(self, node):
        for key in node.keys:
            if key is not None and not isinstance(key, ast.JoinedStr) \
                    and not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise rule_error("subset-dict-key", *self.at(
                    key, f"dict key `{ast.unparse(key)}`: NKI dicts take string keys only; write a "
                         f"string literal, or index a list or tuple by the integer"))
        self.generic_visit(node)

    def visit_Starred(self, node):
        if isinstance(node.ctx, ast.Store):
            raise rule_error("subset-starred-target", *self.at(
                node, f"starred target `{ast.unparse(node)}` is not in the Python subset NKI 0.6 "
                      f"compiles; index and slice instead: `a = t[0]`, `rest = t[1:]`"))
        self.generic_visit(node)

    def control_flow(self, node, what, instead):
        raise rule_error("subset-control-flow", *self.at(
            node, f"{what} is not NKI control flow (if, for, while); {instead}"))

    def visit_Try(self, node):
        self.control_flow(node, "try", "check inputs with `assert cond, message` instead")

    visit_TryStar = visit_Try

    def visit_With(self, node):
        self.control_flow(node, "with", "call what the context manager would do explicitly")

    visit_AsyncWith = visit_With

    def visit_AsyncFor(self, node):
        self.control_flow(node, "async for", "write a plain for loop")

    def visit_Await(self, node):
        self.control_flow(node, "await", "call the function directly")

    def visit_Match(self, node):
        self.control_flow(node, "match", "write an if / elif chain")

    def visit_Global(self, node):
        raise rule_error("subset-global", *self.at(
            node, f"{type(node).__name__.lower()} {', '.join(node.names)}: a kernel is a pure "
                  f"function of its arguments; pass the value in and return what changes"))

    visit_Nonlocal = visit_Global


def _lookup(namespace, name):
    return (True, namespace[name]) if name in namespace else (False, None)


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
