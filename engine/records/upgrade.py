"""Earlier episode records brought to the current schema, one version step at a time.

``Episode.from_dict`` runs every record through :func:`upgrade`, so a file or
database written by an earlier Rollscope reads as if written today. Each step
takes a record dict of version N and returns one of version N + 1.

* 1 -> 2: findings gained ``id`` and ``caused_by``. A version-1 record's
  findings (its own and its turns') are linked the way the checks link them.
  The linking rules are the checks' (``engine.checks.diagnosis``), a layer
  above the records, so this step lives there (``upgrade_v1``) and the readers
  (``read_episode``, ``upgrade_record``) run it; here a version-1 record is
  refused with a sentence naming them.
* 2 -> 3: ``config``, ``backend`` and ``source`` became typed objects
  (``engine.records.provenance``). The flat config splits into ``loop`` (every knob;
  a knob the record predates takes its default, which is what the loop did
  before the knob existed), ``sampling`` and ``env``; the backend's and
  source's own keys move to ``settings``/``details``; an empty backend
  becomes null. A message's null content (OpenAI's, beside tool calls)
  becomes "". Nothing else is filled in: a field a version-2 writer always
  wrote is still refused when missing.
* 3 -> 4: ``checked`` (the checks' version) is new; an earlier record did not
  say whether the checks ran on it, so it reads as null (not checked).
* 4 -> 5: ``outcome`` (why it earned its reward) is new. The env that scored the episode computes it
  (``engine.envs``, a layer above), so here it reads as null (or as the outcome the store added to an
  older row) and ``read_episode`` fills it for a finished episode, as every reader of stored or imported
  records does.
* 5 -> 6: ``raw_observation`` on each turn and ``ground_truth`` on the episode are new fields; the verl-tool loop
  of version 5 kept them in ``info`` (``info.raw_observation``, ``info.verl.ground_truth`` on every turn of a math
  episode). They move out of ``info``: a turn without them gets an empty list, an episode null.
* 6 -> 7: a turn's ``prompt_text`` may be given as pieces of the turn before it (``records.prompts``); a
  version-6 record holds every prompt whole, which version 7 reads as it is.
* 7 -> 8: ``entropy``, ``top_ids``, ``top_logprobs`` and ``entropy_estimated`` (per token, on the episode and each
  generation) and ``sampling.top_logprobs`` are new: none recorded.
* 8 -> 9: the outcome says whether the reward counts every turn's answer (``every_turn``). A math episode whose
  reward is the first turn's return (``config.loop.episode_reward = first_return``, AReaL's fixed turns) was
  explained by its last answer alone; its outcome reads as null here and ``read_episode`` computes it again. Every
  other outcome gains ``every_turn: false``. An outcome that already says it (the store refilled it,
  ``0015_summed_outcomes``) is kept.
* 9 -> 10: a tool call may keep arguments that are not a JSON object as written (``raw_arguments``); a version-9
  record has none, and reads as it is.
* 10 -> 11: ``checked_arrays``, a hash of the arrays the checks judged, is new: a version-10 record does not say
  which arrays its findings were of, and reads as it always did (null).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import FormatError


def _v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    raise FormatError("a version-1 record's findings are linked by the checks' rules: read it with "
                      "engine.read_episode", field="schema_version")


_SOURCE_KEYS = ("kind", "file", "line", "index")


def _v2_config(c: Any) -> Any:
    from dataclasses import fields

    from ..presets import ONE_CALL, LoopConfig
    from .provenance import EnvInfo

    if not isinstance(c, dict):
        return c  # malformed: refused by the reader, with the field named
    knobs = {k: v for k, v in c.items() if k not in ("sampling", "env_info")}
    if "one_call_instruction" in knobs:
        if knobs.pop("one_call_instruction") and "tool_instruction" not in knobs:
            knobs["tool_instruction"] = ONE_CALL
    loop = None
    if knobs:
        defaults = LoopConfig().to_dict()
        loop = {**{f.name: defaults[f.name] for f in fields(LoopConfig)}, **knobs}
    env = c.get("env_info")
    return {"loop": loop, "sampling": c.get("sampling") or None,
            "env": EnvInfo.of(env).to_dict() if isinstance(env, dict) and env else None}


def _v2_backend(b: Any) -> Any:
    from .provenance import BACKEND_FIELDS

    if not isinstance(b, dict):
        return b
    if not b:
        return None
    out: dict[str, Any] = {k: b.get(k) for k in sorted(BACKEND_FIELDS)}
    out["model"] = b.get("model") or ""
    out["settings"] = {k: v for k, v in b.items() if k not in BACKEND_FIELDS}
    return out


def _v2_source(s: Any) -> Any:
    if not isinstance(s, dict):
        return s
    rest = {k: v for k, v in s.items() if k not in _SOURCE_KEYS and k not in ("stepped", "user")}
    return {"kind": s.get("kind", "live"), "file": s.get("file"), "line": s.get("line"), "index": s.get("index"),
            "by_hand": s.get("stepped") == "by hand", "user_by_hand": s.get("user") == "human", "details": rest}


def _v2_message(m: Any) -> Any:
    return {**m, "content": ""} if isinstance(m, dict) and m.get("content", "") is None else m


def _v2_to_v3(d: dict[str, Any]) -> dict[str, Any]:
    out = {**d, "schema_version": 3}
    if "config" in d:
        out["config"] = _v2_config(d["config"])
    if "backend" in d:
        out["backend"] = _v2_backend(d["backend"])
    if "source" in d:
        out["source"] = _v2_source(d["source"])
    if isinstance(d.get("messages"), list):
        out["messages"] = [_v2_message(m) for m in d["messages"]]
    if isinstance(d.get("turns"), list):
        out["turns"] = [{**t, "observation": [_v2_message(m) for m in t["observation"]]}
                        if isinstance(t, dict) and isinstance(t.get("observation"), list) else t for t in d["turns"]]
    if isinstance(d.get("tokens"), list) and d.get("versions") is None:
        out["versions"] = [-1] * len(d["tokens"])
    return out


def _v3_to_v4(d: dict[str, Any]) -> dict[str, Any]:
    # Whether the checks ran was not recorded.
    return {**d, "schema_version": 4, "checked": None}


def _v4_to_v5(d: dict[str, Any]) -> dict[str, Any]:
    # An outcome the store added to an older row (``0011_outcomes``) is kept.
    return {**d, "schema_version": 5, "outcome": d.get("outcome")}


def _v5_turn(t: Any, truth: list[str]) -> Any:
    if not isinstance(t, dict) or not isinstance(t.get("info"), dict):
        return {**t, "raw_observation": []} if isinstance(t, dict) else t
    info = dict(t["info"])
    raw = info.pop("raw_observation", [])
    verl = info.get("verl")
    if isinstance(verl, dict) and "ground_truth" in verl:
        verl = dict(verl)
        value = verl.pop("ground_truth")
        if isinstance(value, str):
            truth.append(value)
        info["verl"] = verl
    return {**t, "info": info, "raw_observation": raw}


def _v5_to_v6(d: dict[str, Any]) -> dict[str, Any]:
    truth: list[str] = []
    out = {**d, "schema_version": 6}
    if isinstance(d.get("turns"), list):
        out["turns"] = [_v5_turn(t, truth) for t in d["turns"]]
    out["ground_truth"] = d.get("ground_truth", truth[-1] if truth else None)
    return out


def _v6_to_v7(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "schema_version": 7}


_NO_ALTERNATIVES: dict[str, Any] = {"top_ids": [], "top_logprobs": [], "entropy_estimated": False}


def _v7_turn(t: Any) -> Any:
    gen = t.get("generation") if isinstance(t, dict) else None
    if not isinstance(gen, dict):
        return t
    return {**t, "generation": {**_NO_ALTERNATIVES, "entropy": None, **gen}}


def _v7_to_v8(d: dict[str, Any]) -> dict[str, Any]:
    out = {**_NO_ALTERNATIVES, "entropy": [], **d, "schema_version": 8}
    config = d.get("config")
    if isinstance(config, dict) and isinstance(config.get("sampling"), dict):
        out["config"] = {**config, "sampling": {"top_logprobs": 0, **config["sampling"]}}
    if isinstance(d.get("turns"), list):
        out["turns"] = [_v7_turn(t) for t in d["turns"]]
    return out


def sums_turns(d: dict[str, Any], env: str | None = None) -> bool:
    """Whether a record (version 3 or later) is a math episode whose reward is the first turn's return; ``env``
    where the record leaves it out (the store keeps it in a column)."""
    config = d.get("config")
    loop = config.get("loop") if isinstance(config, dict) else None
    return (env or d.get("env")) == "math" and isinstance(loop, dict) and loop.get("episode_reward") == "first_return"


def _v8_to_v9(d: dict[str, Any]) -> dict[str, Any]:
    outcome = d.get("outcome")
    if isinstance(outcome, dict) and "every_turn" not in outcome:
        outcome = None if sums_turns(d) else {**outcome, "every_turn": False}
    return {**d, "schema_version": 9, "outcome": outcome}


STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6, 6: _v6_to_v7, 7: _v7_to_v8,
    8: _v8_to_v9, 9: lambda d: d, 10: lambda d: {**d, "schema_version": 11, "checked_arrays": None}}


def upgrade(d: dict[str, Any], to: int) -> dict[str, Any]:
    """``d`` (of the version it says, 1 when it says none) brought to version ``to``."""
    version = int(d.get("schema_version", 1))
    while version < to:
        d = STEPS[version](d)
        version += 1
    return d
