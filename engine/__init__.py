"""Rollscope engine: the traced multi-turn agent loop, its store and formats.

Heavy dependencies (torch, transformers) load only when a local model or a
tokenizer is used.
"""

from .errors import (
    BackendError,
    ConfigError,
    EnvError,
    FormatError,
    ModelNotFound,
    RollscopeError,
    StoreError,
    TemplateError,
    TokenizerNotFound,
)
from .loop import Stepper, run_episode
from .presets import PRESETS, LoopConfig, get_preset
from .records import (
    SCHEMA_VERSION,
    Action,
    Episode,
    Finding,
    Generation,
    Message,
    Segment,
    Severity,
    Status,
    TokenArrays,
    ToolCall,
    Turn,
)
from .store import EpisodeFilter, EpisodeSummary, Store

__all__ = [
    "SCHEMA_VERSION",
    "PRESETS",
    "Action",
    "BackendError",
    "ConfigError",
    "EnvError",
    "Episode",
    "EpisodeFilter",
    "EpisodeSummary",
    "Finding",
    "FormatError",
    "Generation",
    "LoopConfig",
    "Message",
    "ModelNotFound",
    "RollscopeError",
    "Segment",
    "Severity",
    "Status",
    "Stepper",
    "StoreError",
    "Store",
    "TemplateError",
    "TokenArrays",
    "TokenizerNotFound",
    "ToolCall",
    "Turn",
    "get_preset",
    "run_episode",
]
