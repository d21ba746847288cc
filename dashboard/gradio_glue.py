"""What the dashboard relies on beyond Gradio's documented API, in one place, and how events are wired.

- ``event_data``: what a ``js_on_load`` script sent with ``trigger(name, data)``. Gradio hands it to the
  handler on ``gr.EventData._data``, a private attribute; it is read here and nowhere else.
- ``fresh``: replacing a big ``gr.HTML`` value in one piece, which leans on how Gradio's HTML
  component updates the page (it diffs the old DOM against the new one unless the top tag differs).
- ``Outputs``: an event's output components declared once, by name, so a handler says its values by
  name and the list it returns is always in the order of the list the event was wired with.
- ``html``: a ``gr.HTML`` as every view uses it (no default prose CSS, a script or none).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import gradio as gr


def event_data(evt: gr.EventData) -> dict[str, Any]:
    """The data a ``js_on_load`` script sent with ``trigger(...)`` (``{}`` when it sent none)."""
    data = getattr(evt, "_data", None)
    return data if isinstance(data, dict) else {}


def turn_of(value: Any) -> int | None:
    """A turn number as an event or a query sent it (an int, a whole float, or digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and value >= 0 else None
    text = str(value or "")
    return int(text) if text.isdigit() else None


_renders = itertools.count()


def fresh(html_text: str) -> str:
    """``html_text`` wrapped in an element whose tag name is new at every call.

    Gradio's HTML component updates its content by diffing the old DOM
    against the new one node by node, which for a 32,000-token view costs
    seconds of script. When the top element's tag differs, it replaces the
    subtree in one native operation instead; a never-repeated custom tag
    makes that always so. (Custom elements are inline; ``.rs-fresh`` makes
    them blocks.)
    """
    n = next(_renders)
    return f'<rs-v{n} class="rs-fresh">{html_text}</rs-v{n}>'


def html(value: str = "", elem_id: str | None = None, js: str | None = None, **kw: Any) -> gr.HTML:
    """A ``gr.HTML`` without Gradio's default prose CSS (it restyles ``<pre>``, ``<dl>``, ``<details>``) and
    with no script unless ``js`` (``js_on_load``: see ``dashboard.assets.script``) gives one, so no
    click listener round-trips to the server unless a script asks for it."""
    return gr.HTML(value, elem_id=elem_id, apply_default_css=False, js_on_load=js, **kw)


class Outputs:
    """Components an event updates, each under a name, in one declared order.

    Wire the event with ``outputs=out.components`` and return ``out.values(name=value, ...)``
    from its handler: the values come back in the components' order, ``gr.skip()`` (leave it as
    it is) for every name not given. A name the outputs do not have is a ``KeyError``, so a
    handler cannot drift out of step with the list it was wired with. With one component the
    value comes back alone, not in a list: Gradio takes a single output's return value whole.
    """

    def __init__(self, **components: Any) -> None:
        self._components = dict(components)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._components)

    @property
    def components(self) -> list[Any]:
        """The list to wire an event's ``outputs`` (or ``inputs``) with."""
        return list(self._components.values())

    def __getitem__(self, name: str) -> Any:
        return self._components[name]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._components.values())

    def __len__(self) -> int:
        return len(self._components)

    def __add__(self, other: Outputs) -> Outputs:
        both = set(self._components) & set(other._components)
        if both:
            raise KeyError(f"outputs named twice: {sorted(both)}")
        return Outputs(**self._components, **other._components)

    def values(self, **values: Any) -> Any:
        """The handler's return value: ``values`` in the components' order, ``gr.skip()`` for the rest."""
        unknown = set(values) - set(self._components)
        if unknown:
            raise KeyError(f"no output named {sorted(unknown)}; the outputs are {list(self._components)}")
        out = [values[n] if n in values else gr.skip() for n in self._components]
        return out[0] if len(out) == 1 else out

    def skip(self) -> Any:
        """Leave every output as it is."""
        return self.values()

    def read(self, values: Sequence[Any]) -> dict[str, Any]:
        """Values that arrived for these components as an event's inputs (in their order), by name."""
        if len(values) != len(self._components):
            raise ValueError(f"{len(values)} values for {len(self._components)} components")
        return dict(zip(self._components, values, strict=True))
