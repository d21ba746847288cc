"""The dashboard's files in ``assets/``: its stylesheets and the scripts that run in the browser.

They are read from the installed package ``rollscope_assets`` (``assets/`` itself in a checkout), each once
per process. Scripts are for ``gr.HTML(js_on_load=...)`` (statements run on
the component's element) or an event's ``js=`` (a function of the event's inputs); no script lives
in a Python string.
"""

from __future__ import annotations

import functools
import json
import re
from importlib.resources import files

ASSETS = files("rollscope_assets")
_OPENING_COMMENT = re.compile(r"\A(?:[ \t]*//[^\n]*\n)+")


@functools.cache
def _read(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


@functools.cache
def _script(name: str) -> str:
    # A file's opening comment is for whoever reads the file; the browser gets the code.
    return _OPENING_COMMENT.sub("", _read(f"{name}.js"), count=1)


def script(*names: str, **values: str) -> str:
    """The scripts ``assets/<name>.js``, in order, as one; a missing file raises ``OSError``.

    ``values`` fill in the script's named constants: each whole-word ``NAME`` in the code becomes
    the value as a JavaScript string (so a label the Python side chooses is said once).
    """
    code = "\n".join(_script(n) for n in names)
    for name, value in values.items():
        code = re.sub(rf"\b{re.escape(name)}\b", lambda _m, v=value: json.dumps(v), code)
    return code


def stylesheet(name: str) -> str:
    """``assets/<name>.css`` as a ``<style>`` element; empty when the file cannot be read (unstyled beats
    not starting)."""
    try:
        return f"<style>{_read(f'{name}.css')}</style>"
    except OSError:
        return ""
