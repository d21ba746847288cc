"""LoopConfig, the loop's orthogonal knobs, and the named presets.

A preset is data: a ``LoopConfig`` plus the name of the code it reproduces.
Every knob can be changed per run (``rollscope run --set KNOB=VALUE``,
``--config FILE``); the effective config is stored on each episode.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError

# The sentence Qwen-style tool templates put before the tool list.
ONE_OR_MORE = "You may call one or more functions to assist with the user query."
# What Rollscope's earlier `slime-tau` wrote instead (kept to read old records).
ONE_CALL = "You may call one function at a time to assist with the user query."
# slime's tau-bench agent replaces the sentence with this text (leading space and all).
SLIME_TOOL_INSTRUCTION = (
    " At each turn, you are allowed to call one or no function to assist "
    "with task execution using <tools></tools> XML tags.\n"
    "YOU MUST EXECUTE TOOLS TO MAKE ANY MODIFICATIONS OR CANCELLATIONS. "
    "Each tool call leads to a message returned by the system.\n"
    "NEVER confirm execution to the user without seeing confirmation "
    "from the tool system.\n"
)
# AReaL's realhf MathMultiTurnAgent: the agent, not the env, writes the feedback.
AREAL_SEED_CORRECT = "Congratulations! You are correct!"
AREAL_SEED_WRONG = "Unfortunately your answer is wrong. Let's try again."
# AReaL's MultiTurnWorkflow: one fixed retry message, tokenized once.
AREAL_RETRY = (
    "Your answer is either wrong or not parsable to the reward function. You may misunderstand the original "
    "question. Please carefully read the original question, check the previous errors, and try to answer it again."
)

# Knobs added after records of schema 4 were first written: a record that predates them reads with their defaults
# (what its loop did: none of them is used outside token_mode=verl).
LATER_KNOBS = frozenset({"response_length", "prompt_length", "max_assistant_turns", "max_user_turns",
                         "max_parallel_calls", "max_tool_response_length", "tool_response_truncate_side", "format",
                         "calculate_log_probs", "apply_chat_template_kwargs"})

TOKEN_MODES = ("tito", "retokenize", "slime", "slime-seed", "areal-seed", "areal", "verl")
# verl's gsm8k interaction (verl/interactions/gsm8k_interaction.py): its two answers.
VERL_GSM8K_CORRECT = "Your response is correct!"
VERL_GSM8K_WRONG = "Your response is incorrect! You need to reflect on your answer and try again."
EPISODE_REWARDS = ("last", "first_return", "discounted_last")


@dataclass(frozen=True)
class LoopConfig:
    """How the loop turns a conversation into training data."""

    token_mode: str = field(default="tito", metadata={"doc": (
        "tito: keep generated ids, encode env messages in isolation; retokenize: render with tools, slice, "
        "re-encode and go on; slime: slime's token_delta.py (generation prompts masked 0, standalone user render, "
        "raises on other rewrites); slime-seed: the seed agent's _get_token_delta (no generation prompts after the "
        "first); areal-seed: realhf MathMultiTurnAgent (feedback as tokenizer('\\n' + template([user]))); "
        "areal: AReaL's MultiTurnWorkflow (eos if missing, then fixed retry ids); verl: verl's ToolAgentLoop "
        "(the knobs below with verl's names)")})
    max_turns: int = field(default=5, metadata={"doc": "assistant turns at most"})
    turn_limit_status: str = field(default="truncated", metadata={"doc": (
        "status when max_turns runs out: truncated, or completed for fixed-turn workflows")})
    stop_on_done: bool = field(default=True, metadata={"doc": "end when the env says done"})
    stop_on_success: bool = field(default=True, metadata={"doc": "end when the env reports success"})
    on_parse_error: str = field(default="feedback", metadata={"doc": (
        "abort ends the episode; feedback sends the error back as a user message")})
    tool_calls_per_turn: int = field(default=0, metadata={"doc": "1 executes the first call only; 0 all of them"})
    tool_parser: str = field(default="hermes", metadata={"doc": (
        "hermes/qwen: <tool_call> blocks, strict; sglang-qwen25: sglang's Qwen25Detector as slime calls it "
        "(unknown tools dropped, their text sent to the user); llama3: one JSON object")})
    tool_instruction: str | None = field(default=None, metadata={"doc": (
        "text that replaces the template's 'You may call one or more functions...' sentence (None: keep it)")})
    keep_failed_turn: bool = field(default=True, metadata={"doc": (
        "a generation that ends the episode (abort, parse error under abort) goes into messages and tokens; "
        "slime returns before appending it")})
    observe_last: bool = field(default=False, metadata={"doc": (
        "append the last observation to messages and tokens when the episode ends (slime does)")})
    gen_prompt_tokens: bool = field(default=True, metadata={"doc": (
        "tito: put the assistant header of turns after the first into the tokens (masked 0)")})
    feedback_correct: str | None = field(default=None, metadata={"doc": (
        "user feedback the loop writes after a correct turn, replacing the env's observation")})
    feedback_wrong: str | None = field(default=None, metadata={"doc": (
        "user feedback the loop writes after a wrong turn, replacing the env's observation")})
    shape_rewards: bool = field(default=False, metadata={"doc": "AReaL's ((r - 0.5) * 2 - bias) * scale per turn"})
    reward_scale: float = field(default=1.0, metadata={"doc": "shaping scale"})
    reward_bias: float = field(default=0.0, metadata={"doc": "shaping bias"})
    turn_discount: float = field(default=1.0, metadata={"doc": "discount of returns / of a later success"})
    episode_reward: str = field(default="last", metadata={"doc": (
        "last: the env's last reward; first_return: the discounted return of turn 0 (realhf); "
        "discounted_last: last reward x turn_discount^(turns-1) (MultiTurnWorkflow)")})

    # verl's ToolAgentLoop (token_mode=verl), named and defaulted as verl/trainer/config/rollout/rollout.yaml.
    response_length: int = field(default=512, metadata={"doc": (
        "verl: rollout.response_length; the episode ends when the response reaches it, and is cut there")})
    prompt_length: int = field(default=512, metadata={"doc": (
        "verl: rollout.prompt_length; a longer first prompt fails the episode, as verl's dataset refuses it")})
    max_assistant_turns: int | None = field(default=None, metadata={"doc": (
        "verl: multi_turn.max_assistant_turns (none: unlimited)")})
    max_user_turns: int | None = field(default=None, metadata={"doc": (
        "verl: multi_turn.max_user_turns, tool rounds and interaction answers both count (none: unlimited)")})
    max_parallel_calls: int = field(default=1, metadata={"doc": (
        "verl: multi_turn.max_parallel_calls; calls past it are dropped")})
    max_tool_response_length: int = field(default=256, metadata={"doc": (
        "verl: multi_turn.max_tool_response_length, in characters")})
    tool_response_truncate_side: str = field(default="middle", metadata={"doc": (
        "verl: multi_turn.tool_response_truncate_side: left keeps the start, right the end, middle both halves")})
    format: str = field(default="hermes", metadata={"doc": "verl: multi_turn.format, the tool parser (hermes)"})
    calculate_log_probs: bool = field(default=False, metadata={"doc": (
        "verl: rollout.calculate_log_probs; off, the response has no logprobs; on, 0.0 at mask-0 positions")})
    apply_chat_template_kwargs: str = field(default="{}", metadata={"doc": (
        "verl: data.apply_chat_template_kwargs, a JSON object (e.g. {\"enable_thinking\": false})")})

    def __post_init__(self) -> None:
        choices = {
            "token_mode": TOKEN_MODES,
            "turn_limit_status": ("truncated", "completed"),
            "on_parse_error": ("abort", "feedback"),
            "tool_parser": ("hermes", "qwen", "llama3", "sglang-qwen25"),
            "episode_reward": EPISODE_REWARDS,
            "tool_response_truncate_side": ("left", "right", "middle"),
            "format": ("hermes",),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, not {self.max_turns}")
        if self.tool_calls_per_turn < 0:
            raise ConfigError("tool_calls_per_turn must be 0 (all) or a positive number")
        for name in ("response_length", "prompt_length", "max_parallel_calls"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_tool_response_length < 0:
            raise ConfigError(f"max_tool_response_length must be 0 or more, not {self.max_tool_response_length}")
        try:
            kwargs = json.loads(self.apply_chat_template_kwargs)
        except json.JSONDecodeError as e:
            raise ConfigError(f"apply_chat_template_kwargs must be a JSON object, not "
                              f"{self.apply_chat_template_kwargs!r} ({e.msg})") from None
        if not isinstance(kwargs, dict):
            raise ConfigError(f"apply_chat_template_kwargs must be a JSON object, not {self.apply_chat_template_kwargs!r}")

    def to_dict(self) -> dict[str, Any]:
        # Every knob is a str, a number, a bool or None: no copy is needed of any (``asdict`` copies deeply, and
        # runs for every episode written).
        return {name: getattr(self, name) for name in _KNOB_NAMES}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoopConfig:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        # Records written before tool_instruction existed said one_call_instruction=True.
        if "tool_instruction" not in d and d.get("one_call_instruction"):
            kw["tool_instruction"] = ONE_CALL
        return cls(**kw)

    def with_(self, **changes: Any) -> LoopConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def with_settings(self, settings: dict[str, Any]) -> LoopConfig:
        """This config with knobs changed by name; values may be strings (``--set``) and are parsed."""
        out = {}
        for name, raw in settings.items():
            out[name] = parse_knob(name, raw)
        try:
            return replace(self, **out)
        except TypeError as e:
            raise ConfigError(str(e)) from None


_KNOB_NAMES = tuple(f.name for f in fields(LoopConfig))


def knobs() -> list[dict[str, Any]]:
    """Every knob: name, type, default and what it does."""
    out = []
    for f in fields(LoopConfig):
        default = f.default if f.default is not MISSING else None
        out.append({"name": f.name, "type": _type_name(f.type), "default": default, "doc": f.metadata.get("doc", "")})
    return out


def _type_name(t: Any) -> str:
    return str(t).replace("typing.", "")


def parse_knob(name: str, raw: Any) -> Any:
    """A knob's value from text (``--set turn_discount=0.9``) or JSON, checked against its type."""
    f = next((f for f in fields(LoopConfig) if f.name == name), None)
    if f is None:
        raise ConfigError(f"unknown knob {name!r}; knobs: {', '.join(x.name for x in fields(LoopConfig))}")
    kind = _type_name(f.type)
    if not isinstance(raw, str):
        value = raw
    elif raw.lower() in ("none", "null") and "None" in kind:
        return None
    elif kind == "bool":
        if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"{name} takes true or false, not {raw!r}")
        return raw.lower() in ("true", "1", "yes")
    elif kind in ("int", "int | None"):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{name} takes a whole number, not {raw!r}") from None
    elif kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{name} takes a number, not {raw!r}") from None
    elif raw.startswith('"'):
        try:  # a JSON string, so newlines and leading spaces can be written
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{name}: {raw!r} starts with a quote but is not a JSON string ({e.msg})") from None
    else:
        return raw
    types: dict[str, type | tuple[type, ...]] = {"bool": bool, "int": int, "float": (int, float)}
    want = types.get(kind)
    if want is not None and (not isinstance(value, want) or (kind != "bool" and isinstance(value, bool))):
        raise ConfigError(f"{name} takes a {kind}, not {value!r}")
    if kind == "float":
        return float(value)
    if kind.startswith("str") and value is not None and not isinstance(value, str):
        raise ConfigError(f"{name} takes text, not {value!r}")
    return value


