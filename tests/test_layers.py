"""Which parts of Rollscope may import which: the engine's layers in order, no cycles, one face, small modules;
backends and envs meet only at the backend seam; the dashboard uses the engine's face alone."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import tomllib

from tests.import_graph import components, cycle, graph, imported, module_name

ENGINE = Path(__file__).resolve().parents[1] / "engine"
ROOT = ENGINE.parent

LAYERS = [
    "engine.errors", "engine.presets", "engine.records", "engine.tokens", "engine.backends", "engine.envs",
    "engine.checks", "engine.store", "engine.loop", "engine.analysis", "engine.formats", "engine.launch",
    "engine.cli", "engine",
]
"""The engine's layers, bottom up: a module may import its own layer and those below it, never one above."""


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Absolute module names a file under ``root`` imports, anywhere in it (relative imports resolved against its
    package), each imported name too (``from a import b`` gives ``a`` and ``a.b``)."""
    out: set[str] = set()
    for _, mod, names in imported(path, root):
        out.add(mod)
        out.update(f"{mod}.{n}" for n in names)
    return out


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of the layer ``module`` belongs to (the longest prefix), or None."""
    found = [i for i, prefix in enumerate(LAYERS) if module == prefix or module.startswith(prefix + ".")]
    return max(found, key=lambda i: len(LAYERS[i])) if found else None


def layer_violations(package: Path, root: Path) -> list[str]:
    """Every arrow of the engine's import graph that runs up the layer order, and every module in no layer."""
    g = graph(package, root)
    out = [f"{m} belongs to no layer of LAYERS" for m in g if layer_of(m) is None]
    for a, targets in sorted(g.items()):
        for b in sorted(targets):
            la, lb = layer_of(a), layer_of(b)
            if la is not None and lb is not None and lb > la:
                out.append(f"{a} ({LAYERS[la]}) imports {b} ({LAYERS[lb]}), a layer above it")
    return out


def test_every_engine_module_is_in_a_layer_and_imports_only_its_layer_and_below():
    bad = layer_violations(ENGINE, ROOT)
    assert not bad, "\n".join(bad)


def test_engine_modules_import_no_cycle():
    g = graph(ENGINE, ROOT)
    assert len(g) >= 90 and "engine.records.episode" in g["engine.loop.stepper"]
    found = [c for c in components(g) if len(c) > 1]
    assert not found, f"import cycles (every import counts, inside functions and through package faces too): {found}"


def test_the_engine_does_not_import_the_dashboard():
    for path in ENGINE.rglob("*.py"):
        bad = sorted(m for m in _imports(path) if m.split(".")[0] == "dashboard")
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}: register a front end's command as an entry point"


def test_engine_modules_stay_small():
    for path in ENGINE.rglob("*.py"):
        n = len(path.read_text(encoding="utf-8").splitlines())
        assert n <= 600, f"{path.relative_to(ROOT)} has {n} lines: past ~600 a module is two modules"


def test_every_layer_package_says_what_it_is_and_what_it_may_import():
    for layer in LAYERS:
        path = ROOT / Path(*layer.split("."))
        if path.with_suffix(".py").is_file():
            continue
        doc = ast.get_docstring(ast.parse((path / "__init__.py").read_text(encoding="utf-8"))) or ""
        assert len(doc) > 80 and "import" in doc.lower(), f"{layer}/__init__.py: say what the layer is and what it imports"


def test_the_layer_scan_catches_an_arrow_up_and_a_cycle_through_a_face(tmp_path):
    pkg = tmp_path / "engine"
    for d in ("records", "store"):
        (pkg / d).mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "records" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "records" / "episode.py").write_text("def f():\n    from ..store import thing\n", encoding="utf-8")
    (pkg / "store" / "__init__.py").write_text("from .core import Store\nthing = 1\n", encoding="utf-8")
    (pkg / "store" / "core.py").write_text("from . import thing\nfrom . import codec\n", encoding="utf-8")
    (pkg / "store" / "codec.py").write_text("", encoding="utf-8")
    assert layer_violations(pkg, tmp_path) == [
        "engine.records.episode (engine.records) imports engine.store (engine.store), a layer above it"]
    g = graph(pkg, tmp_path)
    assert g["engine.store.core"] == {"engine.store", "engine.store.codec"}  # a name from the face, a submodule
    assert [c for c in components(g) if len(c) > 1] == [["engine.store", "engine.store.core"]]


def test_the_face_exports_names_not_modules_and_renames_none():
    import engine

    modules_exported = [n for n in engine.__all__ if inspect.ismodule(getattr(engine, n))]
    assert not modules_exported, f"engine exports modules {modules_exported}: export the names they hold"
    tree = ast.parse((ENGINE / "__init__.py").read_text(encoding="utf-8"))
    renamed = [f"{a.name} as {a.asname}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
               if a.asname and a.asname != a.name]
    assert not renamed, f"the face renames {renamed}: name the thing so in its module"


def test_the_wheel_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    tree = {module_name(p.parent / "__init__.py") for top in ("engine", "dashboard")
            for p in (ROOT / top).rglob("__init__.py")}
    assert set(config["packages"]) == tree | {"rollscope_assets", "rollscope_assets.templates"}, \
        "list every package in pyproject.toml"
    assert config["package-dir"] == {"rollscope_assets": "assets"}


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
    assert "engine.backends.base" in found and "engine.records.episode" in found


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


def _import_graph(package: Path, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, wherever in the file (functions included)."""
    return graph(package, root)


def _cycle(g: dict[str, set[str]]) -> list[str]:
    return cycle(g)


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
