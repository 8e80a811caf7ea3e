"""Stops (issue 12, items 14-15): SIGTERM to the whole process group ends a run within seconds, with
143 before the commit; the pool of parsing workers never hangs on a lock a killed worker held."""

import contextlib
import multiprocessing
import os
import signal
import socket
import subprocess
import threading
import time

from helpers.statements import statement
from lms_refresh import faults
from lms_refresh.sources.pool import stop_pool


def _square(number):
    return number * number


def _pool_waiting_for_tasks(workers, deadline):
    """A pool of `workers` that has run a task, once an idle worker sits on the task queue's read lock."""
    pool = multiprocessing.get_context("fork").Pool(workers)
    assert pool.apply_async(_square, (7,)).get(timeout=30) == 49
    while pool._inqueue._rlock.acquire(False):
        pool._inqueue._rlock.release()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return pool


def test_a_pool_whose_idle_workers_were_killed_still_stops_within_seconds():
    pool = _pool_waiting_for_tasks(3, time.monotonic() + 30)
    workers = list(pool._pool)
    for worker in workers:
        os.kill(worker.pid, signal.SIGKILL)  # one of them dies holding that lock: terminate() alone would hang
    began = time.monotonic()
    stop_pool(pool)
    assert time.monotonic() - began < 6
    assert all(worker.exitcode is not None for worker in workers)


def test_a_pool_whose_worker_died_between_a_tasks_length_and_its_body_still_stops_within_seconds():
    """A worker killed (the stop's SIGTERM to the group) after it read a task's 4-byte length but before
    its body leaves the task queue's lock held and the rest of that task in the pipe. Freeing the lock
    once let terminate() read that rest as a message: EOFError half-way through terminate(), before it
    told the result handler to stop, and a join that waited for ever (seen as a stop that hung)."""
    deadline = time.monotonic() + 30
    pool = _pool_waiting_for_tasks(1, deadline)
    worker = pool._pool[0]
    os.kill(worker.pid, signal.SIGKILL)  # dies holding that lock (the worker started in its place waits for it)
    worker.join(30)
    for _ in range(4):  # more than the pipe holds: the pool's task handler stays busy writing them
        pool.apply_async(len, (bytes(64 << 10),))
    while not pool._inqueue._reader.poll(0.01):
        assert time.monotonic() < deadline
    os.read(pool._inqueue._reader.fileno(), 4)  # a task's length, read by the worker that then died
    stopping = threading.Thread(target=stop_pool, args=(pool,), daemon=True)
    began = time.monotonic()
    stopping.start()
    stopping.join(30)
    assert not stopping.is_alive()
    assert time.monotonic() - began < 6
    assert all(worker.exitcode is not None for worker in pool._pool)


def test_sigterm_to_the_process_group_while_workers_parse_exits_143_promptly(project):
    # Over 16 MiB, so the NDJSON source parses with its pool of worker processes.
    filler = "x" * 900
    project.write("a.ndjson", [dict(statement(learner=f"u{i % 50}"), extensions={"pad": filler}) for i in range(20000)])
    assert (project.source / "a.ndjson").stat().st_size > 16 << 20
    command = project.cli_args("run", now="2026-11-03T04:15:00+01:00")
    environment = dict(project.environment(), **{faults.ENVIRONMENT_VARIABLE: "batch-staged@2:termgroup"})
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment, start_new_session=True)  # its own group, as under systemd
    try:
        # The bound is on the whole run (parsing 18 MiB first) on a loaded 2-core machine: it
        # catches a hang, not slowness; how fast a pool stops is the test above's.
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, err
    assert "Stopped by SIGTERM; the run was rolled back and nothing was committed." in err
    assert project.serving() == []
    assert project.cli("run", now="2026-11-03T04:15:00+01:00").returncode == 0
    assert project.serving()[0][3] == 20000


def test_a_parsing_worker_killed_mid_run_ends_the_run_with_a_sentence_instead_of_a_hang(project):
    """The kernel's out-of-memory killer takes a worker and the task it held: the run must not wait
    for that result for ever (systemd would wait out TimeoutStartSec); it fails with 1, commits
    nothing, and the next run converges."""
    filler = "x" * 900
    project.write("a.ndjson", [dict(statement(learner=f"u{i % 50}"), extensions={"pad": filler}) for i in range(20000)])
    assert (project.source / "a.ndjson").stat().st_size > 16 << 20  # parsed by the pool of workers
    began = time.monotonic()
    result = project.cli("run", now="2026-11-03T04:15:00+01:00", env={faults.ENVIRONMENT_VARIABLE: "chunk-parsed:kill"})
    assert time.monotonic() - began < 60
    assert result.returncode == 1, result.stderr
    assert "A parsing worker (pid " in result.stderr and "ended with signal SIGKILL — for example killed by the " \
        "kernel for lack of memory (see 'journalctl -k') while reading the export files; nothing was committed" \
        in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert project.serving() == []
    stopped = project.cli("run", now="2026-11-03T04:15:00+01:00",
                          env={faults.ENVIRONMENT_VARIABLE: "chunk-parsed:term"})
    assert stopped.returncode == 1, stopped.stderr  # a worker stopped alone: the run did not finish its reading
    assert "ended with signal SIGTERM — sent to it alone, not to the run" in stopped.stderr, stopped.stderr
    assert "lack of memory" not in stopped.stderr and project.serving() == []
    project.cli("run", now="2026-11-03T04:15:00+01:00", check=0)
    assert project.serving()[0][3] == 20000


