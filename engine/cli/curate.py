"""``rollscope tag``, ``star`` and ``note``: curating episodes by id or by ``--where``, several at once."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ConfigError, StoreError
from ..store.filter import EpisodeFilter
from .common import DEFAULT_DB, counted, open_store, where


def _selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("ids", nargs="*", metavar="ID", help="episodes (an id prefix is enough); or use --where")
    p.add_argument("--where", action="append", default=[], help="every episode matching, like `ls`: status=aborted")
    p.add_argument("--db", default=DEFAULT_DB)


def register(sub: Any) -> None:
    t = sub.add_parser("tag", help="add or remove tags on episodes (by id or --where)")
    _selection(t)
    t.add_argument("--add", action="append", default=[], metavar="TAG", help="a tag to add (repeatable)")
    t.add_argument("--remove", action="append", default=[], metavar="TAG", help="a tag to remove (repeatable)")
    t.set_defaults(handler=cmd_tag)
    s = sub.add_parser("star", help="star episodes (by id or --where); --off unstars them")
    _selection(s)
    s.add_argument("--off", action="store_true", help="unstar instead")
    s.set_defaults(handler=cmd_star)
    n = sub.add_parser("note", help="set the note of episodes (by id or --where); an empty text clears it")
    n.add_argument("text", help="the note")
    _selection(n)
    n.set_defaults(handler=cmd_note)


def _chosen(a: argparse.Namespace) -> tuple[Any, list[str]]:

    if a.ids and a.where:
        raise ConfigError("give episode ids or --where, not both")
    if not a.ids and not a.where:
        raise ConfigError("which episodes? give ids, or --where (e.g. --where status=aborted)")
    store = open_store(a.db, must_exist=True)
    if a.ids:
        return store, [store.resolve_id(i) for i in a.ids]
    ids = store.episode_ids(where(store, a.where))
    if not ids:
        raise ConfigError("no episodes match --where: nothing changed (`rollscope ls` with it lists what there is)")
    return store, ids


def cmd_tag(a: argparse.Namespace) -> int:
    if not a.add and not a.remove:
        raise ConfigError("give --add TAG or --remove TAG")
    store, ids = _chosen(a)
    # Of the chosen episodes, those that carry each tag to remove: an untag counts what it took off, not what it chose.
    had = {t: sum(len(store.episode_ids(EpisodeFilter(ids=tuple(ids[i:i + 500]), tags=(t,))))
                  for i in range(0, len(ids), 500)) for t in a.remove}
    n = store.curate(ids, add_tags=a.add, remove_tags=a.remove)
    if a.add:
        print(f"tagged {', '.join(a.add)}: {counted(n, 'episode')}")
    for tag, k in had.items():
        print(f"untagged {tag}: {counted(k, 'episode')}" + ("" if k else f" (none of the {counted(n, 'episode')} chosen "
                                                               "had it)"))
    return 0


def cmd_star(a: argparse.Namespace) -> int:
    store, ids = _chosen(a)
    n = store.curate(ids, starred=not a.off)
    print(f"{'unstarred' if a.off else 'starred'} {n} episode{'s' if n != 1 else ''}")
    return 0


def cmd_note(a: argparse.Namespace) -> int:
    try:
        store, ids = _chosen(a)
    except StoreError as e:  # ``note ID TEXT``: the text first names an episode "TEXT"
        try:
            open_store(a.db, must_exist=True).resolve_id(a.text)
        except StoreError:
            raise e from None
        raise ConfigError(f"{e}; {a.text!r} is an episode: the note's text comes first, then the ids "
                          "(rollscope note TEXT ID...)") from None
    n = store.curate(ids, note=a.text)
    print(f"{'noted' if a.text.strip() else 'cleared the note of'} {n} episode{'s' if n != 1 else ''}")
    return 0
