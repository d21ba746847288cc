"""Questions asked of stored episodes: two compared, token diffs, GRPO groups, one episode at one turn.

``compare`` (where two episodes first diverge), ``tokendiff`` (two token arrays aligned on their replies),
``groups`` (one task's samples, advantages and spread), ``entropy`` (each turn's mean entropy and its
highest-entropy tokens, with their top K alternatives), ``steps`` (where a run's data changed from one
rollout step to the next), ``replays`` (many re-executions grouped by cause), ``at_turn`` (where a turn lies in the arrays, the prompt
it was sent, rewards and findings up to it). Imports every layer below, the loop and the store included.
"""
