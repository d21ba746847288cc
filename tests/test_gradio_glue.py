"""The dashboard's glue to Gradio: outputs declared once by name, a script's event data, the asset loader."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pytest

from dashboard.assets import script, stylesheet
from dashboard.gradio_glue import Outputs, event_data, fresh


def test_values_come_back_in_the_wired_order_and_the_rest_is_left_alone() -> None:
    out = Outputs(table="T", info="I", page="P")
    assert out.components == ["T", "I", "P"] and out.names == ("table", "info", "page") and len(out) == 3
    assert out.values(page=3, table="<table>") == ["<table>", gr.skip(), 3]
    assert out.skip() == [gr.skip()] * 3
    with pytest.raises(KeyError, match="no output named"):
        out.values(tabel="typo")


def test_outputs_add_up_without_naming_a_component_twice() -> None:
    both = Outputs(tabs="tabs") + Outputs(a="A", b="B")
    assert both.components == ["tabs", "A", "B"] and both["a"] == "A"
    assert both.values(b=1) == [gr.skip(), gr.skip(), 1]
    with pytest.raises(KeyError, match="named twice"):
        both + Outputs(a="again")


def test_one_output_takes_its_value_whole() -> None:
    # Gradio sets a single output to whatever the handler returns: a list would become the value.
    one = Outputs(request="state")
    assert one.values(request={"id": "x"}) == {"id": "x"} and one.skip() == gr.skip()


def test_inputs_read_back_by_name() -> None:
    filters = Outputs(text="t", env="e")
    assert filters.read(["zebra", "math"]) == {"text": "zebra", "env": "math"}
    with pytest.raises(ValueError):
        filters.read(["only one"])


def test_event_data_is_what_the_script_sent_or_nothing() -> None:
    assert event_data(SimpleNamespace(_data={"open": "ep1"})) == {"open": "ep1"}  # type: ignore[arg-type]
    assert event_data(SimpleNamespace(_data=None)) == {}  # type: ignore[arg-type]
    assert event_data(SimpleNamespace()) == {}  # type: ignore[arg-type]


def test_fresh_wraps_in_a_tag_never_used_before() -> None:
    a, b = fresh("<p>x</p>"), fresh("<p>x</p>")
    assert a != b and a.startswith("<rs-v") and a.endswith(">") and "<p>x</p>" in a


def test_assets_say_what_is_missing() -> None:
    opened = script("open_episode")
    assert opened.startswith("const openGroup") and "element.addEventListener" in opened  # its opening comment left out
    with pytest.raises(OSError):
        script("no_such_script")
    assert stylesheet("dashboard").startswith("<style>") and stylesheet("no_such_sheet") == ""


def test_a_turn_reads_alike_from_an_event_and_a_query():
    from dashboard.gradio_glue import turn_of

    assert [turn_of(v) for v in (3, 3.0, "3", 0, "")] == [3, 3, 3, 0, None]
    assert [turn_of(v) for v in (2.5, -1, "-1", "x", True, None)] == [None] * 6
