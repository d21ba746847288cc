"""Export: write a curated set of episodes in a training format, and download it.

The set is the current Browse selection (its filters, through the same
``EpisodeFilter``), the episodes with given tags, the starred ones, or a
list of ids. Preview shows the count, the first rows and the start of the
first record in the chosen format before anything is written; "Export and
download" writes the file with the engine's exporters and downloads it in the
same click (the file stays offered below until the choice changes).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gradio as gr

from engine import EXPORTERS, ON_IDS, ConfigError, EpisodeFilter, RollscopeError, Store, export, no_ids

from ..assets import script
from ..gradio_glue import Outputs, html
from ..views.export import export_preview
from ..views.html import note

BROWSE, TAGGED, STARRED, IDS = "the Browse selection (its filters)", "episodes with these tags", "starred episodes", \
    "these episode ids"
PREVIEW_ROWS = 10
SAMPLE_CHARS = 1500
EXTENSIONS = {"jsonl": "jsonl", "areal": "jsonl", "messages": "jsonl", "slime": "pt", "parquet": "parquet",
              "verl": "jsonl"}
FORMAT_HELP = {
    "jsonl": "Rollscope's own episode JSONL: lossless, re-importable",
    "parquet": "one row per episode, token arrays as list columns: lossless",
    "slime": "a slime rollout dump (.pt: tokens, loss masks, rewards per sample)",
    "areal": "AReaL packed sequences per turn (JSONL)",
    "messages": "OpenAI chat JSONL with tools and tool calls (for SFT)",
    "verl": "verl's AgentLoopOutput rows (prompt_ids, response_ids, response_mask, logprobs, turn scores): "
            "re-importable",
}
_OUT_DIR: Path | None = None


def _out_dir() -> Path:
    # In the server's private folder (GRADIO_TEMP_DIR, see dashboard.server.private_files) when it has one,
    # else the system temp dir: Gradio serves files from there, and nothing else of the machine's is
    # exposed by a download link. mkdtemp makes it enterable by this user alone.
    global _OUT_DIR
    if _OUT_DIR is None or not _OUT_DIR.exists():
        base = os.environ.get("GRADIO_TEMP_DIR") or None
        if base:
            Path(base).mkdir(parents=True, exist_ok=True)
        _OUT_DIR = Path(tempfile.mkdtemp(prefix="rollscope-export-", dir=base))
    return _OUT_DIR


def selection(source: str, browse_filter: EpisodeFilter | None, tags: Sequence[str] | None,
              ids: str | None) -> tuple[EpisodeFilter, str]:
    """(the store filter, a description of it) for the chosen kind of selection."""
    if source == BROWSE:
        if browse_filter is None:
            raise ConfigError("the Browse filters are not available here; choose another selection")
        return browse_filter, "the Browse filters"
    if source == TAGGED:
        chosen = tuple(t for t in (tags or ()) if t)
        if not chosen:
            raise ConfigError("choose at least one tag")
        return EpisodeFilter(tags=chosen), f"tagged {' and '.join(chosen)}"
    if source == STARRED:
        return EpisodeFilter(starred=True), "starred"
    if source == IDS:
        # Commas or lines separate them; with neither, blanks do (ids pasted from `ls` a space apart).
        text = ids or ""
        parts = text.replace("\n", ",").split(",") if "," in text or "\n" in text else text.split()
        wanted = tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))
        if not wanted:
            raise ConfigError("give one or more episode ids, separated by commas or spaces")
        return EpisodeFilter(ids=wanted), f"{len(wanted)} listed id{'s' if len(wanted) != 1 else ''}"
    raise ConfigError(f"unknown selection {source!r}")


def _resolve_ids(store: Store, flt: EpisodeFilter) -> EpisodeFilter:
    """Listed ids may be unique prefixes, as everywhere else."""
    if not flt.ids:
        return flt
    return EpisodeFilter(ids=tuple(store.resolve_id(i) for i in flt.ids))


def sample(store: Store, flt: EpisodeFilter, fmt: str) -> str:
    """The start of the first matching episode written in ``fmt`` (a note for binary formats)."""
    first = store.list_episodes(flt, order_by="created_at", descending=False, limit=1)
    if not first:
        return ""
    ep = store.get_episode(first[0].id)
    with tempfile.TemporaryDirectory(prefix="rollscope-preview-") as tmp:
        path = Path(tmp) / f"first.{EXTENSIONS.get(fmt, 'out')}"
        export([ep], fmt, path)
        size = path.stat().st_size
        if EXTENSIONS.get(fmt) != "jsonl":
            return f"({fmt} is a binary format: the first episode alone takes {size:,} bytes)"
        text = path.read_text(encoding="utf-8", errors="replace")
    cut = f"\n… ({len(text) - SAMPLE_CHARS:,} more characters)" if len(text) > SAMPLE_CHARS else ""
    return text[:SAMPLE_CHARS] + cut


def write(store: Store, flt: EpisodeFilter, fmt: str) -> tuple[Path, int, list[str]]:
    """Write every matching episode in ``fmt`` to a new file; (path, count, what the export says it left out)."""
    n = store.count(flt)
    if n == 0:
        raise ConfigError("no episodes match: nothing to export")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = _out_dir() / f"rollscope-{n}-episodes-{stamp}.{EXTENSIONS.get(fmt, 'out')}"
    notes: list[str] = []
    written = export(store.iter_episodes(flt), fmt, path, notes)
    if written and written != n:  # named by what it holds (the format left some out, and says so)
        path = path.rename(path.with_name(f"rollscope-{written}-episodes-{stamp}.{EXTENSIONS.get(fmt, 'out')}"))
    return path, written, notes


# One click exports and downloads: the link and message before the click are remembered (download_mark.js), and
# the file component's new link is clicked once the export has put it there (download_new.js).
DOWNLOAD = {"ROOT": "#rs-export-file", "KEY": "rsExportBefore", "MESSAGE": "#rs-export-message"}


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    kb = n / 1024
    return f"{kb:,.1f} KB" if kb < 1024 else f"{kb / 1024:,.1f} MB"


@dataclass
class ExportTab:
    source: gr.Radio
    tags: gr.Dropdown
    ids: gr.Textbox
    fmt: gr.Dropdown
    preview: gr.Button
    export: gr.Button
    view: gr.HTML
    message: gr.HTML
    download: gr.File  # the file last written; hidden as soon as the choice changes


def build(store: Store, browse_filters: Outputs | None = None,
          episode_filter: Callable[..., EpisodeFilter] | None = None) -> ExportTab:
    """Lay out the Export tab in the current Blocks context.

    ``browse_filters`` are the Browse tab's filter controls, named as
    ``episode_filter``'s arguments, which turns their values into an
    ``EpisodeFilter``; without them the Browse selection is not offered.
    """
    has_browse = bool(browse_filters) and episode_filter is not None
    sources = ([BROWSE] if has_browse else []) + [TAGGED, STARRED, IDS]
    names = sorted(EXPORTERS)
    with gr.Row(equal_height=True):
        source = gr.Radio(sources, value=sources[0], label="export", scale=3, elem_id="rs-export-source")
        fmt = gr.Dropdown(names, value="jsonl", label="format", min_width=140, scale=1, elem_id="rs-export-format",
                          info=FORMAT_HELP["jsonl"])
    with gr.Row(equal_height=True):
        tags = gr.Dropdown([], value=[], multiselect=True, label="tags (all of them)", visible=False, scale=2,
                           elem_id="rs-export-tags")
        ids = gr.Textbox(label="episode ids", placeholder="id1, id2 … or one a line (unique prefixes are enough)", visible=False,
                         scale=3, elem_id="rs-export-ids", max_lines=3)
    with gr.Row(elem_classes="rs-actions"):
        export = gr.Button("⬇ Export and download", variant="primary", scale=0, min_width=220, elem_id="rs-export-run")
        preview = gr.Button("Preview", scale=0, min_width=120, elem_id="rs-export-preview")
    message = html("", "rs-export-message")
    download = gr.File(label="exported", visible=False, interactive=False, elem_id="rs-export-file")
    view = html(note("Choose what to export and press Preview: you see the count and the first records before "
                     "anything is written."), "rs-export-view", script("open_episode"))
    tab = ExportTab(source, tags, ids, fmt, preview, export, view, message, download)

    def on_source(src: str) -> list[Any]:
        tag_choices = [t for t, _ in store.tag_counts()] if src == TAGGED else gr.skip()
        return [gr.Dropdown(visible=src == TAGGED, choices=tag_choices) if src == TAGGED else gr.Dropdown(visible=False),
                gr.Textbox(visible=src == IDS)]

    source.change(on_source, inputs=[source], outputs=[tags, ids])
    fmt.change(lambda f: gr.Dropdown(info=FORMAT_HELP.get(f, "")), inputs=[fmt], outputs=[fmt])
    # A file written for another choice is not offered for this one.
    for control in (source.input, fmt.input, tags.input, ids.input):
        control(lambda: [gr.File(value=None, visible=False), ""], outputs=[download, message])

    def chosen(values: Sequence[Any]) -> tuple[EpisodeFilter, str, str]:
        src, fmt_v, tags_v, ids_v, *browse_v = values
        browse_flt = (episode_filter(**browse_filters.read(browse_v))
                      if has_browse and browse_filters is not None and episode_filter is not None else None)
        flt, what = selection(src, browse_flt, tags_v, ids_v)
        return _resolve_ids(store, flt), what, str(fmt_v)

    inputs = [source, fmt, tags, ids, *(browse_filters or ())]

    previewed = Outputs(view=view, message=message, download=download)

    def on_preview(*values: Any) -> list[Any]:
        try:
            flt, what, fmt_v = chosen(values)
            n = store.count(flt)
            # A format of token ids leaves out what holds none: counted here as the export will leave them out.
            idless = n - store.count(replace(flt, has_tokens=True)) if n and fmt_v in ON_IDS else 0
            rows = store.list_episodes(flt, order_by="created_at", descending=False, limit=PREVIEW_ROWS)
            text = sample(store, replace(flt, has_tokens=True) if idless else flt, fmt_v) if n > idless else ""
        except RollscopeError as e:
            return previewed.values(message=note(str(e), "error"), download=gr.File(visible=False))
        kept = n - idless
        msg = (note(f"{kept:,} episode{'s' if kept != 1 else ''} will be written as {fmt_v}: press Export and "
                    "download.", "info") if kept else
               note(f"Nothing would be written as {fmt_v}." if n else "Nothing matches: nothing to export.", "warn"))
        msg += note(no_ids(fmt_v, idless), "warn") if idless else ""
        return previewed.values(view=export_preview(n, rows, text, what, fmt_v), message=msg,
                                download=gr.File(value=None, visible=False))

    preview.click(on_preview, inputs=inputs, outputs=previewed.components)
    exported = Outputs(message=message, download=download)

    def on_export(*values: Any) -> list[Any]:
        try:
            flt, what, fmt_v = chosen(values)
            path, n, said = write(store, flt, fmt_v)
        except RollscopeError as e:
            kind = "warn" if isinstance(e, ConfigError) else "error"
            return exported.values(message=note(str(e), kind), download=gr.File(value=None, visible=False))
        if not n:  # the format could carry none of them: no empty file to download
            path.unlink(missing_ok=True)
            return exported.values(message=note(f"Nothing written ({what}) as {fmt_v}.", "warn")
                                   + "".join(note(x, "warn") for x in said), download=gr.File(value=None, visible=False))
        size = path.stat().st_size
        return exported.values(
            message=note(f"Wrote {n:,} episode{'s' if n != 1 else ''} ({what}) as {fmt_v}: {path.name}, "
                         f"{_size(size)}: downloading (the link below downloads it again).", "ok")
            + "".join(note(x, "warn") for x in said),
            download=gr.File(value=str(path), visible=True))

    export.click(None, js=script("download_mark", **DOWNLOAD)).then(
        on_export, inputs=inputs, outputs=exported.components).then(None, js=script("download_new", **DOWNLOAD))
    return tab
