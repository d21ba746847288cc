"""One episode driven: the stepper, the turn core, rewards, who plays the user, fork and replay.

``stepper`` (``Stepper``, ``run_episode``), ``turn`` (parse a reply, actions, env step, compare a replayed turn:
shared by the loop, replay and fork), ``rewards``, ``users``, ``fork`` (a stored episode continued at a turn;
stepping by hand), ``replay`` (re-execution against the env, with the user replayed from the record where
needed, on to the end), ``outputdiff`` (a differing output as paths). Imports the records, tokens, backends, envs and checks; not the store.
"""
