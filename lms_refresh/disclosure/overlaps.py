"""Terms whose difference publishes days exactly: under exact counts (`method = "none"`), two overlapping
terms' event counts subtract to those of the days one holds and the other does not, however few learners
were active on them (README, "Threat model"). `check` warns of such pairs; the cell key method gives each
term's row its own noise, so the difference is a guess, never certain."""

import datetime as dt
import itertools

SHOWN_DAYS = 3  # days named in a warning; the rest are counted


def _days(term):
    first, last = dt.date.fromisoformat(term.first_day), dt.date.fromisoformat(term.last_day)
    return {first + dt.timedelta(days=offset) for offset in range((last - first).days + 1)}


def exposed_by_overlaps(terms):
    """Return (name, name, [days in exactly one of the two, ISO text, sorted]) for each pair of `terms` (config
    Terms) that share a day and differ."""
    found = []
    for one, other in itertools.combinations(sorted(terms, key=lambda term: (term.first_day, term.name)), 2):
        a, b = _days(one), _days(other)
        if a & b and a != b:
            found.append((one.name, other.name, sorted(day.isoformat() for day in a ^ b)))
    return found


def warning(config):
    """The sentence `check` gives of overlapping terms under exact counts, or None."""
    if config.privacy.method != "none":
        return None
    pairs = exposed_by_overlaps(config.terms)
    if not pairs:
        return None
    described = []
    for one, other, days in pairs[:SHOWN_DAYS]:
        shown = ", ".join(days[:SHOWN_DAYS]) + (f" and {len(days) - SHOWN_DAYS} more" if len(days) > SHOWN_DAYS else "")
        described.append(f"'{one}' and '{other}' ({len(days)} day{'s' if len(days) > 1 else ''} in only one: {shown})")
    more = f" and {len(pairs) - SHOWN_DAYS} more pairs" if len(pairs) > SHOWN_DAYS else ""
    return (f"terms overlap: {'; '.join(described)}{more}. With method = \"none\" each term's counts are exact, so "
            "the difference of two overlapping terms publishes the statements, attempts, completions, passes and "
            "fails of the days in only one of them exactly, even on days min_cell_size withholds; make terms that "
            "do not overlap, or use method = \"cell-key\" (README, \"Threat model\")")
