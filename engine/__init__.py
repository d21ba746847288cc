"""Rollscope engine: the traced multi-turn agent loop, its store and formats.

This package's names (``__all__``) are the one face the CLI, the dashboard
and a researcher's scripts use; the modules behind it are free to move. It
exports names, not modules. The layers below it, bottom up, each a package
whose docstring says what it may import (``tests/test_layers.py`` holds the
order): ``errors`` and ``presets``; ``records``; ``tokens``; ``backends``;
``envs``; ``checks``; ``store``; ``loop``; ``analysis``; ``formats``;
``launch``; ``cli``.
Heavy dependencies (torch, transformers) load only when a local model or a
tokenizer is used.

    store = Store("rollscope.db")
    plan = plan_run("math", "0:4", 2, "auto", "max_turns = 3", 2, BackendSettings(), preflight=False)
    tokenizer, backend = plan.backend.open(plan.make_env)
    asyncio.run(run_batch(plan.spec(), plan.make_env, backend, tokenizer, store))

(the README's "From Python" runs it).
"""

from .analysis.at_turn import (
    PromptView,
    RewardSoFar,
    TurnSpan,
    common_prefix,
    findings_up_to,
    prompt_at,
    prompt_tokens,
    reward_so_far,
    rewrites_at,
    turn_span,
)
from .analysis.compare import (
    Comparison,
    PartingSide,
    TokenParting,
    TurnDiff,
    calls_text,
    compare,
    observation_text,
    opening_messages,
    token_parting,
    word_diff,
)
from .analysis.entropy import (
    FORKS_PER_TURN,
    ForkToken,
    TokenChoice,
    TurnEntropy,
    alternatives_at,
    has_entropy,
    turn_entropy,
)
from .analysis.groups import (
    GROUP_NORMALIZATION,
    GroupSample,
    GroupView,
    Parting,
    flat_groups,
    group_view,
    load_group,
    reward_partings,
)
from .analysis.replays import ReplayCause, replay_causes, replay_summary
from .analysis.steps import ENTROPY_DROP, StepChange, step_changes
from .analysis.tokendiff import (
    TD_CHANGED,
    TD_ONLY_A,
    TD_ONLY_B,
    TokenDiff,
    TokenDiffRow,
    laid_down_ending,
    retokenized,
    token_diff,
)
from .backends.base import Backend, GenerationRequest, SamplingParams
from .backends.tokenizers import (
    TokenizerCache,
    episode_tokenizer,
    forget_tokenizers,
    load_tokenizer,
    tokenizer_spec,
    try_tokenizer,
)
from .checks import CHECKS_VERSION, CheckOptions, run_checks, with_checks
from .checks.diagnosis import consequences, diagnosis, link_findings, linked, misplaced, read_episode, roots
from .envs import ENVS, env_factory, parse_tasks
from .envs.base import Env, StepResult
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
from .formats import EXPORTERS, IMPORTERS, ON_IDS, export, import_path, no_ids
from .formats.watch import WATCH_FORMATS, Watcher, WatchEvent
from .launch.batch import BatchResult, BatchSpec, run_batch
from .launch.demo import DEMO_PARTS, DemoPart, DemoReport, DemoRun, build_demo, find_qwen3
from .launch.plan import (
    AUTO,
    MAX_EPISODES,
    MAX_TOP_LOGPROBS,
    PRESET_CHOICES,
    BackendSettings,
    HandStart,
    RunPlan,
    UserSettings,
    check_env,
    check_reachable,
    loop_config,
    plan_fork,
    plan_run,
    plan_step,
    preset_name,
)
from .launch.policies import POLICIES, make_backend
from .loop.fork import ActionPreview, ForkReport, HandStepper, fork, parent_env, user_played_by
from .loop.outputdiff import OutputChange, output_diff
from .loop.replay import replay, replay_stored
from .loop.stepper import Stepper, new_id, run_episode
from .loop.verdicts import ReplayResult, TurnVerdict
from .presets import (
    PRESET_INFO,
    PRESETS,
    LoopConfig,
    apply_settings,
    default_preset,
    format_knob,
    get_preset,
    knobs,
    load_config_file,
    parse_settings,
)
from .records.alternatives import NEAR_ZERO_ENTROPY
from .records.episode import (
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
from .records.outcome import (
    OUTCOME_COLORS,
    OUTCOME_KINDS,
    OUTCOME_LABELS,
    PASSING_KINDS,
    DbChange,
    MathAnswer,
    Outcome,
    OutcomeCall,
    kind_label,
    kind_passed,
)
from .records.provenance import BackendInfo, EnvInfo, RunConfig, Source
from .records.schema import episode_schema
from .store import (
    SORTABLE,
    Bins,
    BrowseStats,
    EpisodeFilter,
    EpisodePage,
    EpisodeSummary,
    MatchCount,
    RewardBins,
    RewardStats,
    RunOverview,
    RunSummary,
    StepStats,
    Store,
)
from .tokens.chat import decode
from .tokens.tokenizer import Tokenizer

__all__ = [
    "AUTO", "CHECKS_VERSION", "DEMO_PARTS", "ENTROPY_DROP", "ENVS", "EXPORTERS", "FORKS_PER_TURN", "GROUP_NORMALIZATION", "IMPORTERS", "MAX_EPISODES", "MAX_TOP_LOGPROBS", "NEAR_ZERO_ENTROPY", "ON_IDS", "OUTCOME_COLORS", "OUTCOME_KINDS", "OUTCOME_LABELS", "PASSING_KINDS", "POLICIES",
    "PRESETS", "PRESET_CHOICES", "PRESET_INFO", "SCHEMA_VERSION", "SORTABLE", "TD_CHANGED", "TD_ONLY_A", "TD_ONLY_B",
    "WATCH_FORMATS",
    "Action", "ActionPreview", "Backend", "BackendError", "BackendInfo", "BackendSettings", "BatchResult",
    "BatchSpec", "Bins", "BrowseStats", "CheckOptions", "Comparison", "ConfigError", "DemoPart", "DemoReport",
    "DbChange", "DemoRun", "Env", "EnvError", "EnvInfo", "Episode", "EpisodeFilter", "EpisodePage", "EpisodeSummary",
    "Finding", "ForkReport", "ForkToken", "FormatError", "Generation", "GenerationRequest", "GroupSample", "GroupView", "HandStart",
    "HandStepper", "LoopConfig", "MatchCount", "MathAnswer", "Message", "ModelNotFound", "Outcome", "OutcomeCall",
    "OutputChange", "Parting", "PartingSide", "PromptView", "ReplayCause", "ReplayResult", "RewardBins", "RewardSoFar",
    "RewardStats", "RollscopeError", "RunConfig", "RunOverview", "RunPlan", "RunSummary", "SamplingParams", "Segment", "Severity",
    "Source", "Status", "StepChange", "StepResult", "StepStats", "Stepper", "Store", "StoreError", "TemplateError", "TokenArrays", "TokenChoice",
    "TokenDiff", "TokenDiffRow", "TokenParting", "Tokenizer", "TokenizerCache", "TokenizerNotFound", "ToolCall", "Turn", "TurnDiff",
    "TurnEntropy", "TurnSpan", "TurnVerdict", "UserSettings", "WatchEvent", "Watcher",
    "alternatives_at", "apply_settings", "build_demo", "calls_text", "check_env", "check_reachable", "common_prefix", "compare",
    "consequences", "decode", "default_preset", "diagnosis", "env_factory", "episode_schema", "episode_tokenizer",
    "export", "find_qwen3", "findings_up_to", "flat_groups", "forget_tokenizers", "fork", "format_knob",
    "get_preset", "group_view", "has_entropy", "import_path", "no_ids", "kind_label", "kind_passed", "knobs", "link_findings", "linked", "load_config_file", "load_group",
    "load_tokenizer", "loop_config", "make_backend", "misplaced", "new_id", "observation_text", "opening_messages",
    "output_diff", "parent_env", "parse_settings", "parse_tasks", "plan_fork", "plan_run", "plan_step", "preset_name", "prompt_at",
    "laid_down_ending", "prompt_tokens", "read_episode", "replay", "replay_causes", "replay_stored", "replay_summary",
    "retokenized",
    "reward_partings", "reward_so_far", "rewrites_at", "roots", "run_batch", "run_checks",
    "run_episode", "step_changes", "token_diff", "token_parting", "tokenizer_spec", "try_tokenizer", "turn_entropy", "turn_span", "user_played_by", "with_checks",
    "word_diff",
]
