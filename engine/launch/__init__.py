"""What both front ends start: run plans and their rules, batches, policies by name, the demo.

``plan`` (default preset, sampling bounds, tokenizer, user; ``plan_run``, ``plan_step``, ``plan_fork``),
``batch`` (tasks x samples with bounded concurrency, written as they finish), ``policies`` (the backend a
``--policy`` names), ``demo`` (the tagged demo database). Imports every layer below; the CLI and the dashboard
sit above it.
"""
