"""The wrong argument's token in a real browser: a retail episode with a wrong address planted at a known turn
(the real loop, ``tests/planted_outcomes.py``), the top K written at its first wrong digit, checked and stored;
the Episode tab's findings list says it and its link marks the token."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.backends.tokenizers import load_tokenizer
from engine.checks import CheckOptions, with_checks
from engine.store import Store
from engine.tokens import chat
from tests.browser.conftest import _run_sync, serve
from tests.planted_outcomes import planted, slip

TOKENS = "#rs-episode-tokens"


@pytest.mark.browser
def test_the_findings_list_says_where_the_wrong_digit_was_and_what_came_second(page: Any, tmp_path: Path,
                                                                              screenshots: Path) -> None:
    tok = load_tokenizer(None)
    _, plant = slip("moved-00", address1="3501 Rookery Street")
    ep, turns = planted(tok, "moved-00", plant, _run_sync, tokenizer_name="smollm2")
    seg = next(s for s in ep.segments if s.kind == "assistant" and s.turn == turns[0])
    ids = ep.tokens.ids.tolist()
    at = next(i for i in range(seg.start, seg.end) if chat.decode(tok, ids[seg.start:i]).endswith('"address1": "'))
    n = len(ids)
    top_ids = np.full((n, 2), -1, dtype=np.int32)
    top_lps = np.full((n, 2), np.nan, dtype=np.float32)
    (two,) = chat.encode(tok, "2")
    top_ids[at], top_lps[at] = [ids[at], two], [math.log(0.61), math.log(0.34)]
    ep = with_checks(ep.evolve(tokens=ep.tokens.evolve(top_ids=top_ids, top_logprobs=top_lps)),
                     CheckOptions(tokenizer=tok))
    store = Store(tmp_path / "rollscope.db")
    store.save_episode(ep)
    store.close()

    with serve(tmp_path / "rollscope.db") as url:
        page.goto(f"{url}/?episode={ep.id}")
        block = page.locator("#rs-episode-findings .rs-finding", has_text="wrong_argument_token")
        block.wait_for(timeout=60_000)
        text = block.inner_text()
        assert "the model gave '3' 0.61, '2' 0.34: the right value was its choice 2 of 2" in text
        assert f"tokens {at}" in text and f"turn {turns[0]}" in text
        assert block.locator(".rs-sev").inner_text() == "info"
        page.locator(f"{TOKENS} .tok").first.wait_for(state="visible", timeout=60_000)
        block.locator(f'a[data-jump="tok-{at}"]').click()
        page.wait_for_function(f"""() => {{
            const t = document.querySelector('{TOKENS} .tok[data-i="{at}"]');
            return !!t && t.classList.contains('tok-flag') && t.textContent === '3'; }}""")
        block.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / "wrong_argument_token.png"))
        page.locator(f'{TOKENS} .tok[data-i="{at}"]').scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / "wrong_argument_token_marked.png"))
        assert not page.errors
