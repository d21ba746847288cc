"""Token modes: how each trainer's loop turns the conversation into its token array.

The loop (``loop.Stepper``) owns the conversation and the turn's order of
events; a token mode owns everything about tokens: what the backend is sent
(text or ids), how the reply's text is cut from the generation, what the env
is answered with, and which tokens each assistant reply and env message adds
to the array, with which loss mask. One class per loop reproduced:

* ``tito``: generated ids kept; env messages rendered after a fixed dummy
  conversation, so history is never re-rendered (Rollscope's own).
* ``retokenize``: render with tools, slice, re-encode and go on, flagging a
  rewrite (Rollscope's earlier render-and-slice loop; old records use it).
* ``slime``: slime's ``token_delta.py``: deltas rendered without tools, the
  generation prompt of later turns masked 0, a user message rendered
  standalone after a rewrite, and a refusal (the episode ends) elsewhere.
* ``slime-seed``: the seed agent's ``_get_token_delta``: no generation
  prompt after the first turn.
* ``areal-seed``: realhf's MathMultiTurnAgent: ids in and out, the reply's
  text cut by ``split(prompt_str)``, feedback tokens from
  ``tokenizer("\\n" + template([user], add_generation_prompt=True))``.
* ``areal``: AReaL's MultiTurnWorkflow: ids in and out, eos appended when
  the reply lacks it, then retry ids sliced from a dummy render.

A mode raises :class:`Halt` where the loop it reproduces gives up on the
conversation; the loop ends the episode ``aborted`` with that reason.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..presets import ONE_OR_MORE, LoopConfig
from ..records.episode import Finding, Generation, Message, Severity
from . import chat
from .tokenizer import Tokenizer


class Halt(Exception):
    """The reproduced loop stops here; ``finding`` says where and why."""

    def __init__(self, reason: str, finding: Finding) -> None:
        super().__init__(reason)
        self.reason = reason
        self.finding = finding


@dataclass
class Context:
    """What a token mode reads: the tokenizer, the tools, the knobs, the conversation, the array so far."""

    tok: Tokenizer
    tools: tuple[dict[str, Any], ...]
    config: LoopConfig
    builder: chat.TokenBuilder
    messages: list[Message]
    memo: chat.RenderMemo | None = None  # renders of the conversation's prefixes, for modes that render a lot


def prompt_text(tok: Tokenizer, messages: Sequence[Message], tools: Sequence[dict[str, Any]], config: LoopConfig) -> str:
    """The rendered prompt with the generation prompt, the tool sentence rewritten as the config says."""
    text = chat.render(tok, messages, tools, add_generation_prompt=True)
    if config.tool_instruction is not None:
        text = text.replace(ONE_OR_MORE, config.tool_instruction)
    return text


class TokenMode:
    """The base: render-based prompt text, generated text without its end-of-turn token."""

    name = ""
    sends_ids = False

    def start(self, c: Context) -> None:
        c.builder.add(chat.encode(c.tok, prompt_text(c.tok, c.messages, c.tools, c.config)), "prompt", 0, False)

    def request(self, c: Context) -> tuple[str | None, tuple[int, ...] | None]:
        """(prompt text, prompt ids) for the backend: exactly one of them is set."""
        if self.sends_ids:
            return None, tuple(c.builder.ids)
        return prompt_text(c.tok, c.messages, c.tools, c.config), None

    def content(self, c: Context, gen: Generation) -> str:
        """The assistant message's content: the generated text without its end-of-turn token."""
        return chat.strip_end_of_turn(c.tok, gen.text)

    def answer(self, c: Context, gen: Generation, content: str, prompt_len: int) -> str:
        """The text a reply without tool calls hands to the env."""
        return content

    def assistant(self, c: Context, t: int, gen: Generation, findings: list[Finding]) -> None:
        """Add the tokens of the assistant message ``c.messages[-1]``."""
        raise NotImplementedError

    def observation(self, c: Context, t: int, gen: Generation, obs: tuple[Message, ...],
                    findings: list[Finding]) -> None:
        """Add the tokens of the env messages ``obs`` (not yet in ``c.messages``)."""
        raise NotImplementedError


