"""Reading orphan visits back (``GET /v1/admin/orphan-visits``): a range of UTC days, their
visits, the busiest unknown codes and what the per-day cap left unattributed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from sluice.app import Store

TOP_CODES = 100


@dataclass(frozen=True)
class OrphanReport:
    days: list[tuple[date, int]]  # every day of the range, zeros included
    codes: list[tuple[str, int]]  # the busiest first, at most TOP_CODES
    other: int  # visits to codes beyond a day's cap

    @property
    def total(self) -> int:
        return sum(visits for _, visits in self.days)


# One statement, so one consistent snapshot: the days and the codes include the same writes.
_REPORT = f"""
SELECT 'd', day, visits, other FROM orphan_visit_days WHERE day >= ? AND day <= ?
UNION ALL
SELECT * FROM (SELECT 'c', code, SUM(visits) AS n, CAST(NULL AS INTEGER)
 FROM orphan_visit_codes WHERE day >= ? AND day <= ?
 GROUP BY code ORDER BY n DESC, code LIMIT {TOP_CODES}) AS c
"""


async def read_orphans(store: Store, first: date, last: date) -> OrphanReport:
    """The orphan visits of the UTC days ``first..last`` (inclusive)."""
    bounds = (first.isoformat(), last.isoformat())
    rows = await store.fetchall(_REPORT, bounds * 2)
    per_day: dict[str, int] = {}
    codes: list[tuple[str, int]] = []
    other = 0
    for kind, key, visits, spilled in rows:
        if kind == "d":
            per_day[str(key)] = int(visits)
            other += int(spilled)
        else:
            codes.append((str(key), int(visits)))
    days = []
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        days.append((day, per_day.get(day.isoformat(), 0)))
    return OrphanReport(days, codes, other)
