"""What an episode is: the records, where they came from, their token arrays, and how they are read and checked.

``episode`` (Message, ToolCall, Action, Generation, Segment, Turn, Finding, Episode), ``provenance`` (RunConfig,
BackendInfo, Source), ``token_arrays``, ``reading`` (strict reading of record dicts), ``schema`` (the published
JSON Schema), ``upgrade`` (earlier versions brought up to date), ``textsafe`` and ``jsonbounds`` (outside text and
JSON made safe where they enter), ``numbers`` and ``marks`` (the number policy, and the findings it leaves). The lowest layer: it imports ``engine.errors`` and ``engine.presets`` alone.
"""
