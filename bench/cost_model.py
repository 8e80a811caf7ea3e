"""Benchmark and CI guard: CPU instructions per statement of each step of a refresh.

    /usr/bin/python3 bench/cost_model.py [--statements 2000]   # print the counts, and the naive yardstick's
    /usr/bin/python3 bench/cost_model.py --by-statement        # and the recompute's, SQL statement by statement
    /usr/bin/python3 bench/cost_model.py --check               # compare them with bench/cost_budget.toml
    /usr/bin/python3 bench/cost_model.py --pythonpath DIR      # with DIR's modules too (e.g. orjson)
    /usr/bin/python3 bench/cost_model.py --floors              # what each step cannot cost less than, and the target

Needs valgrind (`apt install valgrind`). Wall-clock figures on a shared VM move by
±20% from one minute to the next; instruction counts do not: with PYTHONHASHSEED
fixed, a minimal environment, the bytecode compiled beforehand and the same paths
(a copy of lms_refresh/ in a new /tmp/lms-cost-XXXXXXXX: some of CPython's tables
are keyed by address, so even the length of a path moves a count a little), they
repeat exactly, run after run. bench/cost_workload.py takes N statements, then 2N,
of the benchmark's own generator (one export file of one day) through the steps
below, in one process each, under callgrind, which counts every part apart; a
step's difference between the two runs divided by N is its cost per statement in
steady state (start-up, imports, schema and warm caches cancel out).

Steps (what a refresh does per statement; see bench/cost_workload.py):
  parse+map  a parsing worker: read a chunk's lines, decode, map, marshal the rows
  stage      the staging process: the workers' rows (with the record keys they computed) staged by Store.stage
  recompute  rebuilding the touched days' partitions and their courses' published rows
  commit     the run's transaction, written to SQLite's WAL
  naive      the yardstick (not a step; not budgeted): per-line json.loads + executemany
The publication file (run/publication.py) is not a step: its cost follows the published cells
(days x courses), not the statements; N and 2N statements of one day publish the same 12 cells.

--floors counts, with the same method on the same statements, the pieces of work a refresh cannot do
without, each alone on the sample's own data (bench/cost_workload.py's `floors`), and prints each under the
step it bounds: parse+map cannot cost less than decoding the lines (the worker's decoder: json_decoding's, on
the path the workload uses, orjson's guards included), the events' record keys (the mapper's RecordKeys, its
learners' keys cached as in the step) and marshal.dumps of the rows; stage than marshal.loads of them and an
executemany of them into an empty staged_events (a new store's, with its unique index on event_id) in one
transaction. Under the recompute, not floors: learner_days' rows (PRESENCE) and their weeks' and months'
(move_presence), what the grains' rows cost as written today, as --by-statement counts them. Then the sum
of the floors, with those rows, and today's total, against issue 23's target for the path (TARGETS).
Today's steps there are those of the same runs, whose marks and arguments differ from --check's: by memory
layout alone, a step's count may differ from --check's by a percent (parse+map 121,432 against 120,421 at
first: the budgets are --check's).

With both cores busy all the time, a refresh's rate is at most
2 x (machine speed) / (its instructions per statement); the naive yardstick's is
1 x (machine speed) / (its own), at the same instructions per cycle.

--check runs the steps (not the yardstick) with the budget file's statement count on
the interpreter it names, and exits 1 naming each step over its budget. Its [steps] budgets are
the standard library's JSON path: --check makes the workload use it (LMS_REFRESH_JSON_PARSER=stdlib)
even where orjson can be imported. With --pythonpath, --check then runs the steps once more on
orjson's path (LMS_REFRESH_JSON_PARSER=orjson) and holds them to the [orjson] budgets too (only
parse+map: decoding is the one step the parser changes); it exits 2 if orjson cannot be imported
from there. Without --check the workload uses what it finds, and the counts say which parser that
was; Debian 12 has no python3-orjson, so orjson's counts need it installed apart and named:

    pip install --target /tmp/orjson-site orjson==3.13.0
    /usr/bin/python3 bench/cost_model.py --pythonpath /tmp/orjson-site
    /usr/bin/python3 bench/cost_model.py --check --pythonpath /tmp/orjson-site   # what .ci/cost-model runs
"""

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cost_workload import FLOOR_PARTS, PARTS  # noqa: E402

