"""Text from outside (a model, a server, an env, a file, a person) made safe to store, once, where it enters.

A JSON string may hold ``\\ud800``: a lone UTF-16 surrogate that Python
keeps in a ``str`` but that UTF-8 (SQLite, files, the browser) cannot
encode. Such characters become U+FFFD, and the caller records where.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


def clean(text: str) -> tuple[str, int]:
    """(``text`` with lone surrogates replaced by U+FFFD, how many were replaced)."""
    try:
        text.encode("utf-8")
        return text, 0
    except UnicodeEncodeError:
        # Paired surrogates (a character outside the BMP split in two) join again; lone ones are replaced.
        out = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return out, out.count(REPLACEMENT) - text.count(REPLACEMENT)


def clean_text(text: str) -> str:
    return clean(text)[0]
