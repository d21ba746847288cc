"""Figures of the engine's import graph, and what ``import engine`` costs.

    python bench/import_graph.py [CHECKOUT]

CHECKOUT is a folder holding ``engine/`` (default: this one), so an older checkout can be measured the same way.
The graph comes from an AST walk (``tests/import_graph.py``): every import counts, inside functions too. A floor is
a module's height in the graph (0: it imports nothing of the engine); arrows up are arrows from a module to one in
a layer above its own (``tests/test_layers.LAYERS``; modules in no layer are left out); a cycle is a set of
modules that import each other, directly or not. ``import engine`` is timed in fresh processes (median of 9).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.import_graph import ROOT, components, floors, graph  # noqa: E402
from tests.test_layers import layer_of  # noqa: E402

TIMED = "import time; t = time.perf_counter(); import engine; print(time.perf_counter() - t)"


def import_seconds(checkout: Path, runs: int = 9) -> float:
    times = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", TIMED], cwd=checkout, capture_output=True, text=True, check=True,
                             env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"})
        times.append(float(out.stdout.strip()))
    return statistics.median(times)


def main() -> None:
    checkout = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    g = graph(checkout / "engine", checkout)
    fl = floors(g)
    cycles = [c for c in components(g) if len(c) > 1]
    ups = sorted((a, b) for a, bs in g.items() for b in bs
                 if (la := layer_of(a)) is not None and (lb := layer_of(b)) is not None and lb > la)
    flat = [m for m in g if m.count(".") == 1 and not (checkout / m.replace(".", "/")).is_dir()]
    print(f"checkout        {checkout}")
    print(f"files           {len(g)} ({len(flat)} modules directly in engine/)")
    print(f"floors          {max(fl.values()) + 1}")
    print(f"arrows          {sum(len(v) for v in g.values())}")
    print(f"arrows up       {len(ups)}" + "".join(f"\n  {a} -> {b}" for a, b in ups))
    print(f"cycles          {len(cycles)}" + "".join(f"\n  {' <-> '.join(c)}" for c in cycles))
    print(f"import engine   {import_seconds(checkout) * 1000:.0f} ms (median of 9 fresh processes)")


if __name__ == "__main__":
    main()
