"""The installed CLI as a command: its path, a copy another user can run, and a run's peak memory."""

import os
import shutil
import subprocess
import sys
import tempfile


def cli_command():
    """The installed console script next to this interpreter, else `python -m lms_refresh`."""
    script = os.path.join(os.path.dirname(sys.executable), "lms-refresh")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "lms_refresh"]


def reachable_cli(directory):
    """The CLI as a command that another user can run: a clone under /root (0700) is out of its reach.

    Copies the package into `directory` (which that user can traverse) and runs it with the real
    interpreter behind this one (a virtualenv's python is a symlink inside the clone).
    """
    import lms_refresh

    code = directory / "code"
    shutil.copytree(os.path.dirname(lms_refresh.__file__), code / "lms_refresh",
                    ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    return ["env", f"PYTHONPATH={code}", "PYTHONDONTWRITEBYTECODE=1",
            os.path.realpath(sys.executable), "-m", "lms_refresh"]


# Runs a command as the grandchild of a small interpreter and reports its peak RSS. Measured from
# the test process directly, a child's ru_maxrss starts at the RSS the test process had when it
# forked (Linux keeps the larger high-water mark across exec), which says nothing of the command.
_PEAK_RSS = """\
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)  # the child's peak, and its reaped children's (the parsing workers)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_for_peak_rss(command, environment):
    """Run `command`; return (exit code, stderr, peak RSS in MiB of it and of its children)."""
    with tempfile.TemporaryDirectory() as scratch:
        figure = os.path.join(scratch, "maxrss")
        result = subprocess.run([sys.executable, "-c", _PEAK_RSS, figure] + list(command),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment)
        with open(figure) as handle:
            return result.returncode, result.stderr.decode(), int(handle.read()) / 1024
