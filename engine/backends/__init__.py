"""Who generates the next turn, and the one door to a tokenizer.

``base`` is the seam (``Backend.generate(request) -> Generation``); ``local`` runs a transformers model in-process
(``local_engine`` its worker thread, ``kvcache`` its prefix cache and decoding batch, ``embedded`` where the
shipped SmolLM2 lives); ``sglang`` and ``openai`` are HTTP clients over ``http``; ``scripted`` plays a reference
policy. ``tokenizers`` loads a tokenizer by spec, once per process. Imports the records and tokens; never an env
(``tests/test_layers.py``).
"""
