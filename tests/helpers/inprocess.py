"""The CLI run inside the test process with click's CliRunner: `lms_refresh.cli.main(argv)`, its exit
status, stdout and stderr, as a subprocess would give them, at a fraction of the cost.

For every behaviour that is not about processes. Signals, locks held by another
process, `env -i`, other users and systemd stay subprocesses (`Project.cli`).

What a process would reset and this one must not leak from one run to the next
is restored and checked after each run: the root logger (the CLI configures it
and removes pytest's handlers), the SIGTERM handler (lms_refresh.run.stopping
installs its own), the SIGALRM handler and timer (the LRS source's response
deadline), the armed fault (lms_refresh.faults), the environment (exactly
`environment` during the run, the test's own after it), the working directory
and the umask.
"""

import logging
import os
import signal
import subprocess
import sys
import threading

from click.testing import CliRunner

from lms_refresh import cli, credentials, faults

# Faults that signal the process would signal pytest itself: they need a subprocess.
SIGNALLING_ACTIONS = ("kill", "term", "termgroup")


def _runner():
    try:
        return CliRunner(mix_stderr=False)  # click 8.1 (Debian 12) mixes stderr into stdout by default
    except TypeError:
        return CliRunner()  # click 8.2 (Debian 13) always keeps them apart


def _umask():
    current = os.umask(0o022)
    os.umask(current)
    return current


def invoke(argv, environment):
    """Run the CLI with `argv` and exactly `environment` as os.environ; return a CompletedProcess."""
    fault = environment.get(faults.ENVIRONMENT_VARIABLE, "")
    if fault.rpartition(":")[2] in SIGNALLING_ACTIONS:
        raise ValueError(f"{faults.ENVIRONMENT_VARIABLE}={fault} signals the process: run it as a subprocess")
    if threading.current_thread() is not threading.main_thread():
        # execnet can hand a pytest-xdist worker's tests to a thread other than the main one (seen once, on every
        # test of one worker), and only the main thread may install the signal handlers the entry point installs:
        # there the CLI runs as the subprocess it stands for.
        result = subprocess.run([sys.executable, "-m", "lms_refresh", *argv], capture_output=True, text=True,
                                env=environment, timeout=300)
        return subprocess.CompletedProcess(["lms-refresh"] + list(argv), result.returncode, result.stdout,
                                           result.stderr)
    changes = {key: None for key in os.environ if key not in environment}
    changes.update(environment)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    sigterm, sigalrm = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGALRM)
    cwd, umask = os.getcwd(), _umask()
    exited, code = False, None
    with _runner().isolation(env=changes) as streams:
        try:
            cli.main(list(argv))
        except SystemExit as stop:
            exited, code = True, stop.code
        finally:
            # The entry point leaves SIGTERM ignored for the moments its process has left before it exits (the
            # command's status stands: run/stopping.installed); this process goes on, so it is put back, whatever
            # happened.
            left_sigterm = signal.signal(signal.SIGTERM, sigterm)
            ours = [handler for handler in root.handlers if handler not in handlers]
            root.handlers[:] = handlers
            root.setLevel(level)
            for handler in ours:
                handler.close()
            faults.arm({})  # a fault armed for this run must not fire in the test's own calls afterwards
            # The credentials a process read are redacted from all it shows until it exits; this "process"
            # ends here, so the next invocation must not inherit them (a test's password "weak" would
            # be redacted from every later test's messages).
            credentials._READ.clear()
        stdout, stderr = (stream.getvalue().decode("utf-8", "replace") for stream in streams[:2])
    assert exited, "lms_refresh.cli.main returned instead of exiting"
    assert left_sigterm is signal.SIG_IGN, "the CLI left SIGTERM other than ignored"
    assert signal.getsignal(signal.SIGALRM) is sigalrm and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0), \
        "the CLI left its SIGALRM handler installed or a timer running"
    assert os.getcwd() == cwd and _umask() == umask, "the CLI changed the working directory or the umask"
    code = 0 if code is None else code if isinstance(code, int) else 1
    return subprocess.CompletedProcess(["lms-refresh"] + list(argv), code, stdout, stderr)
