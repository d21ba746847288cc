"""``rollscope schema``: the episode record's JSON Schema, and a JSONL file checked against it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..records import jsonbounds


def register(sub: Any) -> None:
    sc = sub.add_parser("schema", help="print the JSON Schema (draft 2020-12) of a JSONL episode record")
    sc.add_argument("--validate", metavar="FILE", help="check a JSONL file against it instead: each line that "
                    "does not conform, with the field")
    sc.set_defaults(handler=cmd_schema)


def cmd_schema(a: argparse.Namespace) -> int:
    from ..checks.diagnosis import upgrade_record
    from ..formats.sniff import other_format, start_of_text
    from ..records.episode import READABLE_VERSIONS, SCHEMA_VERSION
    from ..records.schema import episode_schema, problems, warnings

    if not a.validate:
        print(json.dumps(episode_schema(), indent=2, ensure_ascii=False))
        return 0
    path = Path(a.validate)
    if not path.is_file():
        raise ConfigError(f"{path} is not a file")
    with path.open("rb") as f:
        start_of_text(f, path)  # a file import refuses whole (binary, UTF-16, a CSV, one JSON document) is refused so
    n = bad = upgraded = warned = 0
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark is not part of the first record
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text (byte {e.start}): a JSONL file is UTF-8, one record a line") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        n += 1
        try:
            record = jsonbounds.loads(line, limit=None)
        except ValueError as e:
            bad += 1
            print(f"{path}:{lineno}: not valid JSON ({jsonbounds.describe(e)})")
            continue
        if n == 1 and not (isinstance(record, dict) and "schema_version" in record) \
                and (other := other_format(record, "jsonl")):  # another format's file: said once, not a line each
            raise ConfigError(f"{path}: {other.replace('not jsonl records', 'not Rollscope episode records', 1)}; "
                              "--validate checks Rollscope's own records (export --format jsonl)")
        if isinstance(record, dict) and record.get("schema_version") in READABLE_VERSIONS \
                and record["schema_version"] < SCHEMA_VERSION:
            record = upgrade_record(record)  # an earlier version is judged as it reads today
            upgraded += 1
        found = problems(record) if isinstance(record, dict) else ["(record): not a JSON object"]
        if found:
            bad += 1
            for p in found:
                print(f"{path}:{lineno}: {p}")
        elif isinstance(record, dict):
            said = warnings(record)
            warned += bool(said)
            for w in said[:5]:
                print(f"{path}:{lineno}: warning: {w}")
    print(f"{n - bad} of {n} records conform to the episode schema"
          + (f" ({upgraded} of an earlier version, checked as upgraded)" if upgraded else "")
          + (f"; {warned} with logprobs that are not finite numbers (imported as unknown)" if warned else ""))
    return 1 if bad else 0
