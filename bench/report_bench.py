"""The HTML report for 500 courses and a year of weeks: its size and render time (issue 22, part 6).

    python3 bench/report_bench.py [--courses 500] [--weeks 52]
    python3 bench/report_bench.py --courses 9000 --weeks 12 --hostile   # names of 200 '"', IRIs ending in '&'

With --hostile, every course is named with 200 '"' and its IRI ends in 180 '&' (each escaped to six and five
characters), and the report is also written once by a process of its own whose peak RSS (wait4) is printed: the
page must not be held whole in memory (the README promises 200 MiB for a run).

Writes a publication with the real writer (run/publication.py): every course has a name and a row per
week (one in ten of them withheld), the whole site a row per week; then renders the report from that
file (run/report_page.py, reading the publication as a run does) and prints the page's size and the
best render time of five.
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


def build(path, courses, weeks, seed=7, hostile=False):
    rng = random.Random(seed)
    rows, names = [], []
    for number in range(courses):
        course = f"https://moodle.example.edu/course/view.php?id={number + 2}"
        name = f"Course {number + 2}: Introduction to a subject with a long name"
        if hostile:
            course, name = f"{course}&" + "&" * 180, '"' * 196 + f"{number:04d}"
        names.append((course, name, f"C{number}", "Faculty", None, None))
        for index in range(weeks):
            label, first, last = _week(index)
            if rng.random() < 0.1:
                rows.append((label, first, last, course, *(None,) * 8, 1, 1))
            else:
                learners = rng.randint(10, 400)
                rows.append((label, first, last, course, learners, learners * 20, learners, learners // 3,
                             learners // 4, learners // 12, 0.7, 3600.0, 0, 1))
    for index in range(weeks):
        label, first, last = _week(index)
        rows.append((label, first, last, None, 20_000, 400_000, 20_000, 5000, 4000, 1000, 0.7, 1e6, 0, 1))
    settings = PrivacySettings(min_cell_size=10, method="cell-key", max_noise=3, variance=2.0)
    write_publication(path, None, ([], {"weekly_metrics": rows, "monthly_metrics": []}), settings=settings,
                      wanted="bench", euid=os.geteuid(), courses=names)


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
        times = []
        for _ in range(5):
            began = time.perf_counter()
            report_page.write_report(publication, output, freshness, today="2026-12-02")
            times.append(time.perf_counter() - began)
        print(f"{options.courses} courses x {options.weeks} weeks: publication {os.path.getsize(publication):,} "
              f"bytes; report {os.path.getsize(output):,} bytes; render and write {min(times) * 1000:.0f} ms "
              f"(best of 5, median {sorted(times)[2] * 1000:.0f} ms)")
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
