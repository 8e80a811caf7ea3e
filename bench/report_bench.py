"""The HTML report for 500 courses and a year of weeks: its size and render time (issue 22, part 6; the dashboard).

    python3 bench/report_bench.py [--courses 500] [--weeks 52]
    python3 bench/report_bench.py --courses 9000 --weeks 12 --hostile   # names of 200 '"', IRIs ending in '&'

With --hostile, every course is named with 200 '"' and its IRI ends in 180 '&' (each escaped to six and five
characters), and the report is also written once by a process of its own whose peak RSS (wait4) is printed: the
page must not be held whole in memory (the README promises 200 MiB for a run).

Writes a publication with the real writer (run/publication.py): every course has a name and a row per
week (one in ten of them withheld), per month, per term (two) and per day of the last five weeks, the whole site
the same; then renders the report from that file (run/report_page.py, reading the publication as a run does):
the overview, every course's page and every table's CSV. Prints the overview's and the course pages' sizes, the
time of the first write (every page), of a nightly rewrite with nothing changed, and with 10 courses changed.
"""

import argparse
import datetime as dt
import os
import random
import subprocess
import sys
import tempfile
import time

from lms_refresh.disclosure.policy import PrivacySettings
from lms_refresh.run import report_page
from lms_refresh.run.publication import write_publication


def _week(index):
    monday = dt.date(2025, 12, 29) + dt.timedelta(weeks=index)
    year, week, _ = monday.isocalendar()
    return f"{year}-W{week:02d}", monday.isoformat(), (monday + dt.timedelta(days=6)).isoformat()


def _month(index):
    first = dt.date(2026, 1 + index, 1)
    last = (first.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)
    return first.strftime("%Y-%m"), first.isoformat(), last.isoformat()


_TERMS = (("2026 spring", "2026-01-05", "2026-06-30"), ("2026 autumn", "2026-09-01", "2026-12-20"))


def _metrics(rng, scale, withheld=0.1):
    if rng.random() < withheld:
        return (*(None,) * 8, 1)
    learners = rng.randint(10, 400) * scale
    return (learners, learners * 20, learners, learners // 3, learners // 4, learners // 12, 0.7, 3600.0, 0)


def _learners(values):
    """The learner outcome columns after a row's others: a learner per completion, pass and fail statement."""
    if values[0] is None:
        return (None,) * 5
    learners, completed, passed, failed = values[0], values[3], values[4], values[5]
    return (completed, passed, failed, completed / learners, passed / (passed + failed) if passed + failed else None)


def _row(key, values, *complete):
    return (*key, *values, *complete, *_learners(values), None, None)  # no enrolments (an xAPI site)


def build(path, courses, weeks, seed=7, hostile=False, changed=0):
    """Write the publication; `changed` courses (the first ones) get other numbers, as a nightly run's would."""
    rng = random.Random(seed)
    rows, names, months, terms, days = [], [], [], [], []
    for number in range(courses):
        course = f"https://moodle.example.edu/course/view.php?id={number + 2}"
        name = f"Course {number + 2}: Introduction to a subject with a long name"
        if hostile:
            course, name = f"{course}&" + "&" * 180, '"' * 196 + f"{number:04d}"
        names.append((course, name, f"C{number}", "Faculty", None, None))
        scale = 2 if number < changed else 1
        for index in range(weeks):
            rows.append(_row((*_week(index), course), _metrics(rng, scale), 1))
        for index in range(12):
            months.append(_row((*_month(index), course), _metrics(rng, scale), 1))
        for term in _TERMS:
            terms.append(_row((*term, course), _metrics(rng, scale, 0.02), 1))
        for index in range(35):
            day = (dt.date(2026, 11, 30) - dt.timedelta(days=index)).isoformat()
            days.append(_row((day, course), _metrics(rng, scale, 0.3)))
    site = (20_000, 400_000, 20_000, 5000, 4000, 1000, 0.7, 1e6, 0)
    rows += [_row((*_week(index), None), site, 1) for index in range(weeks)]
    months += [_row((*_month(index), None), site, 1) for index in range(12)]
    terms += [_row((*term, None), site, 1) for term in _TERMS]
    settings = PrivacySettings(min_cell_size=10, method="cell-key", max_noise=3, variance=2.0)
    write_publication(path, None, (days, {"weekly_metrics": rows, "monthly_metrics": months, "term_metrics": terms}),
                      settings=settings, wanted="bench", euid=os.geteuid(), courses=names)


def _size(directory):
    return sum(entry.stat().st_size for entry in os.scandir(directory) if entry.is_file())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--courses", type=int, default=500)
    parser.add_argument("--weeks", type=int, default=52)
    parser.add_argument("--hostile", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        publication = os.path.join(directory, "serving.sqlite")
        output = os.path.join(directory, "report.html")
        build(publication, options.courses, options.weeks, hostile=options.hostile)
        freshness = {"last_success": "2026-12-02T04:15:00Z", "watermark": "2026-12-02T04:10:00Z", "stale": None,
                     "written": "2026-12-02T04:16:00Z"}
        freshness["timezone"] = "Europe/Paris"
        files = report_page.files_directory(output)

        def timed():
            """(wall, CPU) seconds of one write: on a loaded machine the CPU time is what the report costs."""
            began, cpu = time.perf_counter(), time.process_time()
            report_page.write_report(publication, output, freshness, today="2026-12-02")
            return time.perf_counter() - began, time.process_time() - cpu

        first = timed()  # every page written
        unchanged = sorted(timed() for _ in range(3))[1]  # a nightly run with nothing changed: the median of 3
        build(publication, options.courses, options.weeks, hostile=options.hostile, changed=10)
        ten = timed()
        overview, pages = os.path.getsize(output), _size(files)
        count = sum(1 for name in os.listdir(files) if name.endswith(".html"))
        print(f"{options.courses} courses x {options.weeks} weeks (+ 12 months, 2 terms, 35 days): publication "
              f"{os.path.getsize(publication):,} bytes")
        print(f"overview {overview:,} bytes; {count} course pages and every CSV {pages:,} bytes; total "
              f"{(overview + pages) / 2**20:.1f} MiB")
        print("render and write, wall (CPU) ms: every page {:.0f} ({:.0f}); nothing changed {:.0f} ({:.0f}); 10 "
              "courses changed {:.0f} ({:.0f}); load average {:.1f}".format(
                  *(value * 1000 for value in (*first, *unchanged, *ten)), os.getloadavg()[0]))
        if options.hostile:
            # The child's own high-water mark (VmHWM): wait4's would count this process's pages before the exec.
            peak = "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')))"
            code = ("import sys; from lms_refresh.run import report_page; report_page.write_report(sys.argv[1], "
                    "sys.argv[2], {'last_success': None, 'watermark': None, 'stale': None, 'written': 'now'}, "
                    "today='2026-12-02'); ")
            for label, argv in (("python and imports alone", ["-c", "import lms_refresh.run.report_page; " + peak]),
                                ("the report written", ["-c", code + peak, publication, output])):
                kib = subprocess.run([sys.executable, *argv], check=True, capture_output=True, text=True).stdout
                print(f"peak RSS, {label}: {int(kib) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
