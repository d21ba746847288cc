"""Multi-turn math with AReaL's semantics.

Each turn the agent answers; the answer counts only when it is given in
``\\boxed{...}`` (as AReaL requires) and ``math-verify`` finds it equal to the
reference. The env replies with feedback as a user message: "correct", or
"wrong, try again". Whether the episode goes on after a correct answer is the
loop's decision (``stop_on_success``), not the env's.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from math_verify import parse, verify

from ..errors import EnvError, FormatError
from ..records.episode import Action, Episode, Message
from ..records.outcome import MathAnswer, Outcome, OutcomeKind
from .base import StepResult
from .math_problems import BUILTIN_PROBLEMS, MathProblem


class _TimeoutsOff(logging.Filter):
    """math-verify warns, once a process, that its timeouts are off: they are, on purpose (``check_answer``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.grader", "math_verify.parser"):
    logging.getLogger(_name).addFilter(_TimeoutsOff())

INSTRUCTION = "Solve the problem. Put your final answer in \\boxed{}."
FEEDBACK_CORRECT = "Your answer is correct."
FEEDBACK_WRONG = "Your answer is either wrong or not parsed correctly. Please try again."


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` in text, braces balanced."""
    at = text.rfind("\\boxed{")
    if at < 0:
        return None
    i = at + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def check_answer(text: str, solutions: tuple[str, ...]) -> tuple[bool, str | None]:
    """(correct, extracted answer). Timeouts off: signals only work on the main thread."""
    boxed = last_boxed(text)
    if boxed is None or not boxed.strip():
        return False, None
    pred = parse("\\boxed{" + boxed + "}", parsing_timeout=None)
    for sol in solutions:
        gold = parse(sol if "$" in sol or "\\boxed" in sol else f"${sol}$", parsing_timeout=None)
        if gold and pred and verify(gold, pred, timeout_seconds=None):
            return True, boxed
    return False, boxed


@dataclass(frozen=True)
class MathTask:
    id: str
    prompt: str
    solutions: tuple[str, ...]
    difficulty: int = 0
    kind: str = ""


def load_areal_jsonl(path: str | Path) -> list[MathTask]:
    """Read AReaL's math rows: ``query_id``, ``prompt``, ``solutions``."""
    tasks: list[MathTask] = []
    p = Path(path)
    if not p.is_file():
        raise EnvError(f"math problem file {p} does not exist")
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise FormatError(f"not JSON ({e.msg})", where) from e
            for key in ("query_id", "prompt", "solutions"):
                if key not in row:
                    raise FormatError("missing", where, key)
            sols = row["solutions"]
            if isinstance(sols, str):
                sols = [sols]
            if not isinstance(sols, list) or not sols:
                raise FormatError("must be a non-empty list of answers", where, "solutions")
            tasks.append(MathTask(str(row["query_id"]), str(row["prompt"]), tuple(str(s) for s in sols)))
    if not tasks:
        raise EnvError(f"math problem file {p} has no problems")
    return tasks


def _from_builtin(p: MathProblem) -> MathTask:
    return MathTask(p.id, p.prompt, (p.answer,), p.difficulty, p.kind)


class MathEnv:
    """Built-in problems (or a user's AReaL JSONL), checked with math-verify."""

    name = "math"
    tools: tuple[dict[str, Any], ...] = ()

    def __init__(self, problems: str | Path | None = None) -> None:
        self._source = str(problems) if problems else "builtin"
        items = load_areal_jsonl(problems) if problems else [_from_builtin(p) for p in BUILTIN_PROBLEMS]
        self._tasks = {t.id: t for t in items}
        self._order = [t.id for t in items]
        self._task: MathTask | None = None

    @property
    def tasks(self) -> list[str]:
        return list(self._order)

    def task(self, task_id: str) -> MathTask:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise EnvError(f"math env has no task {task_id!r}") from None

    def system_prompt(self, task_id: str) -> str | None:
        return None

    def reset(self, task_id: str) -> tuple[Message, ...]:
        self._task = self.task(task_id)
        return (Message("user", f"{self._task.prompt}\n{INSTRUCTION}"),)

    def step(self, action: Action) -> StepResult:
        if self._task is None:
            raise EnvError("step() before reset()")
        text = action.text if action.is_respond else ""
        ok, extracted = check_answer(text, self._task.solutions)
        feedback = FEEDBACK_CORRECT if ok else FEEDBACK_WRONG
        info = {"correct": ok, "extracted": extracted, "success": ok}
        return StepResult((Message("user", feedback),), 1.0 if ok else 0.0, False, info)

    def reference_reply(self, task_id: str, history: Sequence[Message], rng: random.Random, mistake_rate: float) -> str:
        task = self.task(task_id)
        answer = task.solutions[0]
        if rng.random() < mistake_rate:
            return _wrong_reply(answer, rng)
        return f"Let me work through this step by step.\nThe answer is \\boxed{{{answer}}}."

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "problems": self._source, "n_tasks": len(self._order)}


def _wrong_reply(answer: str, rng: random.Random) -> str:
    """A plausible wrong turn: an off-by-some answer, or one without a box."""
    if rng.random() < 0.25:
        return f"I think the answer is {answer}."  # right number, but unboxed: AReaL counts it wrong
    try:
        wrong = str(int(answer) + rng.choice([-2, -1, 1, 2, 10]))
    except ValueError:
        wrong = f"{answer}+1"
    return f"Let me work through this step by step.\nThe answer is \\boxed{{{wrong}}}."


def outcome(ep: Episode) -> Outcome:
    """The math outcome: each turn's extracted answer and verdict (the env's own, as the turn recorded it, else
    checked again here), the reference, and which case decided the reward. The scored turn is the last, unless the
    episode's reward is the first turn's return (``sums_turns``): then every answer counts, and right and wrong
    answers together are ``some_turns_wrong``, from the first wrong one."""
    solutions: tuple[str, ...] | None = None
    problems = ep.config.env.details.get("problems") if ep.config.env is not None else None
    try:
        env = MathEnv(problems if isinstance(problems, str) and problems != "builtin" else None)
        solutions = env.task(ep.task_id).solutions
    except (EnvError, FormatError):
        pass  # a problem file gone, a task it lacks: the turns' own verdicts stand alone
    answers = []
    for t in ep.turns:
        g = t.generation
        if g is None:
            continue
        if "correct" in t.info:
            ok, extracted = bool(t.info["correct"]), t.info.get("extracted")
        elif solutions is not None:
            ok, extracted = check_answer(g.text, solutions)
        else:
            ok, extracted = False, last_boxed(g.text)
        answers.append(MathAnswer(t.index, extracted if isinstance(extracted, str) else None, ok, g.finish_reason))
    ref = solutions[0] if solutions else None
    if not answers:
        return Outcome("no_boxed", None, None, None, (), (), (), (), ref, "the agent never answered")
    last = answers[-1]
    every = sums_turns(ep)

    def said(kind: OutcomeKind, turn: int | None, text: str) -> Outcome:
        return Outcome(kind, turn, None, None, (), (), (), tuple(answers), ref, text, every_turn=every)

    if ep.config.loop is None and len(answers) > 1:
        # A trainer's dump keeps one reward, not the rule that made it: which answers it scores is not known.
        return said("other", None, f"reward {ep.reward:g} for {len(answers)} answers; the record does not say whether "
                                   "it scores the last answer or sums every answer's (the loop's episode_reward)")
    if every and len(answers) > 1:
        right = [a.turn for a in answers if a.correct]
        wrong = [a for a in answers if not a.correct]
        summed = f"every turn's reward counts (the reward {ep.reward:g} sums them)"
        if not wrong:
            return said("correct", last.turn, f"every turn answered right ({last.extracted!r}); {summed}")
        if right:
            return said("some_turns_wrong", wrong[0].turn,
                        f"right at turn{_plural(right)}, wrong at turn{_plural([a.turn for a in wrong])}; {summed}")
        summed = f"every turn answered wrong and each counts (the reward {ep.reward:g} sums them)"
        if last.extracted is None and last.finish_reason == "length":
            return said("cut_by_length", last.turn, f"{summed}; the last, turn {last.turn}, was cut by the length "
                                                    f"limit before any \\boxed{{}} answer")
        if last.extracted is None:
            return said("no_boxed", last.turn, f"{summed}; the last, turn {last.turn}, has no \\boxed{{}} answer")
        return said("wrong_answer", last.turn, f"{summed}; the last, turn {last.turn}, answered {last.extracted!r} "
                                               f"(the reference is {ref!r})")
    if last.correct:
        return said("correct", last.turn, f"turn {last.turn}: {last.extracted!r} is right")
    early = next((a for a in answers if a.correct), None)
    if early is not None:
        return said("right_answer_not_scored", early.turn,
                    f"turn {early.turn} answered {early.extracted!r}, which is right, but the scored turn "
                            f"{last.turn} answered {last.extracted!r}")
    if last.extracted is None and last.finish_reason == "length":
        return said("cut_by_length", last.turn,
                    f"turn {last.turn} was cut by the length limit before any \\boxed{{}} answer")
    if last.extracted is None:
        return said("no_boxed", last.turn,
                    f"turn {last.turn} has no \\boxed{{}} answer to check (the reference is {ref!r})")
    return said("wrong_answer", last.turn, f"turn {last.turn} answered {last.extracted!r}; the reference is {ref!r}")


def sums_turns(ep: Episode) -> bool:
    """Whether the episode's reward sums every turn's: the first turn's return (``episode_reward =
    first_return``, AReaL's fixed turns), where each answer is scored, not the last alone."""
    return ep.config.loop is not None and ep.config.loop.episode_reward == "first_return"


def _plural(turns: list[int]) -> str:
    """"s 0, 1 and 3" or " 2": the turns after the word turn."""
    if len(turns) == 1:
        return f" {turns[0]}"
    return "s " + ", ".join(str(t) for t in turns[:-1]) + f" and {turns[-1]}"
