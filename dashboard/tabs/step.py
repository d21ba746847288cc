"""Step: drive one conversation by hand, fresh or forked from a stored episode.

Generate asks the backend for the next assistant turn and shows it (raw
text, what it parses to, its tokens) without committing anything; while
it runs, the tokens so far (from the local model, which streams them),
and Cancel stops it, leaving the partial reply to edit. The
text can be edited or written from scratch; Commit executes it in the env
and shows the observation, reward and done. Where the env has a user
(retail, tau-bench), the env's simulated user, a model or the person plays
it (a fork may first replay the recorded user). Save stores
the conversation (checks run) with its parent and fork turn.

The conversation lives on the server (``dashboard.background.stepping``); the page
holds its key.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import AUTO, ENVS, PRESET_CHOICES, Generation, RollscopeError, UserSettings, env_factory

from ..assets import script
from ..background.stepping import GENERATE_TIMEOUT_S, Sessions, StepSession
from ..controls import BackendControls, LoopControls, backend_controls, fork_table, loop_controls, loop_table
from ..controls import parse as parse_backend
from ..views import step as rs
from ..views.tokens import decode_token_texts, special_token_ids

NEW, FORK = "new conversation", "fork a stored episode"
PROGRESS_EVERY_S = 0.3
USER_CHOICES = [("the env's simulated user", "scripted"), ("a model plays the user", "llm"),
                ("you play the user", "human"),
                ("forks: the recorded user while the conversation matches, then you", "recorded"),
                ("forks: the recorded user, then the env's simulated user", "recorded>scripted"),
                ("forks: the recorded user, then a model", "recorded>llm")]
USER_HELP = "You play the user: write the user's reply to each message the assistant sends to the user " \
            "(write ###STOP### to end the conversation)."


def _tasks(env: str) -> list[str]:
    try:
        return env_factory(env)().tasks
    except RollscopeError:
        return []


@dataclass
class StepTab:
    """The Step tab's components; ``outputs`` is the order ``_view`` returns values in."""

    mode: gr.Radio
    env: gr.Dropdown
    task: gr.Dropdown
    preset: gr.Dropdown
    loop: LoopControls
    user: gr.Dropdown
    parent_id: gr.Textbox
    fork_turn: gr.Number
    user_url: gr.Textbox
    backend: BackendControls
    start: gr.Button
    header: gr.HTML
    conversation: gr.HTML
    generate: gr.Button
    pending: gr.HTML
    text: gr.Textbox
    parsed: gr.HTML
    user_reply: gr.Textbox
    commit: gr.Button
    save: gr.Button
    compare: gr.Button
    committed: gr.HTML
    message: gr.HTML  # under Generate, Commit and Save: what the last of them did
    start_message: gr.HTML  # under Start: why a start or fork was refused
    key: gr.State
    start_box: gr.Accordion
    sessions: Sessions
    store: Any

    @property
    def start_inputs(self) -> list[Any]:
        return [self.mode, self.env, self.task, self.preset, self.loop.settings, self.user, self.parent_id,
                self.fork_turn, self.user_url, *self.backend.inputs]

    @property
    def outputs(self) -> list[Any]:
        return [self.key, self.header, self.conversation, self.pending, self.text, self.parsed, self.user_reply,
                self.committed, self.message, self.compare, self.generate, self.commit, self.start_box,
                self.start_message]

    def error(self, message: str, at_start: bool = False) -> list[Any]:
        """Values for ``outputs`` that only show ``message``: under Start (``at_start``), else under the turn's
        buttons."""
        out: list[Any] = [gr.skip()] * len(self.outputs)
        out[self.outputs.index(self.start_message if at_start else self.message)] = rs.note(message, "error")
        return out

    def open_fork(self, request: Any, *start_values: Any) -> list[Any]:
        """Start the fork the Episode tab asked for (``{"episode_id", "turn", "at"}``); values for
        ``[mode, parent_id, fork_turn, *outputs]``."""
        if not isinstance(request, dict) or not request.get("episode_id"):
            return [gr.skip()] * (3 + len(self.outputs))
        values = list(start_values)
        values[0], values[6], values[7] = FORK, request["episode_id"], request.get("turn", 0)
        return [FORK, request["episode_id"], request.get("turn", 0), *self._start(*values)]

    # -- handlers -------------------------------------------------------------

    def _start(self, mode: str, env: Any, task: Any, preset: Any, settings: Any, user: Any, parent_id: Any,
               fork_turn: Any, user_url: Any, *backend_values: Any) -> list[Any]:
        try:
            backend = parse_backend(*backend_values)
            who = str(user or "scripted")
            model = UserSettings("llm", url=str(user_url or "").strip() or None) if who.endswith("llm") else None
            if mode == FORK:
                session = self.sessions.start_fork(self.store, parent_id, fork_turn, who, settings, backend, model)
            else:
                session = self.sessions.start_new(env, task, preset, settings, who, backend, model)
        except RollscopeError as e:
            return self.error(str(e), at_start=True)
        seed = session.hand.stepper.sampling.seed
        what = (f"Forked {session.hand.report.parent_id} at turn {session.hand.report.turn}, sampling with seed {seed} "
                "(the fork's own, made from the form's seed and the parent's id: the parent's would sample it again)."
                if session.hand.report else "Started a new conversation.")
        return _view(session, message=rs.note(f"{what} Press Generate for the next assistant turn, or write it "
                                              "yourself.", "info"), reset_text=True, fold_start=True)


