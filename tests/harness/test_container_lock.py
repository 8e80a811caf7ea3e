"""The booted-container lock (tests/helpers/container.py): one booted container on the machine at a time, across
processes that share no file system (the host and a fresh root), released when its holder dies."""

import subprocess
import sys
import time
import uuid

from helpers import container
from helpers.paths import REPO

NAME = f"\0lms-refresh-tests-lock-test-{uuid.uuid4().hex}"  # not the lock a system tier may hold meanwhile

HOLD = """
import sys, time
sys.path.insert(0, {tests!r})
from helpers import container
container.acquire_machine_lock(wait={wait}, name={name!r})
print("held", flush=True)
time.sleep({hold})
"""


def holder(hold, wait=60):
    code = HOLD.format(tests=f"{REPO}/tests", wait=wait, hold=hold, name=NAME)
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "held\n"
    return process


def test_a_second_process_waits_until_the_holder_ends_even_when_it_is_killed():
    first = holder(hold=600)
    try:
        started = time.monotonic()
        second = subprocess.run([sys.executable, "-c", HOLD.format(tests=f"{REPO}/tests", wait=1, hold=0, name=NAME)],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1 and "held the booted-container lock for 1 s" in second.stderr, second
        assert time.monotonic() - started >= 1
        first.kill()  # no release: the kernel drops the socket with its holder
        first.wait()
        third = holder(hold=0)
        assert third.wait(timeout=60) == 0
    finally:
        first.kill()
        first.wait()


def test_the_lock_is_reentrant_within_a_process_and_released_by_its_last_holder():
    container.acquire_machine_lock(name=NAME)
    try:
        container.acquire_machine_lock(name=NAME)  # a second container of the same session: no self-deadlock
        container.release_machine_lock()
        other = subprocess.run([sys.executable, "-c", HOLD.format(tests=f"{REPO}/tests", wait=1, hold=0, name=NAME)],
                               capture_output=True, text=True, timeout=60)
        assert other.returncode == 1, other  # still held by the outer acquisition
    finally:
        container.release_machine_lock()
    assert holder(hold=0).wait(timeout=60) == 0
