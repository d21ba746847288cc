"""Rollscope engine: the traced multi-turn agent loop, its store and formats.

This package's names (``__all__``) are the one face the CLI, the dashboard
and a researcher's scripts use; the modules behind it are free to move.
Functions are exported under names no module has (``fork_episode``,
``replay_episode``, ``compare_episodes``, ``diagnosis_line``), so
``engine.fork`` and its siblings stay the modules.
Heavy dependencies (torch, transformers) load only when a local model or a
tokenizer is used.

    store = Store("rollscope.db")
    plan = plan_run("math", "0:4", 2, "auto", "max_turns = 3", 2, BackendSettings(), preflight=False)
    tokenizer, backend = plan.backend.open(plan.make_env)
    asyncio.run(run_batch(plan.spec(), plan.make_env, backend, tokenizer, store))

(the README's "From Python" runs it).
"""

from . import formats, tokenizers
from .backends.base import Backend, GenerationRequest, SamplingParams
from .chat import decode
from .checks import CheckOptions, TokenizerCache, run_checks, with_checks
from .compare import Comparison, TurnDiff, calls_text, observation_text, word_diff
from .compare import compare as compare_episodes
from .compare import opening as opening_messages
from .demo import PARTS as DEMO_PARTS
from .demo import DemoPart, DemoReport, DemoRun, build_demo, find_qwen3
from .diagnosis import consequences, link_findings, linked, roots
from .diagnosis import diagnosis as diagnosis_line
from .envs.base import Env, StepResult
from .episode_queries import (
    PromptView,
    RewardSoFar,
    TurnSpan,
    common_prefix,
    findings_up_to,
    prompt_at,
    reward_so_far,
    turn_span,
)
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
from .factory import ENVS, POLICIES, env_factory, load_tokenizer, make_backend, parse_tasks
from .fork import ActionPreview, ForkReport, HandStepper, parent_env, user_played_by
from .fork import fork as fork_episode
from .groups import NORMALIZATION as GROUP_NORMALIZATION
from .groups import GroupSample, GroupView, flat_groups, group_view, load_group
from .loop import Stepper, new_id, run_episode
from .planning import (
    AUTO,
    MAX_EPISODES,
    PRESET_CHOICES,
    BackendSettings,
    HandStart,
    RunPlan,
    UserSettings,
    check_env,
    check_reachable,
    default_preset,
    loop_config,
    plan_fork,
    plan_run,
    plan_step,
    preset_name,
)
from .presets import (
    PRESET_INFO,
    PRESETS,
    LoopConfig,
    apply_settings,
    format_knob,
    get_preset,
    knobs,
    load_config_file,
    parse_settings,
)
from .provenance import BackendInfo, EnvInfo, RunConfig, Source
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
from .replay import ReplayResult, TurnVerdict, replay_stored
from .replay import replay as replay_episode
from .runner import BatchResult, BatchSpec, run_batch
from .schema import episode_schema
from .store import (
    SORTABLE,
    Bins,
    BrowseStats,
    EpisodeFilter,
    EpisodeSummary,
    RewardBins,
    RewardStats,
    RunSummary,
    StepStats,
    Store,
)
from .tokendiff import CHANGED as TD_CHANGED
from .tokendiff import ONLY_A as TD_ONLY_A
from .tokendiff import ONLY_B as TD_ONLY_B
from .tokendiff import Row as TokenDiffRow
from .tokendiff import TokenDiff, retokenized
from .tokendiff import diff as token_diff
from .watch import FORMATS as WATCH_FORMATS
from .watch import Watcher, WatchEvent

__all__ = [
    "GROUP_NORMALIZATION", "GroupSample", "GroupView", "flat_groups", "group_view", "load_group",
    "TD_CHANGED", "TD_ONLY_A", "TD_ONLY_B", "TokenDiff", "TokenDiffRow", "retokenized", "token_diff",
    "AUTO", "Action", "ActionPreview", "Backend", "BackendError", "BackendInfo", "BackendSettings", "BatchResult",
    "BatchSpec", "Bins", "BrowseStats", "CheckOptions", "Comparison", "ConfigError", "DEMO_PARTS", "DemoPart",
    "DemoReport", "DemoRun", "ENVS", "Env", "EnvError",
    "EnvInfo", "Episode", "EpisodeFilter", "EpisodeSummary", "Finding", "ForkReport", "FormatError", "Generation",
    "GenerationRequest", "HandStart", "HandStepper", "LoopConfig", "MAX_EPISODES", "Message", "ModelNotFound",
    "POLICIES", "PRESETS", "PRESET_CHOICES", "PRESET_INFO", "PromptView", "ReplayResult", "RewardSoFar",
    "RewardBins", "RewardStats", "RollscopeError", "RunConfig", "RunPlan", "RunSummary", "SCHEMA_VERSION", "SORTABLE",
    "SamplingParams", "Segment", "Severity", "Source", "Status", "StepResult", "StepStats", "Stepper", "Store",
    "StoreError", "TemplateError", "TokenArrays", "TokenizerCache", "TokenizerNotFound", "ToolCall", "Turn",
    "TurnDiff", "TurnSpan", "TurnVerdict", "UserSettings", "WATCH_FORMATS", "WatchEvent", "Watcher", "apply_settings",
    "build_demo", "calls_text", "check_env", "check_reachable", "common_prefix", "compare_episodes", "consequences", "decode",
    "default_preset", "diagnosis_line", "env_factory", "episode_schema", "find_qwen3", "findings_up_to", "fork_episode",
    "format_knob", "formats", "get_preset", "knobs", "link_findings", "linked", "load_config_file", "load_tokenizer",
    "loop_config", "make_backend", "new_id", "observation_text", "opening_messages", "parent_env", "parse_settings",
    "parse_tasks", "plan_fork", "plan_run", "plan_step", "preset_name", "prompt_at", "replay_episode",
    "replay_stored", "reward_so_far", "roots", "run_batch", "run_checks", "run_episode", "tokenizers", "turn_span",
    "user_played_by", "with_checks", "word_diff",
]