def test_a_process_forked_from_a_run_dies_by_a_stop_instead_of_raising_the_runs_terminated():
    """A parsing worker the pool starts inherits the run's SIGTERM handler until its initializer
    sets its own; a stop in that gap must end it as the default action would (no Terminated, no
    traceback on the unit's stderr: seen under load when the pool replaced a killed worker)."""
    import os
    import signal

    from lms_refresh.run import stopping

    read, write = os.pipe()
    with stopping.installed():
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            try:
                os.dup2(write, 2)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os._exit(1)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as errors:
        printed = errors.read()
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
    assert printed == ""


# -- commands with nothing to roll back say only that they were stopped ---------------------------------------

def _stopped_while_waiting(project, command, ready, env=None):
    """Run `command`, SIGTERM it once `ready()` says it waits on the outside world; return (exit status, stderr)."""
    process = subprocess.Popen(project.cli_args(*command), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=project.environment(env))
    try:
        ready()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, err


def test_check_stopped_while_it_reaches_the_source_does_not_claim_a_rollback(sqlite_project, tmp_path):
    """check writes nothing and runs no run: it said "the run was rolled back and nothing was committed"."""
    project = sqlite_project
    listener = socket.create_server(("127.0.0.1", 0))  # accepts, never answers: check waits on it
    password = tmp_path / "lrs-password"
    password.write_text("secret\n")
    project.source_settings = {"type": "xapi-lrs", "endpoint": f"http://127.0.0.1:{listener.getsockname()[1]}/xAPI/",
                               "username": "lms", "password_file": str(password)}
    project.configure()
    listener.settimeout(60)
    held = []  # the accepted connection, kept open (unanswered) until check is stopped
    with listener:
        code, err = _stopped_while_waiting(project, ["check"], lambda: held.append(listener.accept()[0]))
        for connection in held:
            connection.close()
    assert code == 143, err
    assert "ERROR Stopped by SIGTERM.\n" in err
    assert "rolled back" not in err and "run" not in err.split("ERROR", 1)[1]


def test_alert_stopped_while_it_mails_does_not_claim_a_rollback(sqlite_project, tmp_path):
    project = sqlite_project
    started = tmp_path / "sendmail-started"
    sendmail = tmp_path / "sendmail"
    sendmail.write_text(f"#!/bin/sh\ncat >/dev/null\ntouch {started}\nsleep 60\n")
    sendmail.chmod(0o755)
    project.config.write_text(project.config.read_text()
                              + f'[alerts]\nmail_to = "ops@example.edu"\nsendmail = "{sendmail}"\n')

    def mailing():
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline, "sendmail was never started"
            time.sleep(0.05)

    code, err = _stopped_while_waiting(project, ["alert", "--exit-status", "1", "--result", "exit-code"], mailing)
    assert code == 143, err
    assert "ERROR Stopped by SIGTERM.\n" in err
    assert "rolled back" not in err


def test_a_workers_death_is_explained_by_its_signal():
    from lms_refresh.sources.pool import _death

    assert "lack of memory" in _death(-signal.SIGKILL)
    assert "the worker crashed" in _death(-signal.SIGSEGV) and "sent to it" not in _death(-signal.SIGSEGV)
    assert "the worker crashed" in _death(-signal.SIGABRT)
    assert "sent to it alone, not to the run" in _death(-signal.SIGTERM)
    assert _death(3) == "status 3"


def test_parsing_workers_end_quietly_with_a_run_killed_alone(project):
    """A run killed by SIGKILL, alone (an operator's `kill -9` of its PID, the out-of-memory killer choosing
    it): its parsing workers must not go on reading export files for nobody, nor print a traceback each on
    the unit's stderr when they find the run gone. They end with it (the kernel's parent-death signal)."""
    filler = "x" * 900
    project.write("a.ndjson", [dict(statement(learner=f"u{i % 50}"), extensions={"pad": filler}) for i in range(20000)])
    assert (project.source / "a.ndjson").stat().st_size > 16 << 20  # parsed by the pool of workers
    command = project.cli_args("run", now="2026-11-03T04:15:00+01:00")
    environment = dict(project.environment(), **{faults.ENVIRONMENT_VARIABLE: "batch-staged@2:kill"})
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment, start_new_session=True)
    try:
        # The workers inherited the pipes: communicate() returns once the last of them has ended.
        out, err = process.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL, err
    assert "Traceback" not in err and "Error" not in err, err
    assert project.serving() == []
    project.cli("run", now="2026-11-03T04:15:00+01:00", check=0)
    assert project.serving()[0][3] == 20000


def test_a_stop_delivered_to_another_thread_is_still_held_back_until_the_block_ends():
    """SIGTERM blocked in the main thread reaches any other thread that does not block it (a pool's threads
    left behind by a pool that would not stop), and Python runs the handler in the main thread all the same:
    inside the commit, had it not waited for the block's end."""
    import pytest

    from lms_refresh.errors import Terminated
    from lms_refresh.run import stopping

    other_ends = threading.Event()
    other = threading.Thread(target=other_ends.wait, daemon=True)  # SIGTERM not blocked there
    other.start()
    finished = []
    try:
        with stopping.installed() as policy, pytest.raises(Terminated, match="Stopped by SIGTERM"):
            with stopping.held_back():
                os.kill(os.getpid(), signal.SIGTERM)
                deadline = time.monotonic() + 1
                while time.monotonic() < deadline:
                    pass  # bytecodes run: the handler runs here, at the first that checks for it
                finished.append(True)
    finally:
        other_ends.set()
    assert finished == [True] and policy.requested
