"""Which parts of the engine may import which: backends and envs meet only at the backend seam."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def _imports(path: Path, root: Path = ENGINE.parent) -> set[str]:
    """Absolute module names a file under ``root`` imports, anywhere in it (relative imports resolved against its
    package)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_backends_do_not_import_envs():
    for path in (ENGINE / "backends").rglob("*.py"):
        bad = {m for m in _imports(path) if m.startswith("engine.envs")}
        assert not bad, f"{path.name} imports {sorted(bad)}: a backend takes a reference policy, not an env"


def test_envs_reach_backends_only_through_the_seam():
    for path in (ENGINE / "envs").rglob("*.py"):
        bad = {m for m in _imports(path) if m.startswith("engine.backends")
               and not m.startswith("engine.backends.base")}
        assert not bad, f"{path.relative_to(ENGINE)} imports {sorted(bad)}: only engine.backends.base is the seam"


def test_the_import_scan_sees_relative_imports():
    # The scan itself: the scripted backend's relative imports resolve to engine modules.
    found = _imports(ENGINE / "backends" / "scripted.py")
    assert "engine.backends.base" in found and "engine.records" in found


DASHBOARD = ENGINE.parent / "dashboard"


def _engine_imports(path: Path) -> list[tuple[int, str]]:
    """(line, what) for every import of the engine in a file: ``engine`` itself or a module inside it."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "engine"]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "engine":
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def test_the_dashboard_uses_only_the_engines_public_face():
    import engine

    seen = 0
    for path in DASHBOARD.rglob("*.py"):
        for line, what in _engine_imports(path):
            seen += 1
            module, _, name = what.rpartition(".")
            where = f"{path.relative_to(DASHBOARD.parent)}:{line}"
            assert module == "engine", f"{where} imports {what}: import it from `engine` (add it to engine.__all__)"
            assert name in engine.__all__, f"{where} imports engine.{name}, which engine.__all__ does not export"
    assert seen >= 30  # the scan sees the dashboard's imports


def test_the_public_face_exports_what_it_names():
    import engine

    missing = [n for n in engine.__all__ if not hasattr(engine, n)]
    assert not missing and len(set(engine.__all__)) == len(engine.__all__)


def test_the_scan_catches_an_internal_import(tmp_path):
    bad = tmp_path / "tab.py"
    bad.write_text("from engine.store import Store\nimport engine.fork\nfrom engine import Store\n", encoding="utf-8")
    assert _engine_imports(bad) == [(1, "engine.store.Store"), (2, "engine.fork"), (3, "engine.Store")]


def test_the_readmes_python_example_runs_as_written(tmp_path, monkeypatch, capsys):
    import re

    readme = (ENGINE.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## From Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 8 and all(r.split()[1] in ("completed", "truncated") for r in rows)
    assert (tmp_path / "rollscope.db").is_file()


# -- the dashboard's structure: tabs, their views, the glue, the assets ---------------------------------------

ASSETS = ENGINE.parent / "assets"
GLUE = DASHBOARD / "gradio_glue.py"
TOOLKIT = DASHBOARD / "views" / "html.py"


def _module_name(path: Path, root: Path = ENGINE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(package: Path, root: Path = ENGINE.parent) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, wherever in the file (functions included)."""
    paths = {_module_name(p, root): p for p in package.rglob("*.py")}
    return {name: {m for m in _imports(path, root) if m in paths and m != name} for name, path in paths.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (its modules in order, the first again at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _dashboard_files() -> list[Path]:
    return sorted(DASHBOARD.rglob("*.py"))


def test_dashboard_modules_import_no_cycle():
    graph = _import_graph(DASHBOARD)
    assert len(graph) >= 30 and "dashboard.views.html" in graph["dashboard.views.episode"]
    cycle = _cycle(graph)
    assert not cycle, f"import cycle: {' -> '.join(cycle)}"


def test_the_cycle_scan_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "dashboard"
    (pkg / "tabs").mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "tabs" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "tabs" / "a.py").write_text("from . import b\n", encoding="utf-8")
    (pkg / "tabs" / "b.py").write_text("def f():\n    from .a import thing\n", encoding="utf-8")
    graph = _import_graph(pkg, tmp_path)
    assert _cycle(graph) in (["dashboard.tabs.a", "dashboard.tabs.b", "dashboard.tabs.a"],
                             ["dashboard.tabs.b", "dashboard.tabs.a", "dashboard.tabs.b"])
    assert _cycle({"x": {"y"}, "y": set()}) == []


def test_gradio_internals_are_used_in_the_glue_alone():
    seen = []
    for path in _dashboard_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        reads = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "_data"]
        reads += [line for line, s in _strings(tree) if s == "_data"]
        if path == GLUE:
            seen += reads
            continue
        assert not reads, f"{path.relative_to(ENGINE.parent)}:{reads[0]} reads the event's _data: use gradio_glue.event_data"
    assert seen  # the scan sees the glue's own read