def _generation_view(session: StepSession, gen: Generation | None, text: str | None) -> tuple[str, str]:
    """(pending HTML, parsed HTML) for a generation and the text in the edit box."""
    texts = decode_token_texts(session.tokenizer, list(gen.token_ids)) if gen is not None else None
    special = special_token_ids(session.tokenizer) if gen is not None else set()
    return rs.pending(gen, texts, special), _parsed(session, text or "")


def _parsed(session: StepSession, text: str) -> str:
    hand = session.hand
    if not text.strip():
        return '<div class="rs-dim">The text to commit is empty.</div>'
    g = hand.generated
    edited = g is None or text != hand.text_of(g)
    flag = (rs.note("Written or edited by hand: Commit re-encodes this text (no logprobs).", "warn") if edited
            else rs.note("Unchanged: Commit keeps the generated token ids and logprobs.", "ok"))
    return ('<h5 class="rs-h">What Commit does with this text</h5>' + flag
            + rs.preview_block(hand.preview(text), hand.needs_user_reply(text)))


def _view(session: StepSession, *, message: str = "", reset_text: bool = False, fold_start: bool = False) -> list[Any]:
    ep = session.episode()
    hand = session.hand
    header = rs.step_header(ep, backend=session.backend_label, plays_user=hand.plays_user, report=hand.report,
                            saved_id=session.saved_id)
    conv = rs.conversation(ep, session.fork_turn)
    pending = rs.pending(None, None, set()) if reset_text else gr.skip()
    text = "" if reset_text else gr.skip()
    parsed = "" if reset_text else gr.skip()
    reply = gr.Textbox(visible=hand.plays_user, value="", info=USER_HELP if hand.plays_user else None)
    committed = rs.committed(session.last_turn, ep) if session.last_turn is not None else ""
    can_compare = bool(session.saved_id and ep.parent_id)
    live = not hand.done
    # Folding the start form after a start keeps the conversation on a laptop screen.
    start_box = gr.Accordion(open=False) if fold_start else gr.skip()
    return [session.key, header, conv, pending, text, parsed, reply, committed, message,
            gr.Button(interactive=can_compare), gr.Button(interactive=live), gr.Button(interactive=live), start_box, ""]


