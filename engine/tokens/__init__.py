"""How a conversation becomes token ids: chat templates, tool-call parsers, token modes.

``chat`` (rendering, text and token deltas), ``toolcalls`` (the parsers), ``modes`` (one strategy per token mode:
what the backend is sent, which tokens each message adds), ``tokenizer`` (the ``Tokenizer`` protocol: what the
engine needs of one). Imports the records and the layers below them; loads no tokenizer (``engine.backends``
does).
"""
