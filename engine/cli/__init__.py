"""The ``rollscope`` command line: a thin wrapper over the engine's face.

``main`` (``main.py``) builds the parser from one module per command (``run``, ``presets``, ``schema``, ``ls``,
``show``, ``curate`` for ``tag``, ``star`` and ``note``, ``export``, ``imports`` for ``import``, ``check``, ``replay``, ``watch``, ``demo``, ``diff``), each with
``register(sub)`` and its handler; ``common`` holds what they share. The top layer: it may import every layer of
the engine and nothing outside it (the dashboard's ``serve`` registers itself as an entry point).
``python -m engine.cli`` runs it too.
"""

from .main import main

__all__ = ["main"]
