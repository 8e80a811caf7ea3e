"""Benchmark: what counting the enrolled learners adds to a nightly run from Moodle.

    python bench/enrolment_bench.py [--learners 50000] [--courses 2000] [--per-learner 5] [--daily-rows 100000]
                                    [--days 7] [--rounds 3]

Starts a throwaway durable PostgreSQL (tests/helpers/pgserver.py) holding Moodle's log and enrolment tables as its
installer types them (tests/helpers/moodledb.py): `--days` days of log (`--daily-rows` a day, over the learners and
courses) and `--per-learner` student enrolments of each learner in a term that began 30 days before the log (a
twentieth suspended, a tenth ending with the term, the rest open-ended), and a teacher enrolled in every course.
Two projects read the same database, one as a role that may read the enrolment tables and one that may read only
the log and the courses (its runs warn, and count no enrolled learner). After a first run of each (untimed but
printed), one more day of log is written and the nightly run is timed, `--rounds` times from the same saved state,
alternated, and the script prints each run's seconds and peak RSS (wait4), the medians and what the enrolments add
(the issue's target: at most 10%). Run as root (the server runs as its system user).
"""

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from helpers import moodledb
from helpers.pgserver import PostgresServer
from refresh_bench import timed_run

START = 1_790_000_000  # 2026-09-21, a Monday
SITE = "https://moodle.example.edu"
PASSWORD = moodledb.READER_PASSWORD
COLUMNS = ("eventname, component, action, target, crud, edulevel, contextid, contextlevel, contextinstanceid, "
           "userid, courseid, relateduserid, anonymous, other, timecreated, origin, ip")


def log_rows(first, count, day, learners, courses):
    """INSERT ... SELECT of `count` log rows numbered from `first`, on day `day` (0: the first), over the learners
    (ids 1000..) and courses (ids 2..): course views, page views and quiz attempts."""
    kind = "n % 10"
    user = f"(n * 7919) % {learners} + 1000"
    course = f"((n * 7919) % {learners} * 5 + n % 5) % {courses} + 2"
    return (f"INSERT INTO mdl_logstore_standard_log ({COLUMNS}) "
            f"SELECT CASE WHEN {kind} < 5 THEN '\\core\\event\\course_viewed' "
            f"WHEN {kind} < 9 THEN '\\mod_page\\event\\course_module_viewed' "
            "ELSE '\\mod_quiz\\event\\attempt_submitted' END, 'core', 'viewed', 'course', 'r', 2, 100, 50, "
            f"{course}, {user}, {course}, CASE WHEN {kind} = 9 THEN {user} END, 0, '{{}}', "
            f"{START + day * 86400} + (n - {first}) * 86000 / {count}, 'web', '192.0.2.1' "
            f"FROM generate_series({first}::bigint, {first + count - 1}) AS numbers(n)")


def load(server, options):
    """A Moodle database with the log's first `--days` days and the enrolments; return its name."""
    database = server.new_database()
    server.admin(moodledb.MOODLE_DDL + moodledb.GRADE_ITEMS_DDL + moodledb.COURSE_DDL + moodledb.ENROLMENT_DDL,
                 database)
    learners, courses, per = options.learners, options.courses, options.per_learner
    for day in range(options.days):
        server.admin(log_rows(day * options.daily_rows + 1, options.daily_rows, day, learners, courses), database)
    term_start, term_end = START - 30 * 86400, START + 120 * 86400
    server.admin(f"""
INSERT INTO mdl_enrol (enrol, status, courseid, roleid)
  SELECT 'manual', 0, c, 5 FROM generate_series(2, {courses + 1}) c;
INSERT INTO mdl_context (contextlevel, instanceid, depth) SELECT 50, c, 3 FROM generate_series(2, {courses + 1}) c;
INSERT INTO mdl_user_enrolments (status, enrolid, userid, timestart, timeend)
  SELECT CASE WHEN u % 20 = 0 THEN 1 ELSE 0 END, e.id, u, {term_start} + (u % 7) * 86400,
         CASE WHEN u % 10 = 1 THEN {term_end} ELSE 0 END
  FROM generate_series(1000, {learners + 999}) u CROSS JOIN generate_series(0, {per - 1}) j
  JOIN mdl_enrol e ON e.courseid = ((u - 1000) * 5 + j * 729) % {courses} + 2;
INSERT INTO mdl_role_assignments (roleid, contextid, userid)
  SELECT 5, x.id, ue.userid FROM mdl_user_enrolments ue JOIN mdl_enrol e ON e.id = ue.enrolid
  JOIN mdl_context x ON x.contextlevel = 50 AND x.instanceid = e.courseid;
INSERT INTO mdl_user_enrolments (enrolid, userid, timestart, timeend) SELECT e.id, 900, 0, 0 FROM mdl_enrol e;
INSERT INTO mdl_role_assignments (roleid, contextid, userid) SELECT 3, x.id, 900 FROM mdl_context x""", database)
    server.admin("VACUUM ANALYZE", database)
    return database