_SETTING = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(.*)")


def parse_settings(text: str) -> dict[str, str]:
    """Knob changes written one per line, ``knob = value`` (``#`` starts a comment line); values are parsed
    by ``with_settings``. ConfigError names the line that is wrong."""
    out: dict[str, str] = {}
    for i, line in enumerate(str(text or "").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _SETTING.match(stripped)
        if m is None:
            raise ConfigError(f"loop settings, line {i}: write `knob = value`, not {stripped!r}")
        name, value = m.group(1), m.group(2)
        if name in out:
            raise ConfigError(f"loop settings, line {i}: {name} is set twice")
        out[name] = value.strip()
    return out


def apply_settings(config: LoopConfig, text: str) -> LoopConfig:
    """``config`` with the knob changes of a settings text (see ``parse_settings``)."""
    settings = parse_settings(text)
    for name, raw in settings.items():
        parse_knob(name, raw)  # the first bad value is named alone, before the config checks its choices
    return config.with_settings(settings)


def format_knob(value: Any) -> str:
    """A knob's value as a settings line writes it (what ``parse_knob`` reads back)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and (value != value.strip() or "\n" in value or value.startswith('"')
                                   or value.lower() in ("none", "null")):
        return json.dumps(value)
    return str(value)


@dataclass(frozen=True)
class Preset:
    """A named loop configuration and the code it reproduces."""

    name: str
    config: LoopConfig
    reproduces: str
    summary: str
    notes: tuple[str, ...] = ()
    """What a reader of its episodes must know (where a number comes from, a default that refuses an env)."""


_SLIME = LoopConfig(
    token_mode="slime",
    max_turns=30,
    turn_limit_status="truncated",
    stop_on_success=False,
    on_parse_error="abort",
    tool_calls_per_turn=1,
    tool_parser="sglang-qwen25",
    tool_instruction=SLIME_TOOL_INSTRUCTION,
    keep_failed_turn=False,
    observe_last=True,
)

PRESET_LIST: tuple[Preset, ...] = (
    Preset(
        "tito",
        LoopConfig(token_mode="tito", max_turns=20, stop_on_success=True, on_parse_error="feedback"),
        "Rollscope's token-in-token-out loop",
        "generated ids and logprobs kept exactly; env messages encoded in isolation; parse errors sent back",
    ),
    Preset(
        "slime-tau",
        _SLIME,
        "slime examples/tau-bench/trainable_agents.py + token_delta.py (current)",
        "render with tools and TOOL_INSTRUCTION, send text; sglang qwen25 parser, first call only; "
        "token_delta.py with later generation prompts masked 0; aborts on parse failure, server abort, env "
        "failure or a history rewrite token_delta.py refuses",
    ),
    Preset(
        "slime-tau-seed",
        replace(_SLIME, token_mode="slime-seed"),
        "slime examples/tau-bench/trainable_agents.py as this project started from it (shared/seeds)",
        "as slime-tau, but _get_token_delta slices after each generation prompt: every turn's generation "
        "prompt after the first is missing from the tokens",
    ),
    Preset(
        "areal-math",
        LoopConfig(
            token_mode="areal-seed",
            max_turns=5,
            turn_limit_status="completed",
            stop_on_success=False,
            on_parse_error="feedback",
            feedback_correct=AREAL_SEED_CORRECT,
            feedback_wrong=AREAL_SEED_WRONG,
            shape_rewards=True,
            turn_discount=1.0,
            episode_reward="first_return",
        ),
        "AReaL realhf MathMultiTurnAgent (math-multi-turn), as this project started from it (shared/seeds)",
        "5 fixed turns; the agent's own feedback tokenized as tokenizer('\\n' + template([user], "
        "add_generation_prompt=True)); per-turn ((r-0.5)*2-bias)*scale, returns discounted backwards",
    ),
    Preset(
        "areal-multiturn",
        LoopConfig(
            token_mode="areal",
            max_turns=2,
            turn_limit_status="completed",
            stop_on_success=True,
            on_parse_error="feedback",
            feedback_wrong=AREAL_RETRY,
            turn_discount=0.95,
            episode_reward="discounted_last",
        ),
        "AReaL areal/workflow/multi_turn.py MultiTurnWorkflow (current)",
        "retry until the reward is non-zero; eos appended when the reply lacks it, then fixed retry ids sliced "
        "from a dummy render; reward x turn_discount^(turns-1)",
    ),
    Preset(
        "verl-tool",
        LoopConfig(
            token_mode="verl",
            max_turns=1000,
            turn_limit_status="truncated",
            stop_on_success=False,
            on_parse_error="feedback",
            keep_failed_turn=True,
        ),
        "verl verl/experimental/agent_loop/tool_agent_loop.py ToolAgentLoop (with agent_loop.py, "
        "utils/chat_template.py, agent_loop/tool_parser.py, tools/schemas.py, interactions/gsm8k_interaction.py, "
        "utils/reward_score/gsm8k.py, trainer/config/rollout/rollout.yaml)",
        "prompt rendered once with verl's tool schemas; replies appended as generated (mask 1); tool results and "
        "the interaction's answers rendered alone with the generation prompt and cut by the default system block "
        "(mask 0, no newline after <|im_end|>); hermes calls past max_parallel_calls dropped; tool text cut at "
        "max_tool_response_length; ends at response_length, max_assistant_turns, max_user_turns, a reply without a "
        "call, or the interaction; the response cut at response_length. max_turns is not used: verl's own limits are",
        (
            "rewards on math: each turn's reward is verl's gsm8k interaction score (verl's: "
            "gsm8k.compute_score('#### ' + reply, ground_truth, method='flexible')), which also picks its answer "
            f"({VERL_GSM8K_CORRECT!r}, ending the episode, or {VERL_GSM8K_WRONG!r}); turn info verl.strict_score is "
            "verl's default gsm8k reward (method='strict': the last '#### N' in the last 300 characters, compared as "
            "text), so a \\boxed{} answer scores 0 there; turn info ours is Rollscope's math checker (math-verify on "
            "\\boxed{}), which verl never sees",
            "rewards on retail and taubench:*: the interaction is the env's user and each turn's reward is the env's "
            "(ours: verl's own reward manager is not run); a tool's step reward is verl's tool reward (0.0 on error)",
            "prompt_length 512 (verl's default) refuses retail and tau-bench prompts (about 2,900 tokens with the "
            "tool schemas): those episodes fail at once; run with --set prompt_length=4096",
        ),
    ),
)
PRESETS: dict[str, LoopConfig] = {p.name: p.config for p in PRESET_LIST}
PRESET_INFO: dict[str, Preset] = {p.name: p for p in PRESET_LIST}


def get_preset(name: str) -> LoopConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None


def load_config_file(path: str | Path) -> tuple[str, LoopConfig]:
    """A preset file: JSON ``{"base": PRESET, "knobs": {...}}`` or a full ``{"knobs": {...}}`` (the format
    ``rollscope presets --json`` prints for each preset). Returns (name, config)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {p}: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"config file {p} is not JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, dict) or not isinstance(data.get("knobs", {}), dict):
        raise ConfigError(f"config file {p}: expected an object with \"knobs\" (and optionally \"base\", \"name\")")
    base_name = data.get("base")
    base = get_preset(base_name) if base_name else LoopConfig()
    config = base.with_settings(dict(data.get("knobs") or {}))
    return str(data.get("name") or base_name or p.stem), config


def preset_document(p: Preset) -> dict[str, Any]:
    """A preset as the JSON a ``--config`` file holds."""
    return {"name": p.name, "reproduces": p.reproduces, "summary": p.summary, "knobs": p.config.to_dict()}


def default_preset(env: str) -> str:
    """The preset an env is usually run with: AReaL's math loop, slime's tau-bench loop for tool envs."""
    return "areal-math" if env == "math" else "slime-tau"