STEPS = ("parse+map", "stage", "recompute", "commit")
PYTHON_BETWEEN = "(Python between them)"  # --by-statement: the recompute's Python, apart from its SQL statements
ORJSON_STEPS = ("parse+map",)  # the steps the JSON parser changes: orjson's budgets
BUDGETS = os.path.join(HERE, "cost_budget.toml")
# --floors: under each step, the pieces of its work counted alone: the floors (FLOOR_PARTS) that bound it, or for the
# recompute the grains' rows as --by-statement counts them (PRESENCE's place, and move_presence's, summed).
PRESENCE, MOVING = "PRESENCE", "move_presence"
PIECES = {"parse+map": ("decode", "record keys", "marshal dumps"), "stage": ("marshal loads", "staged insert"),
          "recompute": (PRESENCE, MOVING), "commit": ()}
AS_WRITTEN = (PRESENCE, MOVING)  # not floors
FLOOR_WORDS = {
    "decode": "the worker's JSON decoder alone (json_decoding.line_decoder()), each line",
    "record keys": "each event's record key and its learner's (RecordKeys.keyers()) alone",
    "marshal dumps": "marshal.dumps of the mapped rows, as a worker sends them",
    "marshal loads": "marshal.loads of them, as the staging process takes them",
    "staged insert": "executemany of the rows into an empty staged_events (its event_id index), one transaction",
    PRESENCE: "learner_days' rows (grains.py PRESENCE), as written today: not a floor",
    MOVING: "their weeks' and months' rows (grains.py move_presence), as written today: not a floor",
}
TARGETS = {"stdlib": 120_000, "orjson": 85_000}  # issue 23: a refresh's instructions per statement, in all
PYTHON = "/usr/bin/python3"  # Debian's own, which the .deb runs on and the budgets were measured with


class BudgetError(Exception):
    """The budget file cannot be used for these counts (missing, malformed, or another interpreter)."""


def environment(pycache, pythonpath=None, parser=None):
    """The workload's whole environment: counts must not depend on the caller's (but for the
    module path and JSON parser asked for)."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONPYCACHEPREFIX": pycache}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if parser:
        env["LMS_REFRESH_JSON_PARSER"] = parser
    return env


def run_parts(python, path, count, *, work, run, naive, extra, by_statement=False, floors=False):
    """Start the workload over `count` statements under callgrind in directory `run` of `work` (the code
    is in work/code); return a function that waits for it and returns ({part: instructions}, the JSON parser
    it used). With `by_statement`, the parts also hold each SQL statement of the recompute, by its place in
    the code (summed over the times it ran), and PYTHON_BETWEEN, the recompute's Python between them; with
    `floors` (and `by_statement`), FLOOR_PARTS, PRESENCE and MOVING too."""
    directory = os.path.join(work, run)
    os.mkdir(directory)
    out = os.path.join(directory, "callgrind.out")
    command = ["valgrind", "--tool=callgrind", "--dump-before=getppid", "--combine-dumps=yes",
               f"--callgrind-out-file={out}", python, "-s", os.path.join(work, "code", "cost_workload.py"),
               path, str(count), f"naive={int(naive)}"] + flags(by_statement, floors)
    env = dict(environment(os.path.join(work, "pycache"), **extra), PYTHONDONTWRITEBYTECODE="1")
    process = subprocess.Popen(command, cwd=directory, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait():
        output, errors = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"The workload failed under callgrind ({count} statements):\n{output}{errors[-3000:]}")
        with open(out, encoding="utf-8") as handle:
            totals = [int(n) for n in re.findall(r"^totals: (\d+)", handle.read(), re.MULTILINE)]
        parser = re.search(r"^json parser: (\S+)$", output, re.MULTILINE)
        counts = split_parts(totals, output, naive=naive, by_statement=by_statement, floors=floors)
        return counts, parser and parser.group(1)
    return wait


def flags(by_statement, floors):
    """The workload's arguments after its `naive=`."""
    return (["statements=1"] if by_statement else []) + (["floors=1"] if floors else [])


