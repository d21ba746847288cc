"""The built-in ``retail`` env: tau-bench semantics on our own synthetic store.

Modules by concern: ``data`` (the store), ``tools`` (tool functions and
schemas), ``policy`` (the agent's rules), ``tasks`` (tasks and their reference
conversations), ``user`` (scripted and model-played users), ``reference``
(the scripted agent) and ``env`` (``RetailEnv``, the reward).
"""

from .env import RetailEnv

__all__ = ["RetailEnv"]
