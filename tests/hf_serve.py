"""Hugging Face's ``transformers serve``, a real and strict OpenAI-compatible server, on the embedded SmolLM2,
for tests and benches."""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any


class TransformersServe:
    """Hugging Face's ``transformers serve`` (a real, strict OpenAI-compatible server) on the embedded SmolLM2.

    ``with TransformersServe(tmp_dir) as s: s.url, s.model``. The model folder is built in ``tmp_dir`` from
    the converted GGUF the local backend caches (its config gains the ``architectures`` the server needs)
    and the embedded tokenizer with Rollscope's tool template. One torch thread, as everywhere here.
    """

    def __init__(self, folder: Any, startup_s: float = 180.0) -> None:
        from pathlib import Path

        self.folder = Path(folder)
        self.startup_s = startup_s
        self.port = 0
        self.proc: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def model(self) -> str:
        return str(self.folder)

    def _build(self) -> None:
        from engine.backends.local import embedded_model_folder
        from engine.backends.tokenizers import load_tokenizer

        tok = load_tokenizer(None)
        src = embedded_model_folder()
        self.folder.mkdir(parents=True, exist_ok=True)
        config = json.loads((src / "config.json").read_text())
        config["architectures"] = ["LlamaForCausalLM"]
        (self.folder / "config.json").write_text(json.dumps(config))
        weights = self.folder / "model.safetensors"
        if not weights.exists():
            weights.symlink_to(src / "model.safetensors")
        tok.save_pretrained(str(self.folder))

    def start(self) -> TransformersServe:
        import os
        import subprocess
        from pathlib import Path

        import httpx

        self._build()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        exe = Path(sys.executable).parent / "transformers"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        self.log = open(self.folder / "serve.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([str(exe), "serve", str(self.folder), "--host", "127.0.0.1", "--port",
                                      str(self.port)], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_s
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"transformers serve did not start: see {self.folder / 'serve.log'}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except Exception:
                self.proc.kill()
        self.proc = None
        if getattr(self, "log", None) is not None:
            self.log.close()

    def __enter__(self) -> TransformersServe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