def split_parts(totals, output, *, naive, by_statement, floors=False):
    """Given callgrind's totals, one per mark (the last: what follows the last mark, the exit), and what the
    workload printed, return {part: instructions}; with `by_statement`, each SQL statement's too, and with `floors`
    each of FLOOR_PARTS, PRESENCE's and MOVING's (see run_parts)."""
    parts = (PARTS if naive else PARTS[:-1]) + (FLOOR_PARTS if floors else ())
    places = re.findall(r"^statement: (\S+)$", output, re.MULTILINE)
    pieces = 2 * len(places)  # within the recompute: each statement, and the Python after it
    if len(totals) != len(parts) + 1 + pieces:
        raise SystemExit(f"callgrind counted {len(totals)} parts, not {len(parts) + 1 + pieces}: "
                         "something else calls getppid()")
    recompute = parts.index("recompute")
    inside = totals[recompute:recompute + pieces + 1]  # Python, a statement, Python, ..., Python
    counts = dict(zip(parts, totals[:recompute] + [sum(inside)] + totals[recompute + pieces + 1:-1], strict=True))
    if by_statement:
        counts[PYTHON_BETWEEN] = sum(inside[0::2])
        for place, count in zip(places, inside[1::2], strict=True):
            counts[place] = counts.get(place, 0) + count
    if floors:
        presence = re.findall(r"^presence: (\S+)$", output, re.MULTILINE)
        if len(presence) != 1:
            raise SystemExit(f"The recompute ran PRESENCE from {len(presence)} places, not 1: {', '.join(presence)}")
        counts[PRESENCE] = counts[presence[0]]
        counts[MOVING] = sum(count for place, count in counts.items() if place.split(":")[1:2] == [MOVING])
    return counts