def readers(server, database):
    """Two roles: one with every grant docs/sources/moodle.md lists, one without the enrolment tables."""
    names = {"with": "bench_enrolled", "without": "bench_log_only"}
    for kind, name in names.items():
        server.admin(f"CREATE ROLE {name} LOGIN PASSWORD '{PASSWORD}'")
        tables = moodledb.READER_TABLES if kind == "with" else moodledb.READER_TABLES[:4]
        server.admin(f"GRANT SELECT ON {', '.join(tables)} TO {name}", database)
    return {kind: f"postgresql://{name}@127.0.0.1:{server.port}/{database}" for kind, name in names.items()}


def project(root, url, password_file):
    os.makedirs(root)
    config = os.path.join(root, "config.toml")
    with open(config, "w") as handle:
        handle.write(f'timezone = "Europe/Paris"\nstate_directory = "{root}/state"\n[window]\nbootstrap_days = 30\n'
                     f'safety_lag = "0s"\n[source]\ntype = "moodle"\nurl = "{url}"\npassword_file = "{password_file}"\n'
                     f'site_url = "{SITE}"\n')
    return config


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=50_000)
    parser.add_argument("--courses", type=int, default=2_000)
    parser.add_argument("--per-learner", type=int, default=5)
    parser.add_argument("--daily-rows", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="lmsr-enrolment-bench-")
    password_file = os.path.join(work, "moodle-password")
    with open(password_file, "w") as handle:
        handle.write(PASSWORD + "\n")
    os.chmod(password_file, 0o644)
    server = PostgresServer(durable=True)
    try:
        database = load(server, options)
        enrolments = server.admin("SELECT COUNT(*) FROM mdl_user_enrolments", database)[0][0]
        print(f"Moodle: {options.days} days of {options.daily_rows:,} log rows, {enrolments:,} enrolments of "
              f"{options.learners:,} learners (and a teacher) in {options.courses:,} courses", flush=True)
        urls, roots = readers(server, database), {}
        first = dt.datetime.fromtimestamp(START + options.days * 86400 + 4 * 3600, dt.UTC)
        for kind, url in urls.items():
            roots[kind] = os.path.join(work, kind)
            seconds, rss, _ = timed_run(project(roots[kind], url, password_file), first, "run")
            print(f"first run, {kind:7} enrolments: {seconds:6.1f} s, peak RSS {rss:.0f} MiB", flush=True)
            shutil.copytree(roots[kind], roots[kind] + ".saved")
        day = options.days
        server.admin(log_rows(day * options.daily_rows + 1, options.daily_rows, day, options.learners,
                              options.courses), database)
        nightly = first + dt.timedelta(days=1)
        times = {kind: [] for kind in urls}
        for number in range(options.rounds):
            for kind in urls:
                shutil.rmtree(roots[kind])
                shutil.copytree(roots[kind] + ".saved", roots[kind])
                seconds, rss, _ = timed_run(os.path.join(roots[kind], "config.toml"), nightly, "run")
                times[kind].append(seconds)
                print(f"nightly run, {kind:7} enrolments, round {number + 1}: {seconds:6.2f} s, peak RSS {rss:.0f} MiB",
                      flush=True)
        medians = {kind: statistics.median(values) for kind, values in times.items()}
        print(f"median nightly run: {medians['without']:.2f} s without, {medians['with']:.2f} s with the enrolments: "
              f"+{(medians['with'] / medians['without'] - 1) * 100:.1f}% (target <= 10%)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
