"""Form controls shared by Launch and Step: which policy answers and how it samples, and the loop's knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine import (
    MAX_TOP_LOGPROBS,
    POLICIES,
    PRESET_INFO,
    BackendSettings,
    ConfigError,
    LoopConfig,
    RollscopeError,
    apply_settings,
)

from .gradio_glue import Outputs, html
from .views.html import note
from .views.settings import describe_loop, knob_table

POLICY_HELP = {
    "scripted": "plays the env's reference answers, with a share of seeded mistakes (no model needed)",
    "local": "a transformers model on this machine's CPU (default: the embedded SmolLM2-135M)",
    "sglang": "an SGLang server's /generate (token ids in and out)",
    "openai": "an OpenAI-compatible server (vLLM, SGLang, ...): completions or chat completions",
}


@dataclass
class BackendControls:
    """The policy form; ``inputs`` is in ``BackendSettings.parse``'s argument order."""

    policy: gr.Dropdown
    model: gr.Textbox
    url: gr.Textbox
    api_mode: gr.Dropdown
    tokenizer: gr.Textbox
    temperature: gr.Number
    top_p: gr.Number
    max_new_tokens: gr.Number
    mistake_rate: gr.Number
    seed: gr.Number
    timeout: gr.Number
    retries: gr.Number
    top_logprobs: gr.Number
    help: gr.Markdown

    @property
    def inputs(self) -> list[Any]:
        return [self.policy, self.model, self.url, self.api_mode, self.tokenizer, self.temperature, self.top_p,
                self.max_new_tokens, self.mistake_rate, self.seed, self.timeout, self.retries, self.top_logprobs]


def parse(*values: Any) -> BackendSettings:
    """``BackendSettings`` from ``BackendControls.inputs`` values."""
    return BackendSettings.parse(*values)


def _visibility(policy: str) -> dict[str, Any]:
    """Which policy fields ``policy`` uses (the others hide), and its help line."""
    http = policy in ("sglang", "openai")
    return {
        "model": gr.Textbox(visible=policy != "scripted"),
        "url": gr.Textbox(visible=http),
        "api_mode": gr.Dropdown(visible=policy == "openai"),
        "mistake_rate": gr.Number(visible=policy == "scripted"),
        "timeout": gr.Number(visible=http),
        "retries": gr.Number(visible=http),
        "top_logprobs": gr.Number(visible=policy != "scripted"),
        "help": gr.Markdown(POLICY_HELP.get(policy, "")),
    }


