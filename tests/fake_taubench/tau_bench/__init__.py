"""A small stand-in for Sierra's tau-bench, with the same interface, for tests.

It mirrors the parts Rollscope's adapter touches: ``envs.get_env``, an Env
with ``reset(task_index)``, ``step(Action)``, ``tools_info``, ``wiki``,
``tasks`` (each with ``instruction``, ``actions``, ``outputs``) and a
``user`` object, and ``types.Action`` / ``RESPOND_ACTION_NAME``. The reward
follows tau-bench: the final data must hash equal to the data after replaying
the task's actions, and every output must appear in a reply.
"""
