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
