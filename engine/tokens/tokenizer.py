"""What the engine needs of a tokenizer: the ``Tokenizer`` protocol.

A Hugging Face ``PreTrainedTokenizerBase`` (what ``engine.backends.tokenizers`` loads) is one. The engine encodes
and decodes text, renders conversations with the chat template, and reads the special tokens it knows by name; a
tokenizer of one's own needs no more than these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Tokenizer(Protocol):
    chat_template: Any
    eos_token_id: Any

    def __call__(self, text: Any, *args: Any, **kwargs: Any) -> Any: ...

    def __len__(self) -> int: ...

    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any: ...

    def decode(self, ids: Any, *args: Any, **kwargs: Any) -> Any: ...

    def batch_decode(self, sequences: Sequence[Any], *args: Any, **kwargs: Any) -> Any: ...

    def convert_tokens_to_ids(self, tokens: Any) -> Any: ...

    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any: ...
