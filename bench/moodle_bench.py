"""Benchmark: one full refresh of a Moodle log from MariaDB and from PostgreSQL, side by side.

    python bench/moodle_bench.py [--rows 1000000] [--rounds 2]

Starts a throwaway PostgreSQL (tests/helpers/pgserver.py) and MariaDB (tests/helpers/mariadbserver.py), both
durable (fsync on), loads the same `--rows` log rows into Moodle's table on each (typed as Moodle's installer
types them there: tests/helpers/moodledb.py, moodle_mariadb.py), spread over 30 days, 200 courses and 20,000
learners, then times `lms-refresh run` (a first run, SQLite store, default batch_size and id_lookback) on each,
alternated, `--rounds` times, and prints each run's seconds and peak RSS (wait4), the medians and the ratio
MariaDB / PostgreSQL (issue target: at most 1.25). Run as root (the servers run as their system users).
"""

import argparse
import datetime as dt
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from helpers import moodle_mariadb, moodledb
from helpers.mariadbserver import MariaDBServer
from helpers.pgserver import PostgresServer
from refresh_bench import timed_run

START = 1_790_000_000  # 2026-09-21, a Monday
DAYS = 30
SITE = "https://moodle.example.edu"
READER, PASSWORD = moodledb.READER, moodledb.READER_PASSWORD


def row_select(count, numbers):
    """The SELECT of `count` log rows over `numbers` (a relation of n = 1..count), the same on both databases:
    course views, page views, quiz attempts and teachers' edits in a fixed mix."""
    kind = "n % 10"
    return (
        f"SELECT CASE WHEN {kind} < 5 THEN '\\\\core\\\\event\\\\course_viewed' "
        f"WHEN {kind} < 8 THEN '\\\\mod_page\\\\event\\\\course_module_viewed' "
        f"WHEN {kind} < 9 THEN '\\\\mod_quiz\\\\event\\\\attempt_submitted' "
        "ELSE '\\\\core\\\\event\\\\course_module_created' END, 'core', 'viewed', 'course', 'r', "
        f"CASE WHEN {kind} < 9 THEN 2 ELSE 1 END, 100, 50, n % 200 + 2, (n * 7919) % 20000 + 1000, n % 200 + 2, "
        f"CASE WHEN {kind} = 8 THEN (n * 7919) % 20000 + 1000 END, 0, '{{\"attempt\":1}}', "
        f"{START} + FLOOR((n * {DAYS * 86400}) / {count}), 'web', '192.0.2.1' FROM {numbers}"
    )


COLUMNS = ("eventname, component, action, target, crud, edulevel, contextid, contextlevel, contextinstanceid, "
           "userid, courseid, relateduserid, anonymous, other, timecreated, origin, ip")


def load_postgresql(server, count):
    database = server.new_database()
    server.admin(moodledb.MOODLE_DDL + moodledb.GRADE_ITEMS_DDL + moodledb.COURSE_DDL + moodledb.ENROLMENT_DDL,
                 database)
    select = row_select(count, f"generate_series(1::bigint, {count}) AS numbers(n)").replace("\\\\", "\\")
    server.admin(f"INSERT INTO mdl_logstore_standard_log ({COLUMNS}) {select}", database)
    server.admin("VACUUM ANALYZE mdl_logstore_standard_log", database)
    server.admin(f"CREATE ROLE {READER} LOGIN PASSWORD '{PASSWORD}'")
    server.admin(f"GRANT SELECT ON {', '.join(moodledb.READER_TABLES)} TO {READER}", database)  # as MariaDB's
    return f"postgresql://{READER}@127.0.0.1:{server.port}/{database}"


def load_mariadb(server, count):
    moodle_mariadb.create_reader(server)
    moodle = moodle_mariadb.MariaDBMoodle(server)
    numbers = f"(SELECT seq AS n FROM seq_1_to_{count}) AS numbers"
    moodle.sql(f"INSERT INTO mdl_logstore_standard_log ({COLUMNS}) {row_select(count, numbers)}")
    moodle.sql("ANALYZE TABLE mdl_logstore_standard_log")
    return moodle.url


def project(root, url, password_file):
    os.makedirs(root)
    config = os.path.join(root, "config.toml")
    with open(config, "w") as handle:
        handle.write(f'timezone = "Europe/Paris"\nstate_directory = "{root}/state"\n[window]\n'
                     f'bootstrap_days = {DAYS + 5}\nsafety_lag = "0s"\n[source]\ntype = "moodle"\nurl = "{url}"\n'
                     f'password_file = "{password_file}"\nsite_url = "{SITE}"\n'
                     # Exact counts: each run has its own key, so noise would differ between the two publications.
                     '[privacy]\nmethod = "none"\n')
    return config


def published(config):
    """The publication's daily rows of a project (its config's path), to see both databases gave the same."""
    path = os.path.join(os.path.dirname(config), "state-publication", "serving.sqlite")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT * FROM daily_metrics ORDER BY day, course").fetchall()
    finally:
        db.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="lmsr-moodle-bench-")
    password_file = os.path.join(work, "moodle-password")
    with open(password_file, "w") as handle:
        handle.write(PASSWORD + "\n")
    os.chmod(password_file, 0o644)
    postgres, mariadb = PostgresServer(durable=True), MariaDBServer(durable=True)
    try:
        urls = {"postgresql": load_postgresql(postgres, options.rows), "mariadb": load_mariadb(mariadb, options.rows)}
        now = dt.datetime.fromtimestamp(START + (DAYS + 1) * 86400, dt.UTC)
        times, rows = {kind: [] for kind in urls}, {}
        for number in range(options.rounds):
            for kind, url in urls.items():
                config = project(os.path.join(work, f"{kind}-{number}"), url, password_file)
                seconds, rss, _ = timed_run(config, now, "run")
                times[kind].append(seconds)
                rows[kind] = published(config)
                print(f"{kind:10} round {number + 1}: {options.rows:,} rows in {seconds:6.1f} s "
                      f"({options.rows / seconds:,.0f} rows/s), peak RSS {rss:.0f} MiB", flush=True)
        print(f"the same publication from both: {rows['postgresql'] == rows['mariadb']} "
              f"({len(rows['mariadb']):,} daily rows)")
        medians = {kind: statistics.median(values) for kind, values in times.items()}
        print(f"median: PostgreSQL {medians['postgresql']:.1f} s, MariaDB {medians['mariadb']:.1f} s; "
              f"MariaDB / PostgreSQL = {medians['mariadb'] / medians['postgresql']:.2f} (target <= 1.25)")
    finally:
        postgres.stop()
        mariadb.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
