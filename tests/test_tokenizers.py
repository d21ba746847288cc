"""One tokenizer cache for the CLI, the checks and the dashboard: loads once, remembers failures, knows imports."""

from __future__ import annotations

from engine import Episode, Source, TokenizerCache, tokenizers
from engine.backends import local


def test_every_caller_gets_the_one_loaded_tokenizer(smol_tokenizer):
    from dashboard.views.tokens import episode_tokenizer

    live = Episode(id="e", env="math", task_id="0", tokenizer="smollm2")
    assert tokenizers.load(None) is tokenizers.load("smollm2") is tokenizers.load("") is local.load_tokenizer(None)
    assert TokenizerCache().get(live) is tokenizers.load(None)
    assert episode_tokenizer(live) == (tokenizers.load(None), None)


def test_a_failed_load_is_remembered_and_said(tmp_path, monkeypatch):
    calls = []
    real = local.load_tokenizer_uncached

    def counting(key):
        calls.append(key)
        return real(key)

    monkeypatch.setattr(local, "load_tokenizer_uncached", counting)
    missing = str(tmp_path / "no-such-tokenizer")
    tok, why = tokenizers.get(missing)
    assert tok is None and "no-such-tokenizer" in why
    again, why_again = tokenizers.get(missing)
    assert again is None and why_again == why and calls == [missing]  # not tried twice
    cache = TokenizerCache(override=missing)
    assert cache.get(Episode(id="e", env="math", task_id="0")) is None and cache.errors == {missing: why}
    tokenizers.forget(missing)
    tokenizers.get(missing)
    assert calls == [missing, missing]


def test_the_checks_do_not_judge_an_import_that_names_no_tokenizer(smol_tokenizer):
    from dashboard.views.tokens import episode_tokenizer

    imported = Episode(id="i", env="slime", task_id="0", tokenizer="", source=Source.imported("slime", "dump.pt"))
    tok, why = tokenizers.for_episode(imported)
    assert tok is None and "imported from slime without a tokenizer" in why
    assert tokenizers.for_episode(imported, override="smollm2") == (tokenizers.load(None), None)
    assert TokenizerCache().get(imported) is None and not TokenizerCache().errors
    # The dashboard still shows its ids with the embedded tokenizer, and its views say that is a guess.
    assert episode_tokenizer(imported) == (tokenizers.load(None), None)
