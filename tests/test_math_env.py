import json

import pytest

from engine.envs.math import FEEDBACK_CORRECT, FEEDBACK_WRONG, MathEnv, check_answer, last_boxed, load_areal_jsonl
from engine.errors import FormatError
from engine.records.episode import RESPOND, Action


def respond(text):
    return Action(RESPOND, {"content": text}, text)


def test_last_boxed_balances_braces():
    assert last_boxed(r"first \boxed{1} then \boxed{\frac{3}{4}}.") == r"\frac{3}{4}"
    assert last_boxed("no box here") is None
    assert last_boxed(r"\boxed{unclosed") is None


@pytest.mark.parametrize(
    "text,ok",
    [
        (r"so \boxed{3/4}", True),
        (r"so \boxed{\frac{3}{4}}", True),
        (r"so \boxed{0.75}", True),
        (r"so \boxed{4/3}", False),
        ("the answer is 3/4", False),  # AReaL requires the box
        (r"\boxed{}", False),
    ],
)
def test_check_answer(text, ok):
    assert check_answer(text, ("3/4",))[0] is ok


def test_builtin_env_steps():
    env = MathEnv()
    assert len(env.tasks) >= 200
    task = env.tasks[0]
    first = env.reset(task)
    assert first[0].role == "user" and "\\boxed{}" in first[0].content
    answer = env.task(task).solutions[0]
    res = env.step(respond(f"\\boxed{{{answer}}}"))
    assert res.reward == 1.0 and res.info["correct"] and res.observation[0].content == FEEDBACK_CORRECT
    res = env.step(respond("\\boxed{123456789}"))
    assert res.reward == 0.0 and res.observation[0].content == FEEDBACK_WRONG
    assert res.done is False  # ending is the loop's decision


def test_user_problems_in_areal_shape(tmp_path):
    p = tmp_path / "probs.jsonl"
    p.write_text(
        json.dumps({"query_id": "q1", "prompt": "What is 6*7?", "solutions": ["\\boxed{42}"]}) + "\n"
        + json.dumps({"query_id": "q2", "prompt": "Half of 9?", "solutions": ["4.5"]}) + "\n"
    )
    env = MathEnv(p)
    assert env.tasks == ["q1", "q2"]
    env.reset("q1")
    assert env.step(respond("\\boxed{42}")).reward == 1.0
    env.reset("q2")
    assert env.step(respond("\\boxed{9/2}")).reward == 1.0


def test_malformed_problem_file_names_line_and_field(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"query_id": "q1", "prompt": "x"}) + "\n")
    with pytest.raises(FormatError) as e:
        load_areal_jsonl(p)
    assert "bad.jsonl:1" in str(e.value) and "solutions" in str(e.value)


def test_scripted_mistake_rate_is_seeded():
    import random

    env = MathEnv()
    task = env.tasks[5]
    right = env.reference_reply(task, (), random.Random(1), 0.0)
    assert check_answer(right, env.task(task).solutions)[0]
    wrong = [env.reference_reply(task, (), random.Random(i), 1.0) for i in range(20)]
    assert not any(check_answer(w, env.task(task).solutions)[0] for w in wrong)
    assert env.reference_reply(task, (), random.Random(7), 0.5) == env.reference_reply(task, (), random.Random(7), 0.5)


def test_checking_an_answer_prints_nothing_of_its_own():
    """math-verify warns once a process that its timeouts are off; they are off on purpose, so `check` and
    `explain` on math say nothing of it."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run([sys.executable, "-c", "from engine.envs.math import check_answer; "
                           "print(check_answer('so \\\\boxed{2}', ('2',)))"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "(True, '2')\n", "")