def measure(statements, *, python=PYTHON, naive=True, pythonpath=None, parser=None, by_statement=False,
            floors=False):
    """Return ({step: instructions per statement} (and "naive" if asked; with `by_statement`, each of the
    recompute's SQL statements by its place in the code too; with `floors`, the floors, PRESENCE and MOVING) over
    `statements` statements, the JSON parser the workload used); `pythonpath` and `parser` go to its environment."""
    extra = {"pythonpath": pythonpath, "parser": parser}
    by_statement = by_statement or floors  # the grains' rows, as written today: two places' SQL statements
    from refresh_bench import write_days

    with tempfile.TemporaryDirectory(prefix="lms-cost-", dir="/tmp") as work:
        code = os.path.join(work, "code")
        shutil.copytree(os.path.join(HERE, "..", "lms_refresh"), os.path.join(code, "lms_refresh"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(os.path.join(HERE, "cost_workload.py"), code)
        # 2N statements on one day: the shape of one export file of the full benchmark.
        write_days(os.path.join(work, "export"), 0, 1, 2 * statements, seed=1)
        path = os.path.join(work, "export", "export-2026-06-01.ndjson")
        # One run without callgrind compiles every module the workload imports into a cache of
        # its own, so both measured runs read the same bytecode and neither compiles any.
        warm = os.path.join(work, "warm")
        os.mkdir(warm)
        subprocess.run([python, "-s", os.path.join(code, "cost_workload.py"), path, "10", "naive=1",
                        *flags(by_statement, floors)], cwd=warm,
                       env=environment(os.path.join(work, "pycache"), **extra), check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL)
        # The two runs at once, one per core: an instruction count does not depend on the other.
        waits = [run_parts(python, path, n, work=work, run=f"run-{i}", naive=naive, extra=extra,
                           by_statement=by_statement, floors=floors)
                 for i, n in ((1, statements), (2, 2 * statements))]
        (one, used), (two, _) = (wait() for wait in waits)
    return {part: (two.get(part, 0) - one.get(part, 0)) / statements for part in two.keys() | one.keys()}, used


def interpreter(python):
    """Return the Python and SQLite versions of `python`, which the counts depend on."""
    return subprocess.run([python, "-s", "-c", "import platform, sqlite3; "
                           "print(platform.python_version(), sqlite3.sqlite_version)"],
                          capture_output=True, text=True, check=True).stdout.split()


def load_budgets(path):
    """Return the budget file at `path` as a dict: its "steps" {step: budget}, "statements", "python", "sqlite"."""
    try:
        with open(path, "rb") as handle:
            budgets = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise BudgetError(f"Cannot read the budgets {path}: {error}") from error
    missing = [field for field in ("statements", "python", "sqlite", "steps", "orjson") if field not in budgets]
    unknown = set(budgets.get("steps", {})) ^ set(STEPS) | set(budgets.get("orjson", {})) ^ set(ORJSON_STEPS)
    if missing or unknown:
        raise BudgetError(f"The budgets {path} must give statements, python, sqlite, a budget for each of "
                          f"{', '.join(STEPS)} in [steps] and for {', '.join(ORJSON_STEPS)} in [orjson] (missing: "
                          f"{', '.join(missing) or 'none'}; steps missing or unknown: "
                          f"{', '.join(sorted(unknown)) or 'none'}).")
    return budgets


def check(counts, budgets, steps=STEPS, table="steps"):
    """Given {step: instructions per statement} and {step: budget} (the budget file's [`table`]), return
    (over, lines): the lines name every one of `steps` with its count, budget and margin, and `over` says
    whether any exceeds its budget."""
    lines, over = [f"{'step':<10} {'count':>9} {'budget':>9} {'margin':>9}"], []
    for step in steps:
        count, budget = counts[step], budgets[step]
        margin = budget - count
        lines.append(f"{step:<10} {count:>9,.0f} {budget:>9,} {margin:>+9,.0f} ({margin / budget:+.1%})")
        if count > budget:
            over.append(f"Over budget: step {step} costs {count:,.0f} instructions per statement, "
                        f"its budget is {budget:,} (bench/cost_budget.toml, [{table}]).")
    return bool(over), lines + over


def print_counts(counts):
    naive, ours = counts["naive"], sum(counts[step] for step in STEPS)
    for step in STEPS + ("naive",):
        print(f"{step:<14} {counts[step]:>9,.0f} instructions/statement")
    print(f"{'refresh total':<14} {ours:>9,.0f} = {ours / naive:.2f} x the naive yardstick (one process)")
    print(f"best case on 2 cores, both busy throughout: {2 * naive / ours:.2f} x the yardstick's rate")
    statements = {part: count for part, count in counts.items() if part not in PARTS}
    if statements:
        print("recompute, by SQL statement (where in the code it runs, the same place summed), and the Python "
              "between them:")
        shown = {part: count for part, count in statements.items() if count >= 100}
        for part, count in sorted(shown.items(), key=lambda item: -item[1]):
            print(f"  {count:>9,.0f}  {part}")
        rest = [count for part, count in statements.items() if part not in shown]
        print(f"  {sum(rest):>9,.0f}  the {len(rest)} other statements (under 100 each)")


def print_floors(counts, parser):
    """Print each step's count with the pieces of its work under it (PIECES), then the refresh's total against
    issue 23's target for `parser`'s path: the floors' sum, with the grains' rows as written today, and today's."""
    print("instructions/statement: each step today, and under it each piece of its work counted alone")
    for step, pieces in PIECES.items():
        print(f"{step:<18} {counts[step]:>9,.0f}  today")
        for piece in pieces:
            print(f"  {piece:<16} {counts[piece]:>9,.0f}  {FLOOR_WORDS[piece]}")
        if pieces:
            part = sum(counts[piece] for piece in pieces)
            what = "as written today" if pieces[0] in AS_WRITTEN else "floors"
            print(f"  {what:<16} {part:>9,.0f}  {part / counts[step]:.0%} of the step; the rest "
                  f"{counts[step] - part:,.0f}")
        else:
            print("  (no floor counted)")
    floors = sum(counts[piece] for pieces in PIECES.values() for piece in pieces if piece not in AS_WRITTEN)
    written = floors + sum(counts[piece] for piece in AS_WRITTEN)
    if parser not in TARGETS:
        raise SystemExit(f"The workload named no JSON parser issue 23 has a target for ({parser!r}); "
                         f"known: {', '.join(TARGETS)}.")
    target = TARGETS[parser]
    print(f"refresh total, JSON parser {parser}, against issue 23's target of {target:,}:")
    for what, total in (("the floors' sum", floors), ("+ the grains' rows as written today", written),
                        ("today", sum(counts[step] for step in STEPS))):
        print(f"  {what:<36} {total:>9,.0f} = {total / target:.2f} x the target")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, help="statements per run (default 2000; --check: the budgets')")
    parser.add_argument("--python", default=PYTHON, help=f"the interpreter to measure (default {PYTHON})")
    parser.add_argument("--check", action="store_true", help=f"compare the steps with {BUDGETS}")
    parser.add_argument("--pythonpath", help="a directory of modules the workload may import too (e.g. orjson's)")
    parser.add_argument("--by-statement", action="store_true",
                        help="also count each SQL statement of the recompute apart (not with --check)")
    parser.add_argument("--floors", action="store_true",
                        help="count under each step the work it cannot do without, each piece alone, and compare "
                             "their sum with issue 23's target (not with --check)")
    options = parser.parse_args()
    if options.check and options.statements is not None:
        parser.error("--check measures as many statements as its budgets were measured with")
    if options.check and (options.by_statement or options.floors):
        parser.error("--by-statement and --floors add marks the budgets were not measured with: not with --check")
    if not options.check:
        options.statements = options.statements or 2000
        counts, used = measure(options.statements, python=options.python, pythonpath=options.pythonpath,
                               naive=not options.floors, by_statement=options.by_statement, floors=options.floors)
        python, sqlite = interpreter(options.python)
        print(f"{options.statements} statements, Python {python}, SQLite {sqlite}, {platform.machine()}, "
              f"JSON parser {used}")
        if options.floors:
            print_floors(counts, used)
        else:
            print_counts(counts)
        return 0
    try:
        budgets = load_budgets(BUDGETS)
        here = interpreter(options.python)
        if here != [budgets["python"], budgets["sqlite"]]:
            raise BudgetError(f"The budgets were measured with Python {budgets['python']} and SQLite "
                              f"{budgets['sqlite']}; {options.python} has {' and '.join(here)}.")
    except BudgetError as error:
        print(error, file=sys.stderr)
        return 2
    failed = False
    for parser, steps, table in (("stdlib", STEPS, "steps"), ("orjson", ORJSON_STEPS, "orjson")):
        if parser == "orjson" and not options.pythonpath:
            print("orjson's path not measured: no --pythonpath to import it from.")
            break
        counts, used = measure(budgets["statements"], python=options.python, naive=False,
                               pythonpath=options.pythonpath, parser=parser)
        if used != parser:
            print(f"The workload used the JSON parser {used}, not {parser}: can {parser} be imported from "
                  f"{options.pythonpath}?", file=sys.stderr)
            return 2
        over, lines = check(counts, budgets[table], steps, table)
        failed = failed or over
        print(f"Cost model, {budgets['statements']} statements, JSON parser {used}, instructions per statement:")
        print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
