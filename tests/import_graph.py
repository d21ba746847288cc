"""The import graph of a package, read from its source with ``ast``: the layering tests and ``bench/import_graph.py``.

Every import counts, those inside functions too. ``from P import X`` is an arrow to ``P.X`` when that is a
module and to ``P`` (its face, the ``__init__``) when ``X`` is a name defined there; ``import A.B`` is an arrow
to ``A.B``. Arrows to modules outside the package are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(path: Path, root: Path) -> str:
    name = module_name(path, root)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported(path: Path, root: Path = ROOT) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) for every import in a file, relative ones resolved; ``import A`` gives (line, A, [])."""
    package = _package_of(path, root)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            out.append((node.lineno, mod, [a.name for a in node.names]))
    return out


def modules(package: Path, root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(package.rglob("*.py"))}


def arrows(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """The modules of ``known`` that the file imports (see the module docstring)."""
    out: set[str] = set()
    for _, mod, names in imported(path, root):
        if not names:
            if mod in known:
                out.add(mod)
            continue
        for n in names:
            if f"{mod}.{n}" in known:
                out.add(f"{mod}.{n}")
            elif mod in known:
                out.add(mod)
    out.discard(module_name(path, root))
    return out


def graph(package: Path, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    paths = modules(package, root)
    return {name: arrows(path, set(paths), root) for name, path in paths.items()}


def components(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``g`` (Tarjan), each sorted; a cycle is a component of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def cycle(g: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``g`` (its modules in order, the first again at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(g):
        if node not in state and (found := visit(node)):
            return found
    return []


def floors(g: dict[str, set[str]]) -> dict[str, int]:
    """Each module's floor: 0 for one that imports nothing of the package, else one above the highest it imports
    (the modules of a cycle share a floor)."""
    comp_of = {v: i for i, comp in enumerate(components(g)) for v in comp}
    memo: dict[int, int] = {}

    def floor(c: int, members: dict[int, list[str]]) -> int:
        if c not in memo:
            memo[c] = -1
            below = {comp_of[w] for v in members[c] for w in g[v]} - {c}
            memo[c] = 1 + max((floor(d, members) for d in below), default=-1)
        return memo[c]

    members: dict[int, list[str]] = {}
    for v, c in comp_of.items():
        members.setdefault(c, []).append(v)
    return {v: floor(comp_of[v], members) for v in g}
