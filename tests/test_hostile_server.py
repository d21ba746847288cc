"""Nothing a server or a model sends takes down a batch, loses an episode or blocks an export.

Every mode of the hostile server (``tests/hostile.py``), through each HTTP
backend, and the hostile model corpus under every preset: each batch
finishes, each episode is stored with a terminal status (never ``failed``,
which means a bug of ours) and a reason when it did not complete, and the
database exports in every format, readable back and valid against the
record schema.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from engine import BackendSettings, EpisodeFilter, Store, formats, plan_run, run_batch
from engine.backends.openai import OpenAIBackend
from engine.backends.sglang import SGLangBackend
from engine.records.schema import problems

from .hostile import MODEL_CORPUS, SERVER_MODES, HostileServer

TIMEOUT_S = 1.0
MAX_BYTES = 4 * 2**20
BACKENDS = ("sglang", "completions", "chat")
PRESET_ENVS = (("tito", "math"), ("tito", "retail"), ("slime-tau", "retail"), ("slime-tau-seed", "retail"),
               ("areal-math", "math"), ("areal-multiturn", "math"))
EXPORTS = (("jsonl", "x.jsonl"), ("parquet", "x.parquet"), ("messages", "m.jsonl"), ("areal", "a.jsonl"),
           ("slime", "s.pt"))


@pytest.fixture(scope="module")
def hostile(smol_tokenizer):
    with HostileServer(smol_tokenizer) as server:
        yield server


def _backend(kind: str, base: str, tok, timeout: float = TIMEOUT_S, retries: int = 1):
    common = {"timeout": timeout, "retries": retries, "backoff": 0.01, "max_bytes": MAX_BYTES}
    if kind == "sglang":
        return SGLangBackend(base, tokenizer=tok, **common)
    return OpenAIBackend(base, model="hostile", mode=kind, tokenizer=tok, **common)


def _plan(env: str, preset: str, tasks: str, settings: str, max_new: int = 256, conc: int = 4):
    return plan_run(env, tasks, 1, preset, settings, conc, BackendSettings(max_new_tokens=max_new), preflight=False)


def _exports_whole(store: Store, tmp_path, n: int) -> None:
    for fmt, name in EXPORTS:
        assert formats.export(store.iter_episodes(), fmt, tmp_path / name) == n, fmt
    lines = (tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines:
        record = json.loads(line)  # strict JSON: no NaN, no lone surrogates
        assert problems(record) == []
    back = Store(tmp_path / "back.db")
    report = formats.import_path(tmp_path / "x.jsonl", "jsonl", back)
    assert report.new == n and not report.errors
    back.close()


def test_every_server_mode_ends_each_episode_with_a_status_and_a_reason(hostile, smol_tokenizer, tmp_path):
    store = Store(tmp_path / "modes.db")
    plan = _plan("math", "tito", "0:2", "max_turns = 2")

    async def one(mode, kind):
        # The deadline is short where it is what is tested; elsewhere it leaves room for a busy machine.
        timeout = TIMEOUT_S if mode.name in ("trickle", "hang") else 20.0
        backend = _backend(kind, f"{hostile.url}/{mode.name}", smol_tokenizer, timeout)
        return mode, kind, await run_batch(plan.spec(), plan.make_env, backend, smol_tokenizer, store)

    async def every():
        return await asyncio.gather(*(one(m, k) for m in SERVER_MODES for k in BACKENDS))

    results = asyncio.run(every())
    assert len(results) == len(SERVER_MODES) * len(BACKENDS)
    for mode, kind, result in results:
        rows = store.list_episodes(EpisodeFilter(run_id=result.run_id))
        assert len(rows) == 2, (mode.name, kind)
        assert store.db.execute("SELECT status FROM runs WHERE id = ?", [result.run_id]).fetchone() == ("finished",)
        for row in rows:
            ep = store.get_episode(row.id)
            kinds = {f.kind for f in ep.all_findings()}
            where = (mode.name, kind, ep.status.value, ep.reason)
            assert ep.status.value != "failed", where
            if mode.outcome == "aborts":
                assert ep.status.value == "aborted" and mode.reason in ep.reason, where
                assert mode.finding in kinds, where
            elif mode.outcome == "answers":
                assert ep.status.value in ("completed", "truncated"), where
            if mode.finding and mode.outcome != "aborts":
                assert mode.finding in kinds, where
    n = len(results) * 2
    _exports_whole(store, tmp_path, n)
    store.close()


def _generate(backend):
    from engine.backends.base import GenerationRequest, SamplingParams
    from engine.records.episode import Message

    return asyncio.run(backend.generate(GenerationRequest(prompt_text="Hi", prompt_ids=(1, 2, 3),
                                                          sampling=SamplingParams(max_new_tokens=8),
                                                          messages=(Message("user", "Hi"),))))


@pytest.mark.solo
@pytest.mark.parametrize("kind", BACKENDS)
def test_the_timeout_bounds_a_turn_against_a_trickling_server_retries_included(hostile, smol_tokenizer, kind):
    # One byte every 0.3 s never trips a per-read timeout of 1 s, /health answers, and 3 retries are allowed:
    # the timeout still bounds the turn's whole wait, not each try's.
    import time

    from engine.errors import BackendError

    base = f"{hostile.url}/trickle" + ("/v1" if kind != "sglang" else "")
    backend = _backend(kind, base, smol_tokenizer, retries=3)
    t0 = time.perf_counter()
    with pytest.raises(BackendError, match=r"no complete answer within 1s after 1 try \(the request's 1s deadline "
                                           r"left no time for another\)"):
        _generate(backend)
    assert time.perf_counter() - t0 < TIMEOUT_S + 0.8


@pytest.mark.solo
def test_retries_of_a_slowly_failing_server_stop_at_the_deadline(hostile, smol_tokenizer):
    import time

    from engine.errors import BackendError

    from .hostile import SLOW_S

    backend = SGLangBackend(f"{hostile.url}/slow500", tokenizer=smol_tokenizer, timeout=1.5, retries=10, backoff=0.01)
    t0 = time.perf_counter()
    with pytest.raises(BackendError, match=r"after [234] tries \(the request's 1.5s deadline left no time for "
                                           r"another\)(: |; before that: HTTP 500: )slow failure"):
        _generate(backend)
    assert time.perf_counter() - t0 < 1.5 + SLOW_S  # not 11 tries of 0.4 s


def test_the_answer_limit_is_shared_by_the_requests_in_flight(hostile):
    # Six answers of 3 MiB held open at once, each under the 4 MiB limit: together they are not taken.
    from engine.backends.http import JSONClient, RetryPolicy
    from engine.errors import BackendError

    limit = 4 * 2**20 + 1  # a budget of this test's own
    client = JSONClient("held", RetryPolicy(timeout=20, retries=0, max_bytes=limit))
    url = f"{hostile.url}/held/generate"

    async def six():
        return await asyncio.gather(*(client.post(url, {"i": i}) for i in range(6)), return_exceptions=True)

    out = asyncio.run(six())
    answered = [x for x in out if not isinstance(x, BaseException)]
    refused = [x for x in out if isinstance(x, BackendError)]
    assert len(answered) + len(refused) == 6
    assert 1 <= len(answered) <= 2  # 1 MiB of each is its own, the rest comes from the one 4 MiB budget
    assert all("the answers this process holds at once are at their 4,194,305-byte limit" in str(e) for e in refused)
    assert asyncio.run(client.post(url, {}))[0] == {}  # what the refused and the answered held is given back


@pytest.mark.parametrize("preset,env", PRESET_ENVS, ids=[f"{p}-{e}" for p, e in PRESET_ENVS])
def test_the_hostile_model_corpus_runs_under_every_preset(hostile, smol_tokenizer, tmp_path, preset, env):
    store = Store(tmp_path / "corpus.db")
    plan = _plan(env, preset, "0:12", "max_turns = 4", max_new=40_000, conc=1)
    hostile._next = 0
    # What the corpus's replies become is tested here, not the deadline: a turn gets time to spare on a busy machine.
    backend = _backend("sglang", f"{hostile.url}/corpus", smol_tokenizer, timeout=30.0)
    result = asyncio.run(run_batch(plan.spec(), plan.make_env, backend, smol_tokenizer, store))
    assert hostile._next >= len(MODEL_CORPUS), "every reply of the corpus was served"
    eps = list(store.iter_episodes(EpisodeFilter(run_id=result.run_id)))
    assert len(eps) == 12
    for ep in eps:
        assert ep.status.value in ("completed", "truncated", "aborted"), (ep.status, ep.reason)
        assert ep.status.value == "completed" or ep.reason
        for t in ep.turns:
            json.dumps(t.to_dict(), allow_nan=False)
    kinds = {f.kind for ep in eps for f in ep.all_findings()}
    assert "server_answer_invalid" not in kinds and "backend_error" not in kinds  # the corpus is well-formed
    if env == "retail":  # tool calls are parsed: what each hostile one became
        turns = {label: t for ep in eps for t in ep.turns for label, text in MODEL_CORPUS
                 if text and t.generation.text.startswith(text)}
        nan_args = turns["nan arguments"].tool_calls[0].arguments
        assert math.isnan(nan_args["expression"]) and nan_args["scale"] == math.inf and nan_args["floor"] == -math.inf
        assert "nested more than 100 levels deep" in turns["tool call nested 5,000 deep"].parse_error
        surrogate = turns["escaped lone surrogate in arguments"]
        assert surrogate.tool_calls[0].arguments == {"expression": "1+1 \ufffd"}
        assert [f.evidence for f in surrogate.findings if f.kind == "text_replaced"] == [
            {"where": "tool call", "replaced": 1}]
    _exports_whole(store, tmp_path, 12)
    store.close()


@pytest.mark.solo
def test_a_hung_server_ends_a_batch_in_about_one_timeout(hostile, smol_tokenizer, tmp_path, monkeypatch):
    # 8 episodes at concurrency 4, a 2 s deadline and 3 retries: without the health check this would take two
    # waves of 2 s each and more; with it, one deadline, then the health check the first wave started. That check
    # is given 1 s, so the second wave, which waits for it within its own 2 s, hears its answer (with 2 s each, the
    # two end together, and the second wave may hear only that the check has not answered yet).
    import time

    import engine.backends.http as http

    monkeypatch.setattr(http, "HEALTH_TIMEOUT_S", 1.0)

    settings = BackendSettings.parse("sglang", "", f"{hostile.url}/hang", "completions", "", 1.0, 1.0, 64, 0, 0,
                                     "2", "3")
    assert (settings.timeout, settings.retries) == (2.0, 3)
    plan = plan_run("math", "0:8", 1, "tito", "", 4, settings, preflight=False)
    tok, backend = plan.backend.open(plan.make_env)
    store = Store(tmp_path / "x.db")
    t0 = time.perf_counter()
    result = asyncio.run(run_batch(plan.spec(), plan.make_env, backend, tok, store))
    elapsed = time.perf_counter() - t0
    eps = list(store.iter_episodes(EpisodeFilter(run_id=result.run_id)))
    assert len(eps) == 8 and {e.status.value for e in eps} == {"aborted"}
    first = [e for e in eps if "no complete answer within 2s after 1 try" in e.reason]
    rest = [e for e in eps if "not sent: the server is taken for down (its health check (GET " in e.reason]
    assert len(first) == 4 and len(rest) == 4, [e.reason for e in eps]
    assert elapsed < 2.0 + 1.0 + 0.7, elapsed  # the check's 1 s, not the second wave's 2 s: about 3.1 s here
    assert eps[0].backend.timeout == 2.0 and eps[0].backend.retries == 3
    store.close()
