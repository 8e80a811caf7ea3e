"""How a learner's presence moves into and out of the periods that hold its days (learner_periods), in SQL.

Each week, month and term keeps each of its learners once per course: on how many of its days they were active,
and on how many they did each thing (tables.PERIOD_COUNTS). A rebuilt day's old presence is subtracted from its
periods and its new presence added (lms_refresh.store.grains.Grains.move_presence); a period that holds no
learner yet is filled whole, from its days' rows or from shorter periods filled before it.
"""

from lms_refresh.store.tables import PERIOD_COUNTS, PRESENCE_FLAGS

_INTO_PERIODS = (f"INSERT INTO learner_periods (grain, period, course_id, actor, learner_key, "
                 f"{', '.join(PERIOD_COUNTS)})")


# Presence added to (sign 1) or taken from (sign -1) a period's learners: the rows of learner_days that
# `select` gives (parameters grain, period, then its own), each learner's counts moved by theirs. Taken, a
# learner's row is always there (it was added with those days).
def _moving(select):
    return f"""{_INTO_PERIODS}
{select}
ON CONFLICT (grain, period, course_id, actor) DO UPDATE SET {", ".join(
    f"{count} = learner_periods.{count} + excluded.{count}" for count in PERIOD_COUNTS)}"""


# One day's, in key order (no sort): parameter day.
def _one_day(sign):
    return _moving(f"""SELECT ?, ?, course_id, actor, learner_key, {sign} * 1,
    {", ".join(f"{sign} * {flag}" for flag in PRESENCE_FLAGS)}
FROM learner_days WHERE day = ?""")


ADD, SUBTRACT = _one_day(1), _one_day(-1)


# A learner's presence over several days (or periods) is summed with their counts packed into one integer, each in
# _FIELD bits: one aggregate instead of seven. Grouping a week of the benchmark's full 1M (203,789 learner-days
# into 102,767 learners) took 153 ms packed against 240 ms; filling its month, 0.76-0.80 s against 0.83-0.90 s.
# No count of a period of at most PACKED_DAYS days can overflow its field (a learner has at most
# one row of learner_days a day); a longer one (a term) is summed count by count.
_FIELD = 9
PACKED_DAYS = 2 ** _FIELD - 1


# Each field's weight is a BIGINT: PostgreSQL computes an INTEGER count times an INTEGER weight in 32 bits.
def pack(counts, bits=_FIELD):
    """The expression of `counts` (SQL expressions) packed into one BIGINT, `bits` bits each."""
    return " + ".join(f"{count} * CAST({2 ** (bits * place)} AS BIGINT)" for place, count in enumerate(counts))


_DAY_ROWS = f"SELECT course_id, actor, learner_key, {pack(('1',) + PRESENCE_FLAGS)} AS presence FROM learner_days"
_PERIOD_ROWS = f"SELECT course_id, actor, learner_key, {pack(PERIOD_COUNTS)} AS presence FROM learner_periods"


# All of a period's days in one statement (a dialect with `presence_by_period`): each learner's rows of those
# days grouped, so that a learner is inserted or updated once, not once a day. Parameters: the period, then the
# days (`{days_in}`'s).
def _grouped_days(sign, days_in):
    return f"""SELECT ?, ?, course_id, actor, MAX(learner_key), {sign} * COUNT(*),
    {", ".join(f"{sign} * SUM({flag})" for flag in PRESENCE_FLAGS)}
FROM learner_days WHERE {days_in} GROUP BY course_id, actor"""


# The same, the counts summed packed (a period of at most PACKED_DAYS days, filled whole on a dialect with
# `packed_sums`). Parameters: the period, then (with `parts` periods whose rows stand for their days: see
# parts_of) each part's grain and period, then the days.
def _packed_days(days_in, parts):
    total = f"CAST(SUM({pack(('1',) + PRESENCE_FLAGS)}) AS BIGINT)"
    rows = f"learner_days WHERE {days_in}"
    if parts:
        total = "CAST(SUM(presence) AS BIGINT)"
        rows = (f"({_PERIOD_ROWS} WHERE {' OR '.join(['(grain = ? AND period = ?)'] * parts)}\n"
                f"    UNION ALL {_DAY_ROWS} WHERE {days_in}) AS rows")
    # One sum, however many times it is unpacked: SQLite computes an aggregate written twice once.
    return f"""SELECT ?, ?, course_id, actor, MAX(learner_key), {", ".join(
        f"(({total} >> {_FIELD * place}) & {PACKED_DAYS})" for place in range(len(PERIOD_COUNTS)))}
FROM {rows} GROUP BY course_id, actor"""


def moving_days(sign, days_in):
    return _moving(_grouped_days(sign, days_in))


# The same, added to a period that holds no learner yet (each period of a first run or of a rebuild): nothing can
# conflict, so its learners are inserted as they are, in key order. The upsert checks the key before each insert
# and confirms it after, and its hash aggregate hands rows over in no order: for a week of 102,445 learners
# (PostgreSQL 15, EXPLAIN (ANALYZE, BUFFERS, WAL)) 2.24 s, 7.6 buffer hits and 3 WAL records a row,
# against 1.07 s, 2.4 and 2 so. SQLite, which moves presence day by day, fills so a period of more than a week's
# days: a month of the benchmark's full 1M (873,580 learner-days, 119,972 learners) took 2.1-3.4 s day by day and
# 0.94-1.21 s grouped: the longer the period, the more often each learner comes back. Packed (above),
# a whole week grouped beats it day by day too: 303-327 ms against 352-380 ms for one of 203,789 learner-days.
# Fewer days stay day by day, in key order: the cost model's two days (a first run's week and
# month) cost 95,729 instructions a statement in its recompute grouped, 75,260 day by day. A period that holds
# learners already is updated day by day on SQLite, where the grouped upsert's sort only paid from about ten days on.
GROUPED_FILL_AFTER = 6


# With `parts`, shorter periods filled whole before it in the same move (see parts_of) are read from their
# learners' rows instead of their days': a learner active on several days of a week is one row of it. A month of
# the benchmark's full 1M (873,580 learner-days) is four of its weeks (411,419 rows) and two days: its rows
# grouped in 0.46 s instead of 0.62 s.
def filling_days(days_in, packed, parts=0):
    grouped = _packed_days(days_in, parts) if packed else _grouped_days(1, days_in)
    return f"{_INTO_PERIODS}\n{grouped} ORDER BY course_id, actor"


def parts_of(days, filled):
    """Choose, among the periods `filled` ({(grain, label): the days they were filled with}), disjoint ones whose
    days are all among `days`, the longest first: return (their keys, the days left to read from learner_days)."""
    chosen, left = [], set(days)
    for period, held in sorted(filled.items(), key=lambda item: (-len(item[1]), item[0])):
        if len(held) > 1 and held <= left:
            chosen.append(period)
            left -= held
    return chosen, left