def backend_controls(prefix: str, policy: str = "scripted", mistake_rate: float = 0.2) -> BackendControls:
    """Lay out the policy form in the current Blocks context; ``prefix`` keeps element ids unique per tab."""
    with gr.Row(equal_height=True):
        pol = gr.Dropdown(list(POLICIES), value=policy, label="policy", min_width=120, scale=1,
                          elem_id=f"{prefix}-policy")
        model = gr.Textbox(label="model", placeholder="local: folder or cached hub id (blank: SmolLM2); "
                           "openai: served model name", scale=2, min_width=180, visible=policy != "scripted",
                           elem_id=f"{prefix}-model", max_lines=1)
        url = gr.Textbox(label="server URL", placeholder="http://127.0.0.1:30000", scale=2, min_width=180,
                         visible=policy in ("sglang", "openai"), elem_id=f"{prefix}-url", max_lines=1)
        api = gr.Dropdown(["completions", "chat"], value="completions", label="API", min_width=120, scale=1,
                          visible=policy == "openai", elem_id=f"{prefix}-api")
        tok = gr.Textbox(label="tokenizer", placeholder="blank: the model's own, else SmolLM2", scale=2,
                         min_width=160, elem_id=f"{prefix}-tokenizer", max_lines=1)
    with gr.Row(equal_height=True):
        temperature = gr.Number(1.0, label="temperature", step=0.1, min_width=100,
                                elem_id=f"{prefix}-temperature")
        top_p = gr.Number(1.0, label="top_p", step=0.05, min_width=90, elem_id=f"{prefix}-top-p")
        max_new = gr.Number(256, label="max new tokens", precision=0, min_width=110,
                            elem_id=f"{prefix}-max-new-tokens")
        mistakes = gr.Number(mistake_rate, label="mistake rate (scripted)", step=0.05,
                             min_width=130, visible=policy == "scripted", elem_id=f"{prefix}-mistake-rate")
        seed = gr.Number(0, label="seed", precision=0, min_width=90, elem_id=f"{prefix}-seed")
        http = policy in ("sglang", "openai")
        timeout = gr.Number(60, label="timeout per turn (s)", minimum=0.1, min_width=110, visible=http,
                            elem_id=f"{prefix}-timeout", info="the whole answer and every retry included")
        retries = gr.Number(3, label="retries", precision=0, minimum=0, min_width=90, visible=http,
                            elem_id=f"{prefix}-retries")
        top_k = gr.Number(0, label="top logprobs (K)", precision=0, minimum=0, maximum=MAX_TOP_LOGPROBS,
                          min_width=110, visible=policy != "scripted", elem_id=f"{prefix}-top-logprobs",
                          info="record each token's K likeliest and the entropy")
    help_md = gr.Markdown(POLICY_HELP.get(policy, ""), elem_classes="rs-help")
    controls = BackendControls(pol, model, url, api, tok, temperature, top_p, max_new, mistakes, seed, timeout,
                               retries, top_k, help_md)
    shown = Outputs(model=model, url=url, api_mode=api, mistake_rate=mistakes, timeout=timeout, retries=retries,
                    top_logprobs=top_k, help=help_md)
    pol.change(lambda p: shown.values(**_visibility(p)), inputs=[pol], outputs=shown.components)
    return controls


SETTINGS_PLACEHOLDER = "one knob a line, e.g.\nmax_turns = 8\nturn_discount = 0.9\ntool_instruction = none"


@dataclass
class LoopControls:
    """The loop-settings box: knob changes a person writes, and the table of every knob they lead to."""

    settings: gr.Textbox
    table: gr.HTML
    box: gr.Accordion


def loop_controls(prefix: str, env: str, preset: str) -> LoopControls:
    """Lay out the loop-settings box (folded) in the current Blocks context. The table shows the preset's
    knobs with the changes applied; the caller wires ``refresh`` to the inputs it depends on."""
    with gr.Accordion("Loop settings: the preset's knobs (change any of them)", open=False,
                      elem_id=f"{prefix}-loop-box") as box:
        with gr.Row(equal_height=False):
            settings = gr.Textbox(label="changes to the preset (knob = value; text with spaces or newlines as a "
                                  "JSON string)", placeholder=SETTINGS_PLACEHOLDER, lines=5, max_lines=20,
                                  scale=1, min_width=260, elem_id=f"{prefix}-settings")
            table = html(loop_table(preset, env, ""), f"{prefix}-knobs", scale=2, min_width=420)
    return LoopControls(settings, table, box)


def loop_table(preset: Any, env: Any, settings: Any) -> str:
    """The knob table for a preset (``auto``: the env's usual one) with ``settings`` applied."""
    view = describe_loop(preset, env, settings)
    info = PRESET_INFO.get(view.preset or "")
    about = f"{info.name} reproduces {info.reproduces}: {info.summary}." if info else ""
    return knob_table(view.base, view.label, view.effective, view.error, about)


def fork_table(store: Any, parent_id: Any, settings: Any) -> str:
    """The knob table for a fork: the parent episode's loop config with ``settings`` applied."""
    eid = str(parent_id or "").strip()
    if not eid:
        return note("Give the episode to fork: its loop config is the base the changes apply to.")
    try:
        parent = store.get_episode(store.resolve_id(eid))
        base = parent.config.loop or LoopConfig()
    except RollscopeError as e:
        return note(str(e), "error")
    label = f"episode {parent.id[:12]}'s config (preset {parent.preset})"
    try:
        return knob_table(base, label, apply_settings(base, str(settings or "")))
    except ConfigError as e:
        return knob_table(base, label, None, str(e))