def _generated(c: Context, t: int, gen: Generation, findings: list[Finding]) -> None:
    """The generated ids as they are, with their logprobs and weight version.

    A backend that returned no ids (a strict OpenAI-compatible server) leaves only the text: it is
    re-encoded, and an ``ids_reencoded`` finding says that these are not ids the server vouched for.
    """
    ids = list(gen.token_ids) or chat.encode(c.tok, gen.text)
    if not gen.token_ids and ids:
        findings.append(Finding(
            "ids_reencoded", Severity.WARNING,
            f"the backend returned no token ids for turn {t}: its {len(ids)} trained ids are the reply's text "
            "re-encoded, which need not be the ids the model sampled, and carry no logprobs",
            turn=t, token_start=len(c.builder), token_end=len(c.builder) + len(ids)))
    lps = list(gen.logprobs) if gen.logprobs is not None and len(gen.logprobs) == len(ids) else None
    versions = [gen.weight_version] * len(ids) if gen.weight_version is not None else None
    c.builder.add(ids, "assistant", t, True, lps, versions)


def _reencoded(c: Context, t: int, ids: list[int], gen: Generation) -> None:
    """Re-encoded assistant ids; they carry the rollout's logprobs only while they are the generated ids."""
    lps: list[float] = [math.nan] * len(ids)
    ver: list[int] = [-1] * len(ids)
    if gen.logprobs is not None:
        for i, (a, b) in enumerate(zip(ids, gen.token_ids)):
            if a != b or i >= len(gen.logprobs):
                break
            lps[i] = gen.logprobs[i]
            ver[i] = gen.weight_version if gen.weight_version is not None else -1
    c.builder.add(ids, "assistant", t, True, lps, ver)


def _unstable(c: Context, t: int, what: str, delta: chat.TextDelta, n_ids: int, severity: Severity = Severity.ERROR,
              note: str = "the sliced delta (and its loss mask) is wrong") -> Finding:
    return Finding(
        "template_not_prefix_stable",
        severity,
        f"rendering the {what} message of turn {t} rewrote earlier text at character {delta.diff_at}; {note}",
        turn=t,
        # When the slice came out empty, point at the token where the lost text should have been.
        token_start=len(c.builder),
        token_end=len(c.builder) + max(n_ids, 1),
        evidence=delta.evidence(),
    )


class Tito(TokenMode):
    name = "tito"
    sends_ids = True

    def assistant(self, c: Context, t: int, gen: Generation, findings: list[Finding]) -> None:
        _generated(c, t, gen, findings)

    def observation(self, c: Context, t: int, gen: Generation, obs: tuple[Message, ...],
                    findings: list[Finding]) -> None:
        kind = obs[0].role if obs else "user"
        generated = chat.decode(c.tok, gen.token_ids) if gen.token_ids else gen.text
        c.builder.add(chat.encode(c.tok, chat.tail_after_generation(c.tok, generated, c.tools)), "tail", t, False)
        msgs_text, gp_text = chat.isolated_messages_delta(c.tok, obs, c.tools)
        c.builder.add(chat.encode(c.tok, msgs_text), kind, t, False)
        if c.config.gen_prompt_tokens:
            c.builder.add(chat.encode(c.tok, gp_text), "gen_prompt", t + 1, False)


class Retokenize(TokenMode):
    name = "retokenize"

    def assistant(self, c: Context, t: int, gen: Generation, findings: list[Finding]) -> None:
        delta = chat.assistant_delta(c.tok, c.messages[:-1], c.messages[-1], c.tools)
        ids = chat.encode(c.tok, delta.text)
        if not delta.stable:
            findings.append(_unstable(c, t, "assistant", delta, len(ids)))
        _reencoded(c, t, ids, gen)

    def observation(self, c: Context, t: int, gen: Generation, obs: tuple[Message, ...],
                    findings: list[Finding]) -> None:
        kind = obs[0].role if obs else "user"
        delta = chat.messages_delta(c.tok, c.messages, obs, c.tools)
        ids = chat.encode(c.tok, delta.text)
        if not delta.stable:
            findings.append(_unstable(c, t, kind, delta, len(ids)))
        c.builder.add(ids, kind, t, False)
        if c.config.gen_prompt_tokens:
            gp = chat.generation_prompt_delta(c.tok, [*c.messages, *obs], c.tools)
            c.builder.add(chat.encode(c.tok, gp.text), "gen_prompt", t + 1, False)


