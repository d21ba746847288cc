"""Every field of the episode record says what it holds: the text the published schema is built from."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"
RECORDS = (ENGINE / "records" / "conversation.py", ENGINE / "records" / "episode.py", ENGINE / "records" / "generation.py", ENGINE / "records" / "token_arrays.py",
           ENGINE / "records" / "provenance.py")


def field_docs() -> dict[str, dict[str, str | None]]:
    """class -> field -> the string right after the field's annotation (None when there is none)."""
    out: dict[str, dict[str, str | None]] = {}
    body = [n for path in RECORDS for n in ast.parse(path.read_text(encoding="utf-8")).body]
    for node in body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, str | None] = {}
        body = node.body
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                nxt = body[i + 1] if i + 1 < len(body) else None
                doc = (nxt.value.value if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                       and isinstance(nxt.value.value, str) else None)
                fields[stmt.target.id] = doc
        if fields:
            out[node.name] = fields
    return out


def test_every_record_field_has_a_docstring():
    docs = field_docs()
    assert {"Episode", "Turn", "Generation", "Message", "ToolCall", "Action", "Segment", "Finding",
            "TokenArrays", "RunConfig", "SamplingParams", "EnvInfo", "BackendInfo", "Source"} <= set(docs)
    missing = [f"{c}.{f}" for c, fs in docs.items() for f, d in fs.items() if not d or not d.strip()]
    assert not missing, f"fields without a docstring: {missing}"


def test_the_docstrings_are_read_from_the_source_as_written():
    docs = field_docs()
    assert docs["Finding"]["caused_by"] == "The id of the finding this one follows from; None for a root."
    assert len(docs["Episode"]) >= 30


def test_the_readme_names_the_record_schema_version_the_code_writes():
    import re

    from engine.records.episode import SCHEMA_VERSION

    readme = (ENGINE.parent / "README.md").read_text(encoding="utf-8")
    said = re.findall(r"`schema_version` (\d+)", readme)
    assert said and {int(v) for v in said} == {SCHEMA_VERSION}, said
