"""The aggregates the store keeps by triggers, and their count at an import batch's commit.

A ``Counted`` is a table that counts the rows of a source table (the browse index, or the tags) per key, with sums,
kept equal to it by triggers (``counted_table``, ``count_triggers``); ``schema`` says which tables there are
(``schema.COUNTED``). On the browse index the triggers stop at the mark in ``count_mark``, a row that exists only
inside an import batch's transaction: the batch counts the rows it wrote above the mark at its commit, set-based
(``fold_counts``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import sqlite_utils

# Where an import batch counts its episodes itself (``fold_counts``): the browse index rows above the ``rid`` in
# ``count_mark`` (a row only inside a batch's transaction) are left alone by the aggregates' triggers.
COUNT_MARK = "IFNULL((SELECT rid FROM count_mark), 9223372036854775807)"


@dataclass(frozen=True)
class Counted:
    """An aggregate table kept equal to the rows of ``source`` (:func:`counted_table`): ``name`` counts them per
    ``key`` (its columns and their types) with the ``sums`` (column, what a row adds given it as ``{r}``) of each
    key's rows. Each of ``variants`` (an expression per key column, of ``{r}``) makes a row a source row counts in.
    ``update_of``: the source columns whose update changes a row's key or sums (every update when empty)."""

    name: str
    key: tuple[tuple[str, str], ...]
    variants: tuple[tuple[str, ...], ...]
    sums: tuple[tuple[str, str], ...]
    update_of: tuple[str, ...] = ()
    source: str = "episode_index"

    @property
    def cols(self) -> list[str]:
        return [c for c, _ in self.key]

    @property
    def names(self) -> list[str]:
        return [c for c, _ in self.sums]

    def match(self, exprs: Sequence[str], row: str) -> str:
        """The SQL that picks the table's row of the key ``exprs`` make of ``row``."""
        return " AND ".join(f"{c} IS {e.format(r=row)}" for c, e in zip(self.cols, exprs, strict=True))

    def add(self, row: str) -> str:
        """The SQL that counts the source row ``row`` (``new`` in a trigger)."""
        cols, names = ", ".join(self.cols), ", ".join(self.names)
        change = ", ".join(f"{c} = {c} + {term.format(r=row)}" for c, term in self.sums)
        return " ".join(f"INSERT INTO {self.name} ({cols}, {names}) SELECT "
                        f"{', '.join(e.format(r=row) for e in exprs)}, {', '.join('0' for _ in self.names)} "
                        f"WHERE NOT EXISTS (SELECT 1 FROM {self.name} WHERE {self.match(exprs, row)}); "
                        f"UPDATE {self.name} SET {change} WHERE {self.match(exprs, row)};" for exprs in self.variants)

    def remove(self, row: str) -> str:
        change = ", ".join(f"{c} = {c} - {term.format(r=row)}" for c, term in self.sums)
        return " ".join(f"UPDATE {self.name} SET {change} WHERE {self.match(exprs, row)}; "
                        f"DELETE FROM {self.name} WHERE {self.match(exprs, row)} AND n <= 0;" for exprs in self.variants)


def counted_table(db: sqlite_utils.Database, spec: Counted) -> None:
    """The table of ``spec``, kept equal to its source by triggers (so every write, delete, re-import and re-check
    updates it in the same transaction) and filled from the rows stored before (those a mark leaves to
    ``fold_counts`` aside); a row whose count falls to 0 goes. A table with other columns is made again."""
    name, cols, names, source = spec.name, spec.cols, spec.names, spec.source
    if name in db.table_names() and [c.name for c in db.table(name).columns] != cols + names:
        db.execute(f"DROP TABLE {name}")
    db.execute(f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(f'{c} {t}' for c, t in spec.key)}, "
               f"{', '.join(f'{c} INTEGER NOT NULL' for c in names)})")
    db.execute(f"CREATE INDEX IF NOT EXISTS {name}_key ON {name} ({', '.join(cols)})")
    count_triggers(db, spec)
    db.execute(f"DELETE FROM {name}")
    totals = ", ".join(f"IFNULL(SUM({term.format(r=source)}), 0)" for _, term in spec.sums)
    # Like the triggers, the fill leaves the rows above a mark (one a commit left: none should) to ``fold_counts``.
    below = f" WHERE rid <= {COUNT_MARK}" if source == "episode_index" else ""
    for exprs in spec.variants:
        made = [e.format(r=source) for e in exprs]
        db.execute(f"INSERT INTO {name} ({', '.join(cols)}, {', '.join(names)}) SELECT {', '.join(made)}, {totals} "
                   f"FROM {source}{below} GROUP BY {', '.join(str(k + 1) for k in range(len(made)))}")


def count_triggers(db: sqlite_utils.Database, spec: Counted) -> None:
    """The triggers that keep the table of ``spec`` equal to its source, made again. On the browse index they leave
    the rows above the batch's mark (``COUNT_MARK``) to ``fold_counts``."""
    if spec.source == "episode_index":
        db.execute("CREATE TABLE IF NOT EXISTS count_mark (one INTEGER PRIMARY KEY CHECK (one = 0), "
                   "rid INTEGER NOT NULL)")
    for event, body in (("INSERT", spec.add("new")), ("DELETE", spec.remove("old")),
                        ("UPDATE", spec.remove("old") + " " + spec.add("new"))):
        what = f"UPDATE OF {', '.join(spec.update_of)}" if event == "UPDATE" and spec.update_of else event
        row = "new" if event == "INSERT" else "old"
        when = f" WHEN {row}.rid <= {COUNT_MARK}" if spec.source == "episode_index" else ""
        db.execute(f"DROP TRIGGER IF EXISTS {spec.name}_{event.lower()}")
        db.execute(f"CREATE TRIGGER {spec.name}_{event.lower()} AFTER {what} ON {spec.source}{when} BEGIN {body} END")


def fold_counts(conn: sqlite3.Connection, mark: int, specs: Sequence[Counted]) -> None:
    """Count the browse index rows above ``mark`` (an import batch's, which the triggers left alone) in each of
    ``specs`` on the browse index (``schema.COUNTED``): per table, the keys and sums of those rows added to the rows
    of the keys it has, then the keys it lacks inserted, where the triggers run two statements a row."""
    for spec in specs:
        if spec.source != "episode_index":
            continue
        for exprs in spec.variants:
            keys = [f"{e.format(r='r')} AS k{i}" for i, e in enumerate(exprs)]
            sums = [f"IFNULL(SUM({term.format(r='r')}), 0) AS s{j}" for j, (_, term) in enumerate(spec.sums)]
            made = (f"SELECT {', '.join(keys + sums)} FROM episode_index AS r WHERE r.rid > {int(mark)} "
                    f"GROUP BY {', '.join(str(i + 1) for i in range(len(keys)))}")
            found = spec.match([f"d.k{i}" for i in range(len(exprs))], "d")
            change = ", ".join(f"{c} = {c} + d.s{j}" for j, c in enumerate(spec.names))
            conn.execute(f"UPDATE {spec.name} SET {change} FROM ({made}) AS d WHERE {found}")
            conn.execute(f"INSERT INTO {spec.name} ({', '.join(spec.cols + spec.names)}) SELECT * FROM ({made}) AS d "
                         f"WHERE NOT EXISTS (SELECT 1 FROM {spec.name} WHERE {found})")