IM_END = "<|im_end|>"


class Slime(TokenMode):
    """slime's tau-bench agent with ``token_delta.py``."""

    name = "slime"

    def content(self, c: Context, gen: Generation) -> str:
        # slime strips exactly this text (response[:-10]), whatever the tokenizer's end-of-turn token is.
        return gen.text[: -len(IM_END)] if gen.text.endswith(IM_END) else gen.text

    def assistant(self, c: Context, t: int, gen: Generation, findings: list[Finding]) -> None:
        d = self._delta(c, c.messages, t, include_gp=t > 0)
        if d.masked:
            c.builder.add(d.ids[: d.masked], "gen_prompt", t, False)
        _reencoded(c, t, d.ids[d.masked :], gen)

    def observation(self, c: Context, t: int, gen: Generation, obs: tuple[Message, ...],
                    findings: list[Finding]) -> None:
        msgs = list(c.messages)
        for m in obs:
            msgs.append(m)
            d = self._delta(c, msgs, t, include_gp=False)
            if d.standalone and d.rewrite is not None:
                findings.append(_unstable(
                    c, t, m.role, d.rewrite, len(d.ids), Severity.WARNING,
                    "slime renders the user message on its own instead of slicing the rewritten conversation"))
            c.builder.add(d.ids, m.role, t, False)

    def _delta(self, c: Context, msgs: Sequence[Message], t: int, include_gp: bool) -> chat.SlimeDelta:
        if c.memo is None:
            c.memo = chat.RenderMemo(c.tok)
        try:
            return chat.slime_delta(c.tok, msgs, include_generation_prompt=include_gp, memo=c.memo)
        except chat.DeltaRefused as e:
            ev = e.delta.evidence() if e.delta is not None else {}
            # On the rewritten token where the ids laid down so far spell it; else where the message would go.
            found = chat.token_at_char(c.tok, c.builder.ids, e.before, e.delta.diff_at or 0) \
                if e.delta is not None else None
            at = found if found is not None else max(len(c.builder) - 1, 0)
            raise Halt(
                f"slime's token_delta.py raised: {e}",
                Finding("template_not_prefix_stable", Severity.ERROR,
                        f"turn {t}: adding the {msgs[-1].role} message rewrote earlier rendered text"
                        + (f" at character {e.delta.diff_at}" if e.delta is not None else "")
                        + f"; slime raises ValueError({str(e)!r}) and the sample ends here",
                        turn=t, token_start=at, token_end=at + 1,
                        evidence=ev | {"slime_error": str(e)}),
            ) from None


class SlimeSeed(Slime):
    """The seed agent's ``_get_token_delta``: each slice starts after the generation prompt."""

    name = "slime-seed"

    def assistant(self, c: Context, t: int, gen: Generation, findings: list[Finding]) -> None:
        ids, delta = chat.slime_seed_delta(c.tok, c.messages)
        if not delta.stable:
            findings.append(_unstable(c, t, "assistant", delta, len(ids)))
        _reencoded(c, t, ids, gen)

    def observation(self, c: Context, t: int, gen: Generation, obs: tuple[Message, ...],
                    findings: list[Finding]) -> None:
        msgs = list(c.messages)
        for m in obs:
            msgs.append(m)
            ids, delta = chat.slime_seed_delta(c.tok, msgs)
            if not delta.stable:
                findings.append(_unstable(c, t, m.role, delta, len(ids)))
            c.builder.add(ids, m.role, t, False)


def _decode_plain(tok: Tokenizer, ids: Sequence[int]) -> str:
    return str(tok.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False))


