"""A plain install works: the wheel built from the sources, installed (not editable) into a new venv, runs
``rollscope demo`` and ``rollscope serve`` from another folder, with the browser scripts, the stylesheets and the
embedded model's tool template it carries."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "engine", "dashboard", "assets")


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the new venv, the wheel): built from a copy of the sources, installed without its dependencies, which
    the venv reads from this one's site-packages (so nothing is downloaded and no copy of the repository is
    on its path)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(
            ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}))
    dist = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
         cwd=base)
    wheel = next(dist.glob("rollscope-*.whl"))
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps", "-q",
          str(wheel)], cwd=base)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return venv, wheel


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}


def test_the_wheel_carries_the_static_files_and_every_package(installed):
    _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in (ROOT / "assets").rglob("*"):
        if f.suffix in (".js", ".css", ".jinja"):
            assert f"rollscope_assets/{f.relative_to(ROOT / 'assets').as_posix()}" in names, f.name
    assert {"engine/cli/__main__.py", "engine/records/episode.py", "dashboard/command.py",
            "dashboard/background/jobs.py"} <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "rollscope = engine.cli:main" in text and "serve = dashboard.command:register" in text


def test_the_installed_engine_reads_its_template_from_the_wheel(installed, tmp_path):
    venv, _ = installed
    out = _run([str(venv / "bin" / "python"), "-c",
                "import engine, rollscope_assets; from engine import load_tokenizer; "
                "print(engine.__file__); print(rollscope_assets.__file__); "
                "print(load_tokenizer(None).chat_template == open(rollscope_assets.__file__.rsplit('/', 1)[0] "
                "+ '/templates/smollm2_tools.jinja').read())"], cwd=tmp_path, env=_env())
    engine_file, assets_file, same = out.strip().splitlines()[-3:]
    assert engine_file.startswith(str(venv)) and assets_file.startswith(str(venv)), out
    assert same == "True"
    template = (ROOT / "assets" / "templates" / "smollm2_tools.jinja").read_text(encoding="utf-8")
    assert "<tools>" in template  # the tool template, not the GGUF's own


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_and_serve_run_from_another_folder(installed, tmp_path):
    venv, _ = installed
    rollscope = str(venv / "bin" / "rollscope")
    db = tmp_path / "demo.db"
    out = _run([rollscope, "demo", "--db", str(db), "--part", "clean-tito", "--part", "parse-abort"], cwd=tmp_path,
               env=_env())
    assert "demo:clean-tito" in out and "demo:parse-abort" in out and db.is_file()
    port = _free_port()
    proc = subprocess.Popen([rollscope, "serve", "--db", str(db), "--port", str(port)], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                if page.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.5)
        config = httpx.get(f"http://127.0.0.1:{port}/config", timeout=30).text
        # A line of each kind of static file, as the page gets it: the token view's script, the stylesheet.
        tokens_js = (ROOT / "assets" / "tokens.js").read_text(encoding="utf-8")
        line = next(ln.strip() for ln in tokens_js.splitlines() if "metaOf" in ln)
        css = (ROOT / "assets" / "dashboard.css").read_text(encoding="utf-8")
        rule = next(ln.strip() for ln in css.splitlines() if ln.strip().startswith(".rs-"))
        for needle in (line, rule):
            assert needle.replace('"', '\\"') in config or needle in config, needle
    finally:
        proc.terminate()
        proc.wait(timeout=30)