def _defined(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every function defined and every name assigned at the top of a module."""
    out = [(n.lineno, n.name) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out += [(node.lineno, t.id) for t in targets if isinstance(t, ast.Name)]
    return out


def test_the_html_toolkit_is_defined_once():
    toolkit = {name for _, name in _defined(ast.parse(TOOLKIT.read_text(encoding="utf-8")))}
    assert {"esc", "chip", "note", "status_badge", "STATUS_CLASS", "css_class", "fmt_num", "text_block"} <= toolkit
    for path in _dashboard_files():
        if path == TOOLKIT:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ENGINE.parent)
        for line, name in _defined(tree):
            assert name not in {"_e", "escape"} and name.lstrip("_") not in toolkit, (
                f"{where}:{line} defines {name}: the views' HTML toolkit (dashboard/views/html.py) has it")
        escapes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "escape"
                   and isinstance(n.value, ast.Name) and n.value.id == "html"]
        assert not escapes, f"{where}:{escapes[0]} calls html.escape: use views.html.esc"


def test_the_toolkit_scan_catches_a_second_escape(tmp_path):
    bad = ast.parse("import html\ndef _e(x):\n    return html.escape(str(x))\nSTATUS_CLASS = {}\n")
    assert [name for _, name in _defined(bad)] == ["_e", "STATUS_CLASS"]


JS_MARKS = ("=>", "function(", "function (", "addEventListener", "querySelector", "<script")


def test_no_javascript_in_the_dashboards_python():
    for path in _dashboard_files():
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            marks = [m for m in JS_MARKS if m in text]
            assert not marks, (f"{path.relative_to(ENGINE.parent)}:{line} holds JavaScript ({marks[0]!r}): "
                               "put it in assets/*.js and load it with dashboard.assets.script")


def _scripts_named() -> dict[str, str]:
    """Script name -> where a dashboard module loads it with ``script(...)``."""
    out = {}
    for path in _dashboard_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "script":
                for arg in node.args:
                    assert isinstance(arg, ast.Constant), f"{path.name}:{node.lineno}: name scripts literally"
                    out[arg.value] = f"{path.relative_to(ENGINE.parent)}:{node.lineno}"
    return out


def test_every_script_loaded_is_in_assets_and_every_script_there_is_loaded():
    named = _scripts_named()
    files = {p.stem for p in ASSETS.glob("*.js")}
    assert len(named) >= 8
    missing = {n: where for n, where in named.items() if n not in files}
    assert not missing, f"scripts without a file in assets/: {missing}"
    assert not files - set(named), f"scripts in assets/ that nothing loads: {sorted(files - set(named))}"


def test_scripts_load_as_the_browser_needs_them():
    from dashboard.assets import script

    set_url = script("set_url")
    assert set_url.startswith("(id) =>") and "//" not in set_url.split("\n", 1)[0]
    toggles = script("token_toggles", HEAT="a \"b\"", MISMATCH="m", SPECIAL="s")
    assert 'values.includes("a \\"b\\"")' in toggles and '!values.includes("s")' in toggles
    assert "HEAT" not in toggles and "MISMATCH" not in toggles
    both = script("tokens", "fork_link")
    assert both.index("metaOf") < both.index("data-fork")
    # Gradio wires gr.HTML(...).click only when the script names the event.
    assert all('"click"' in script(n) for n in ("tokens", "fork_link", "browse_table", "open_episode", "run_steps",
                                                  "replay_turns"))


def test_each_tab_gets_its_html_from_its_view_module():
    views = {p.stem for p in (DASHBOARD / "views").glob("*.py")}
    tabs = sorted(p for p in (DASHBOARD / "tabs").glob("*.py") if p.stem != "__init__")
    assert len(tabs) == 9
    for tab in tabs:
        assert tab.stem in views, f"tabs/{tab.name} has no views/{tab.name}"
        assert f"dashboard.views.{tab.stem}" in _imports(tab), f"tabs/{tab.name} does not use views/{tab.name}"


def test_views_are_pure():
    for path in (DASHBOARD / "views").glob("*.py"):
        bad = {m for m in _imports(path) if m.split(".")[0] == "gradio" or m.startswith("dashboard.tabs")
               or m.startswith("dashboard.gradio_glue")}
        assert not bad, f"views/{path.name} imports {sorted(bad)}: a view is HTML from records, no Gradio"


def test_dashboard_modules_stay_small():
    for path in DASHBOARD.rglob("*.py"):
        n = len(path.read_text(encoding="utf-8").splitlines())
        assert n <= 600, f"{path.relative_to(ENGINE.parent)} has {n} lines: past ~600 a module is two modules"
