"""One query per delimiter listing page: a recursive CTE that walks the key index one step
per page entry (an object, or a whole common prefix skipped with one index seek).

Without it, a page of N common prefixes took N round trips (one range query after each jump).
A step after key k starts past k, or past every key under k's common prefix cp: `key > cp ||
0xFF` (no UTF-8 key holds the byte 0xFF, so no key under cp reaches it). The rows come back in
key order, one per step, for `ObjectWalk.feed`.
"""

from __future__ import annotations

from typing import Any

from gateway.metadata.keys import key_bytes


def sqlite_query(cols: str, bucket: str, prefix: str, delimiter: str, lower: bytes,
                 inclusive: bool, end: bytes | None, steps: int) -> tuple[str, dict[str, Any]]:
    """SQLite: `||` gives TEXT (which sorts before every BLOB), hence the casts."""
    rng = " AND key < :end" if end is not None else ""
    nxt = ("CASE WHEN instr(substr(w.k, :plen + 1), :d) > 0 THEN "
           "CAST(substr(w.k, 1, :plen + instr(substr(w.k, :plen + 1), :d) - 1 + length(:d)) "
           "|| x'FF' AS BLOB) ELSE w.k END")
    q = (f"WITH RECURSIVE w(k, n) AS ("
         f"SELECT (SELECT key FROM objects WHERE bucket = :b AND key {'>=' if inclusive else '>'}"
         f" :lo{rng} ORDER BY key LIMIT 1), 1 "
         f"UNION ALL SELECT (SELECT key FROM objects WHERE bucket = :b AND key > {nxt}{rng} "
         f"ORDER BY key LIMIT 1), w.n + 1 FROM w WHERE w.k IS NOT NULL AND w.n < :steps) "
         f"SELECT {', '.join('o.' + c.strip() for c in cols.split(','))} FROM w "
         f"JOIN objects o ON o.bucket = :b AND o.key = w.k ORDER BY w.n")
    args = {"b": bucket, "lo": lower, "end": end, "plen": len(key_bytes(prefix)),
            "d": key_bytes(delimiter), "steps": steps}
    if end is None:
        del args["end"]
    return q, args


def pg_query(cols: str, bucket: str, prefix: str, delimiter: str, lower: bytes,
             inclusive: bool, end: bytes | None, steps: int) -> tuple[str, list[Any]]:
    """PostgreSQL: bytea throughout ($1 bucket, $2 lower, $3 prefix length, $4 delimiter,
    $5 steps, $6 end)."""
    rng = " AND key < $6" if end is not None else ""
    pos = "position($4::bytea in substring(w.k from $3::int + 1))"
    nxt = (f"CASE WHEN {pos} > 0 THEN substring(w.k from 1 for $3::int + {pos} - 1 + "
           f"length($4::bytea)) || '\\xff'::bytea ELSE w.k END")
    q = (f"WITH RECURSIVE w(k, n) AS ("
         f"SELECT (SELECT key FROM objects WHERE bucket = $1 AND key {'>=' if inclusive else '>'}"
         f" $2::bytea{rng} ORDER BY key LIMIT 1), 1 "
         f"UNION ALL SELECT (SELECT key FROM objects WHERE bucket = $1 AND key > {nxt}{rng} "
         f"ORDER BY key LIMIT 1), w.n + 1 FROM w WHERE w.k IS NOT NULL AND w.n < $5::int) "
         f"SELECT {', '.join('o.' + c.strip() for c in cols.split(','))} FROM w "
         f"JOIN objects o ON o.bucket = $1 AND o.key = w.k ORDER BY w.n")
    args: list[Any] = [bucket, lower, len(key_bytes(prefix)), key_bytes(delimiter), steps]
    if end is not None:
        args.append(end)
    return q, args