def build(store: Any, sessions: Sessions | None = None) -> StepTab:
    """Lay out the Step tab in the current Blocks context and wire its events."""
    sessions = sessions or Sessions()
    first_tasks = _tasks("math")
    with gr.Accordion("Start a conversation, or fork a stored episode", open=True,
                      elem_id="rs-step-start-box") as start_box:
        mode = gr.Radio([NEW, FORK], value=NEW, show_label=False, container=False, elem_id="rs-step-mode")
        with gr.Row(equal_height=True, visible=True) as new_row:
            env = gr.Dropdown(list(ENVS), value="math", label="env", min_width=140, elem_id="rs-step-env")
            task = gr.Dropdown(first_tasks, value=first_tasks[0] if first_tasks else None, label="task (id or index)",
                               allow_custom_value=True, min_width=200, scale=2, elem_id="rs-step-task")
            preset = gr.Dropdown(list(PRESET_CHOICES), value=AUTO, label="preset", min_width=130,
                                 elem_id="rs-step-preset")
        with gr.Row(equal_height=True, visible=False) as fork_row:
            parent_id = gr.Textbox(label="episode to fork", placeholder="episode id (a unique prefix is enough)",
                                   scale=3, min_width=200, elem_id="rs-step-parent", max_lines=1)
            fork_turn = gr.Number(0, label="fork at turn (turns before it are replayed)", precision=0,
                                  min_width=200, elem_id="rs-step-fork-turn")
        with gr.Row(equal_height=True):
            user = gr.Dropdown(USER_CHOICES, value="scripted", label="user (envs with a user: retail, tau-bench)",
                               min_width=220, elem_id="rs-step-user")
            user_url = gr.Textbox(label="user model: sglang server URL (empty: the embedded SmolLM2)",
                                  placeholder="http://host:30000", max_lines=1, min_width=220, visible=False,
                                  elem_id="rs-step-user-url")
        loop = loop_controls("rs-step", "math", AUTO)
        backend = backend_controls("rs-step", mistake_rate=0.0)
        start = gr.Button("Start", variant="primary", scale=0, min_width=140, elem_id="rs-step-start")
        start_message = gr.HTML("", elem_id="rs-step-start-message", apply_default_css=False, js_on_load=None)
    header = gr.HTML(rs.note("No conversation yet."), elem_id="rs-step-header", apply_default_css=False,
                     js_on_load=script("open_episode"))
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=420):
            gr.HTML('<h4 class="rs-h">Conversation</h4>', apply_default_css=False, js_on_load=None)
            conversation = gr.HTML("", elem_id="rs-step-conversation", apply_default_css=False, js_on_load=None)
        with gr.Column(scale=1, min_width=420):
            with gr.Row(equal_height=True, elem_classes="rs-viewbar"):
                gr.HTML('<h4 class="rs-h">Next assistant turn</h4>', apply_default_css=False, js_on_load=None)
                generate = gr.Button("Generate", variant="primary", scale=0, min_width=120, elem_id="rs-step-generate")
                cancel = gr.Button("Cancel", variant="stop", scale=0, min_width=100, elem_id="rs-step-cancel")
            pending = gr.HTML(rs.pending(None, None, set()), elem_id="rs-step-pending",
                              apply_default_css=False, js_on_load=None)
            text = gr.Textbox(label="assistant turn to commit (edit it, or write it from scratch)", lines=6,
                              max_lines=20, elem_id="rs-step-text")
            parsed = gr.HTML("", elem_id="rs-step-parsed", apply_default_css=False, js_on_load=None)
            user_reply = gr.Textbox(label="the user's reply (you play the user)", lines=2, max_lines=8, visible=False,
                                    elem_id="rs-step-user-reply")
            with gr.Row(elem_classes="rs-actions"):
                commit = gr.Button("Commit", variant="primary", scale=0, min_width=120, elem_id="rs-step-commit")
                save = gr.Button("Save", scale=0, min_width=100, elem_id="rs-step-save")
                compare = gr.Button("Compare with parent", scale=0, min_width=240, interactive=False,
                                    elem_id="rs-step-compare")
            message = gr.HTML("", elem_id="rs-step-message", apply_default_css=False, js_on_load=None)
            committed = gr.HTML("", elem_id="rs-step-committed", apply_default_css=False, js_on_load=None)
    key = gr.State(None)
    tab = StepTab(mode, env, task, preset, loop, user, parent_id, fork_turn, user_url, backend, start, header,
                  conversation, generate, pending, text, parsed, user_reply, commit, save, compare, committed,
                  message, start_message, key, start_box, sessions, store)

    user.change(lambda u: gr.Textbox(visible=str(u or "").endswith("llm")), inputs=[user], outputs=[user_url])
    mode.change(lambda m: [gr.Row(visible=m == NEW), gr.Row(visible=m == FORK), gr.Button("Fork" if m == FORK else "Start")],
                inputs=[mode], outputs=[new_row, fork_row, start])

    def on_env(env_v: str) -> Any:
        tasks = _tasks(env_v)
        return gr.Dropdown(choices=tasks, value=tasks[0] if tasks else None)

    env.input(on_env, inputs=[env], outputs=[task])

    def on_loop(mode_v: str, env_v: Any, preset_v: Any, parent_v: Any, settings_v: Any) -> str:
        if mode_v == FORK:
            return fork_table(store, parent_v, settings_v)
        return loop_table(preset_v, env_v, settings_v)

    for source in (mode, env, preset, parent_id, loop.settings):
        source.change(on_loop, inputs=[mode, env, preset, parent_id, loop.settings], outputs=[loop.table],
                      show_progress="hidden", queue=False)
    start.click(tab._start, inputs=tab.start_inputs, outputs=tab.outputs)

    def on_generate(key_v: str | None) -> Iterator[list[Any]]:
        try:
            session, run = sessions.start_generate(key_v)
        except RollscopeError as e:
            yield [gr.skip()] * 3 + [rs.note(str(e), "error")]
            return
        # The reply so far, a few times a second, until it is whole or cancelled.
        while True:
            try:
                gen = run.future.result(PROGRESS_EVERY_S)
                break
            except concurrent.futures.TimeoutError:
                if run.elapsed > GENERATE_TIMEOUT_S:
                    run.future.cancel()
                    continue
                yield [rs.generating(run.turn, run.tokens, run.text, run.elapsed, run.first_token_s,
                                    run.prefill),
                       gr.skip(), gr.skip(), gr.skip()]
            except concurrent.futures.CancelledError:
                why = "timed out" if run.elapsed > GENERATE_TIMEOUT_S else "was cancelled"
                kept = (" The partial reply is in the box: edit it and Commit (as text written by hand), or "
                        "Generate again.") if run.text else " Generate again, or write the turn yourself."
                yield [rs.pending(None, None, set()), run.text, _parsed(session, run.text),
                       rs.note(f"The generation of turn {run.turn} {why} after {run.tokens} tokens "
                               f"({run.elapsed:.1f} s).{kept}", "warn")]
                return
            except RollscopeError as e:
                yield [rs.pending(None, None, set()), gr.skip(), gr.skip(), rs.note(str(e), "error")]
                return
        edit = session.hand.text_of(gen)
        pending_html, parsed_html = _generation_view(session, gen, edit)
        first = f" First token after {run.first_token_s:.2f} s." if run.first_token_s is not None else ""
        yield [pending_html, edit, parsed_html, rs.note(f"Generated turn {run.turn} in {run.elapsed:.1f} s.{first} "
                                                        "Nothing is committed yet. Edit the text if you like, then "
                                                        "Commit.", "info")]

    generate.click(on_generate, inputs=[key], outputs=[pending, text, parsed, message])

    def on_cancel(key_v: str | None) -> Any:
        run = sessions.cancel(key_v)
        return gr.skip() if run is not None else rs.note("Nothing is generating.", "info")

    cancel.click(on_cancel, inputs=[key], outputs=[message], queue=False)

    def on_edit(key_v: str | None, text_v: str) -> Any:
        try:
            session = sessions.get(key_v)
        except RollscopeError:
            return gr.skip()
        return _parsed(session, text_v or "")

    # change, not input: it also fires when the text is set by Generate or pasted in by a script.
    text.change(on_edit, inputs=[key, text], outputs=[parsed], trigger_mode="always_last", show_progress="hidden")

    def on_commit(key_v: str | None, text_v: str, reply_v: str) -> list[Any]:
        try:
            session, turn = sessions.commit(key_v, text_v, reply_v)
        except RollscopeError as e:
            return tab.error(str(e))
        ep = session.episode()
        msg = (f"Committed turn {turn.index}: reward {rs.fmt_num(turn.reward)}, done {'yes' if turn.done else 'no'}."
               + (f" The episode ended ({ep.status.value}: {ep.reason}); Save keeps it." if ep.reason else ""))
        return _view(session, message=rs.note(msg, "ok"), reset_text=True)

    commit.click(on_commit, inputs=[key, text, user_reply], outputs=tab.outputs)

    def on_save(key_v: str | None) -> list[Any]:
        try:
            session, ep = sessions.save(key_v, store)
        except RollscopeError as e:
            return tab.error(str(e))
        parent = f" (fork of {ep.parent_id} at turn {ep.fork_turn})" if ep.parent_id else ""
        n = len(ep.all_findings())
        return _view(session, message=rs.note(
            f"Saved as {ep.id}{parent}: {ep.status.value}, {ep.n_turns} turns, {n} finding{'s' if n != 1 else ''}. "
            "It is in Browse now.", "ok"))

    save.click(on_save, inputs=[key], outputs=tab.outputs)
    return tab


def compare_request(key_v: str | None, sessions: Sessions) -> Any:
    """``{"a": parent, "b": fork, "at"}`` for the Compare tab, from the saved fork of a session."""
    try:
        session = sessions.get(key_v)
    except RollscopeError:
        return gr.skip()
    ep = session.episode()
    if not (session.saved_id and ep.parent_id):
        return gr.skip()
    return {"a": ep.parent_id, "b": session.saved_id, "at": time.time()}
