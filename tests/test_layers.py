"""Which parts of the engine may import which: backends and envs meet only at the backend seam."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(ENGINE.parent).with_suffix("").parts[:-1])
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