class ArealSeed(TokenMode):
    """realhf's MathMultiTurnAgent.collect_trajectory."""

    name = "areal-seed"
    sends_ids = True

    def answer(self, c: Context, gen: Generation, content: str, prompt_len: int) -> str:
        # answers = [seq_str.split(prompt_str)[1]], both decoded without special tokens.
        prompt_ids = c.builder.ids[:prompt_len]
        seq_str = _decode_plain(c.tok, [*prompt_ids, *gen.token_ids])
        prompt_str = _decode_plain(c.tok, prompt_ids)
        at = len(c.builder)
        try:
            return seq_str.split(prompt_str)[1]
        except (IndexError, ValueError) as e:
            raise Halt(
                f"AReaL's seq_str.split(prompt_str)[1] fails: {type(e).__name__}: {e}",
                Finding("answer_extraction_failed", Severity.ERROR,
                        "decoding prompt + reply does not contain the decoded prompt, so realhf's "
                        f"seq_str.split(prompt_str)[1] raises {type(e).__name__}; the trajectory is lost",
                        token_start=at - len(gen.token_ids) if gen.token_ids else at, token_end=at),
            ) from None

    def assistant(self, c: Context, t: int, gen: Generation, findings: list[Finding]) -> None:
        _generated(c, t, gen, findings)

    def observation(self, c: Context, t: int, gen: Generation, obs: tuple[Message, ...],
                    findings: list[Finding]) -> None:
        # The tokenizer's own call, special tokens and all (no add_special_tokens=False here).
        text = "\n" + chat.render(c.tok, obs, None, add_generation_prompt=True)
        _env_then_header(c, t, list(c.tok(text)["input_ids"]))


def _env_then_header(c: Context, t: int, ids: list[int]) -> None:
    """Feedback ids that end with the assistant header: the header is the next turn's generation prompt."""
    header = chat.encode(c.tok, chat.generation_prompt_delta(c.tok, [Message("user", "U")]).text)
    h = len(header)
    if h and ids[-h:] == header:
        c.builder.add(ids[:-h], "user", t, False)
        c.builder.add(header, "gen_prompt", t + 1, False)
    else:
        c.builder.add(ids, "user", t, False)


_RETRY_CACHE: weakref.WeakKeyDictionary[Any, dict[str, list[int]]] = weakref.WeakKeyDictionary()


def areal_retry_ids(tok: Tokenizer, feedback: str) -> list[int]:
    """MultiTurnWorkflow's ``multi_turn_prompt_ids``: s2[len(s1):] of two tokenized dummy renders."""
    try:
        per = _RETRY_CACHE.setdefault(tok, {})
    except TypeError:
        per = {}
    if feedback not in per:
        first = [Message("assistant", "some random message.")]
        s1 = chat.encode(tok, chat.render(tok, first))
        s2 = chat.encode(tok, chat.render(tok, [*first, Message("user", feedback)], add_generation_prompt=True))
        per[feedback] = s2[len(s1) :]
    return list(per[feedback])


class Areal(TokenMode):
    """AReaL's MultiTurnWorkflow.arun_episode."""

    name = "areal"
    sends_ids = True

    def answer(self, c: Context, gen: Generation, content: str, prompt_len: int) -> str:
        # The reward function is given tokenizer.decode(output_tokens), special tokens included.
        return chat.decode(c.tok, gen.token_ids) if gen.token_ids else gen.text

    def assistant(self, c: Context, t: int, gen: Generation, findings: list[Finding]) -> None:
        _generated(c, t, gen, findings)

    def observation(self, c: Context, t: int, gen: Generation, obs: tuple[Message, ...],
                    findings: list[Finding]) -> None:
        eos = getattr(c.tok, "eos_token_id", None)
        if gen.token_ids and eos is not None and gen.token_ids[-1] != eos:
            c.builder.add([eos], "tail", t, False)
        text = obs[0].content if obs else (c.config.feedback_wrong or "")
        _env_then_header(c, t, areal_retry_ids(c.tok, text))


class Verl(TokenMode):
    """verl's ToolAgentLoop: ids in and out; the loop's own ``loop/verl.py`` lays the tokens down."""

    name = "verl"
    sends_ids = True


MODES: dict[str, TokenMode] = {m.name: m for m in (Tito(), Retokenize(), Slime(), SlimeSeed(), ArealSeed(), Areal(),
                                                   Verl())}


def mode_for(config: LoopConfig) -> TokenMode:
    return MODES[config.token_mode]
