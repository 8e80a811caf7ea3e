"""Realistic sample xAPI statements, for the demo, the tests and the benchmark.

Several courses of very different sizes (so some cells are suppressed),
thousands of learners, weekday-heavy activity, ~1% of statements arriving
days late (offline mobile sync), a few voided statements and a small share
of malformed records. Deterministic for a given seed.
"""

import collections
import datetime as dt
import json
import os
import random
import uuid
import zoneinfo

from lms_refresh.sources.xapi import ADL, COURSE_TYPE

HOME = "https://lms.example.edu"
COURSES = [  # (code, weight of learners enrolling, daily activity factor)
    ("BIO101", 0.40, 1.0), ("CHEM201", 0.25, 0.9), ("MATH150", 0.30, 1.1),
    ("HIST110", 0.15, 0.7), ("PHYS301", 0.04, 0.8), ("LAW505", 0.01, 0.6),
]
# As an LMS names them in each statement's course activity (Open edX: the parent, in en-US).
COURSE_NAMES = {"BIO101": "Introduction to Biology", "CHEM201": "Organic Chemistry", "MATH150": "Calculus I",
                "HIST110": "World History", "PHYS301": "Quantum Mechanics", "LAW505": "Comparative Law Seminar"}
VERBS = [("experienced", 40), ("attempted", 20), ("answered", 10), ("completed", 15), ("passed", 10), ("failed", 5)]
_VERB_CHOICES = [v for v, weight in VERBS for _ in range(weight)]


def _uuid(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _time(moment):
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def statement(rng, learner, course, *, moment, stored, verb):
    """Return one xAPI statement as a dict (about 800 bytes of JSON)."""
    course_iri = f"{HOME}/course/{course}"
    activity = rng.randint(1, 12)
    result = {"duration": f"PT{rng.randint(1, 45)}M{rng.randint(0, 59)}S"}
    if verb in ("attempted", "answered", "passed", "failed", "completed"):
        raw = rng.randint(20, 100) if verb != "failed" else rng.randint(0, 49)
        result["score"] = {"scaled": raw / 100, "raw": raw, "min": 0, "max": 100}
    if verb in ("passed", "failed"):
        result["success"] = verb == "passed"
    if verb == "completed":
        result["completion"] = True
    return {
        "id": _uuid(rng),
        "actor": {"objectType": "Agent", "name": f"Learner {learner}",
                  "account": {"homePage": HOME, "name": f"u{learner:06d}"}},
        "verb": {"id": ADL + verb, "display": {"en-US": verb}},
        "object": {"objectType": "Activity", "id": f"{course_iri}/activity/{activity}",
                   "definition": {"type": "http://adlnet.gov/expapi/activities/assessment"}},
        "result": result,
        "context": {
            "registration": _uuid(rng),
            "contextActivities": {
                "parent": [{"objectType": "Activity", "id": course_iri,
                            "definition": {"type": COURSE_TYPE, "name": {"en-US": COURSE_NAMES.get(course, course)}}}],
            },
        },
        "timestamp": _time(moment),
        "stored": _time(stored),
        "authority": {"mbox": "mailto:lrs@example.edu"},
        "version": "1.0.3",
    }


def generate(seed, start, days, *, learners, timezone="Europe/Paris", per_learner_day=0.45,
             late_share=0.01, malformed_share=0.002, void_share=0.001, until=None):
    """Yield (stored time, NDJSON line) for `days` local days from `start` (a date).

    With `until` (an aware datetime, e.g. now), nothing stored at or after it
    is yielded: a statement synced late whose sync would lie in the future has
    simply not arrived yet, as in a real export.
    """
    rng = random.Random(seed)
    zone = zoneinfo.ZoneInfo(timezone)
    enrolment = [[c for c, weight, _ in COURSES if rng.random() < weight] or ["BIO101"] for _ in range(learners)]
    factors = {c: f for c, _, f in COURSES}
    recent = []
    for offset in range(days):
        day = start + dt.timedelta(days=offset)
        weekday_factor = 1.0 if day.weekday() < 5 else 0.35
        for learner in range(learners):
            for course in enrolment[learner]:
                count = _poisson(rng, per_learner_day * weekday_factor * factors[course])
                for _ in range(count):
                    local = dt.datetime.combine(day, dt.time(rng.randint(7, 23), rng.randint(0, 59),
                                                             rng.randint(0, 59), rng.randint(0, 999) * 1000), zone)
                    stored = local + dt.timedelta(seconds=rng.randint(1, 90))
                    if rng.random() < late_share:
                        stored += dt.timedelta(days=rng.randint(1, 5), hours=rng.randint(0, 12))
                    record = statement(rng, learner, course, moment=local, stored=stored,
                                       verb=rng.choice(_VERB_CHOICES))
                    arrived = until is None or stored + dt.timedelta(seconds=1) < until
                    if rng.random() < void_share and recent and arrived:
                        target = rng.choice(recent)
                        yield stored, json.dumps(_voiding(rng, target, stored))
                    recent = (recent + [record["id"]])[-50:]
                    line = _maybe_malformed(rng, json.dumps(record), malformed_share)
                    if arrived:  # drawn either way, so `until` changes nothing else in the sample
                        yield stored, line


def _voiding(rng, target, stored):
    return {"id": _uuid(rng), "actor": {"objectType": "Agent", "mbox": "mailto:teacher@example.edu"},
            "verb": {"id": ADL + "voided", "display": {"en-US": "voided"}},
            "object": {"objectType": "StatementRef", "id": target},
            "timestamp": _time(stored), "stored": _time(stored + dt.timedelta(seconds=1)), "version": "1.0.3"}


def _maybe_malformed(rng, line, share):
    if rng.random() >= share:
        return line
    kind = rng.randint(0, 2)
    if kind == 0:
        return line[: len(line) // 2]  # truncated write
    if kind == 1:
        return line.replace('"actor"', '"actr"', 1)  # no actor
    return line.replace('"scaled": ', '"scaled": 7', 1) if '"scaled"' in line else line[:-1]


def _poisson(rng, mean):
    # Knuth's method is fine for the small means used here.
    limit, k, p = pow(2.718281828459045, -mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


OPEN_FILES = 64


def write_daily_files(directory, records, prefix="statements"):
    """Write (stored, line) records into one NDJSON file per UTC day of `stored`; return the count."""
    os.makedirs(directory, exist_ok=True)
    handles = collections.OrderedDict()  # the most recently written files stay open, at most OPEN_FILES
    count = 0
    try:
        for stored, line in records:
            name = os.path.join(directory, f"{prefix}-{stored.astimezone(dt.UTC):%Y-%m-%d}.ndjson")
            handle = handles.pop(name, None)
            if handle is None:
                if len(handles) >= OPEN_FILES:  # ten years of days would pass Debian's 1024 open files
                    handles.popitem(last=False)[1].close()
                handle = open(name, "a", encoding="utf-8")
            handles[name] = handle
            handle.write(line + "\n")
            count += 1
    finally:
        for handle in handles.values():
            handle.close()
    return count
