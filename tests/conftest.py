"""Shared fixtures: real tokenizers, real envs, real SQLite files."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ROLLSCOPE_THREADS", "1")  # the model worker's threads: tests share two cores
logging.getLogger("math_verify").setLevel(logging.ERROR)

ROOT = Path(__file__).resolve().parents[1]
FAKE_TAUBENCH = Path(__file__).parent / "fake_taubench"
QWEN3_DIR = Path(os.environ.get("ROLLSCOPE_QWEN3_TOKENIZER", ROOT / ".cache" / "tokenizers" / "qwen3"))


SCREENSHOTS = Path(__file__).parent / "browser" / "screenshots"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--keep-screenshots", action="store_true",
                     help="keep tests/browser/screenshots from an earlier pass of this run (make test's second pass)")


def pytest_sessionstart(session: pytest.Session) -> None:
    # Only this run's pictures, so none is mistaken for current. Cleared once, by the process that starts the
    # run: with -n, each worker would otherwise delete what the other had taken.
    import shutil

    if not hasattr(session.config, "workerinput") and not session.config.getoption("--keep-screenshots"):
        shutil.rmtree(SCREENSHOTS, ignore_errors=True)


def _torch_one_thread() -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


_torch_one_thread()


@pytest.fixture
def fake_tau_bench(monkeypatch):
    """The ``tau_bench`` package of ``tests/fake_taubench`` importable, with nothing of an earlier import
    cached (Sierra's package is not on PyPI)."""
    import sys

    monkeypatch.syspath_prepend(str(FAKE_TAUBENCH))
    for mod in [m for m in sys.modules if m == "tau_bench" or m.startswith("tau_bench.")]:
        monkeypatch.delitem(sys.modules, mod)
    yield
    # What the test imported goes too: a later test must not find the fake package installed.
    for mod in [m for m in sys.modules if m == "tau_bench" or m.startswith("tau_bench.")]:
        del sys.modules[mod]


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """The real Qwen3 tokenizer and tool-calling template (fetched by `make test-deps`)."""
    from transformers import AutoTokenizer

    if not (QWEN3_DIR / "tokenizer.json").is_file():
        pytest.fail(f"the Qwen3 test tokenizer is missing at {QWEN3_DIR}; run `make test-deps`")
    return AutoTokenizer.from_pretrained(str(QWEN3_DIR))


@pytest.fixture(scope="session")
def smol_tokenizer():
    """The embedded SmolLM2 tokenizer with Rollscope's tool template."""
    from engine.backends.tokenizers import load_tokenizer

    return load_tokenizer(None)


@pytest.fixture(scope="module")
def plain_math(smol_tokenizer):
    """A math episode of real SmolLM2 ids with no alternatives recorded (``tests.alternatives``)."""
    from tests.alternatives import plain_math_episode

    return plain_math_episode(smol_tokenizer)


@pytest.fixture(scope="module")
def recorded_math(plain_math):
    """``plain_math`` with its top 5 and entropy recorded (seed 4), and the truth they were drawn from."""
    from tests.alternatives import with_alternatives

    return with_alternatives(plain_math, k=5, seed=4)


@pytest.fixture(params=["smollm2", "qwen3"])
def any_tokenizer(request, smol_tokenizer, qwen3_tokenizer):
    return smol_tokenizer if request.param == "smollm2" else qwen3_tokenizer


@pytest.fixture(scope="session")
def qwen25_tokenizer():
    """The Qwen3 vocabulary with a Qwen2.5-style template (a default system prompt, tools in the system turn)."""
    from transformers import AutoTokenizer

    from tests.templates import QWEN25_STYLE

    if not (QWEN3_DIR / "tokenizer.json").is_file():
        pytest.fail(f"the Qwen3 test tokenizer is missing at {QWEN3_DIR}; run `make test-deps`")
    tok = AutoTokenizer.from_pretrained(str(QWEN3_DIR))
    tok.chat_template = QWEN25_STYLE
    return tok
