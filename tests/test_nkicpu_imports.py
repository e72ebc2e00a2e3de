"""nkicpu's modules import each other without a cycle, and none imports another's private names.

The import graph is read from the source with `ast`: every `import` / `from ... import` of an
nkicpu module, at the top of a file or inside a function (a late import is an edge too: it only
hides a cycle until the function runs). `from . import name` is an edge to the submodule `name`
where there is one, else to the package (nkicpu/__init__.py). Cycles are the strongly connected
components of more than one module, or a module importing itself.
"""
import ast
import pathlib

import nkicpu

PACKAGE = pathlib.Path(nkicpu.__file__).parent


def module_name(path):
    return "nkicpu" if path.stem == "__init__" else f"nkicpu.{path.stem}"


def imports(path):
    """(imported module, name or None, line) for every import of an nkicpu module in the file."""
    modules = {module_name(p) for p in PACKAGE.glob("*.py")}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "nkicpu"]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] != "nkicpu":
                continue
            base = "nkicpu" if node.level else node.module
            if node.level and node.module:
                base = f"nkicpu.{node.module}"
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append((sub, None, node.lineno) if sub in modules else (base, a.name, node.lineno))
    return found


def graph():
    """{module: {imported module: [lines]}} and [(module, imported module, private name, line)]."""
    edges, private = {}, []
    for path in sorted(PACKAGE.glob("*.py")):
        me = module_name(path)
        edges.setdefault(me, {})
        for target, name, line in imports(path):
            edges[me].setdefault(target, []).append(line)
            if name and name.startswith("_") and not name.startswith("__"):
                private.append((me, target, name, line))
    return edges, private


def cycles(edges):
    """The strongly connected components with a cycle (Tarjan's algorithm), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, {}):
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    edges, _ = graph()
    found = cycles(edges)
    assert not found, "import cycles among nkicpu's modules:\n" + "\n".join(
        f"  {c}: " + "; ".join(f"{a} -> {b} (line {edges[a][b][0]})" for a in c for b in edges[a] if b in c)
        for c in found)


def test_no_module_imports_another_modules_private_names():
    _, private = graph()
    assert not private, "\n".join(f"{m} imports {t}.{n} (line {line})" for m, t, n, line in private)


def test_the_graph_sees_late_imports_and_cycles():
    """The reader of the graph on a made-up package: a late import closes a cycle."""
    edges = {"a": {"b": [1]}, "b": {"c": [1]}, "c": {"a": [9]}, "d": {"a": [1]}, "e": {"e": [2]}}
    assert cycles(edges) == [["a", "b", "c"], ["e"]]
    assert ("nkicpu.profile", "nkicpu", "capture") in {(m, t, n) for m, t, n, _ in
                                                      [(m, t, n or "", 0) for m in ["nkicpu.profile"]
                                                       for t, n, _ in imports(PACKAGE / "profile.py")]}
