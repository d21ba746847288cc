"""Rollscope's exception tree, documented in one place.

Every error a user can cause (a bad flag, a missing model, a malformed file)
is a ``RollscopeError`` whose message says what to do; the CLI prints it as
one line and exits non-zero. Anything else escaping the engine is a bug and
is allowed to show its traceback.

    RollscopeError
    ├── ConfigError          bad flags, unknown env / preset / policy, bad task range
    ├── ModelNotFound        a model folder or id that cannot be loaded
    ├── TokenizerNotFound    a tokenizer folder or id that cannot be loaded
    ├── TemplateError        a chat template that cannot render what the loop needs
    ├── BackendError         a backend that failed to answer (ends the episode as aborted)
    ├── EnvError             an env that raised while stepping (ends the episode as aborted)
    ├── StoreError           an unreadable or incompatible database
    └── FormatError          a file that is not in the format it claims
"""

from __future__ import annotations


class RollscopeError(Exception):
    """Base of every error with a user-facing message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(RollscopeError):
    pass


class ModelNotFound(RollscopeError):
    pass


class TokenizerNotFound(RollscopeError):
    pass


class TemplateError(RollscopeError):
    pass


class BackendError(RollscopeError):
    """A backend could not answer; the loop ends the episode ``aborted`` with a finding of kind ``kind``."""

    kind = "backend_error"


class InvalidAnswer(BackendError):
    """A server answered, but outside its contract: token ids past the vocabulary, more tokens than asked for."""

    kind = "server_answer_invalid"


class EnvError(RollscopeError):
    pass


class StoreError(RollscopeError):
    pass


class FormatError(RollscopeError):
    """A malformed record; ``where`` names the file and line, ``field`` the key."""

    def __init__(self, message: str, where: str = "", field: str = "") -> None:
        self.where = where
        self.field = field
        self.detail = message
        full = message
        if field:
            full = f"field '{field}': {full}"
        if where:
            full = f"{where}: {full}"
        super().__init__(full)

    def at(self, where: str) -> FormatError:
        """The same error, said of ``where`` (a file and line)."""
        return FormatError(self.detail, where, self.field)
