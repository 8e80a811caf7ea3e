"""Driven by tests/harness/test_scratch.py (an inner pytest, in this order); not collected by the suite itself.
Two tests leave a file in their tmp_path and a database on the tests' PostgreSQL server; one of them fails."""

import os

import pytest

LEFT = {}


def leave(tmp_path, postgres_server, name):
    (tmp_path / "scratch").write_bytes(b"x" * 4096)
    LEFT[name] = postgres_server.new_database()
    with open(os.environ["SCRATCH_PROBE_REPORT"], "a") as report:
        report.write(f"{name} {tmp_path}\n")


def test_passes(tmp_path, postgres_server):
    leave(tmp_path, postgres_server, "passes")


def test_fails(tmp_path, postgres_server):
    leave(tmp_path, postgres_server, "fails")
    pytest.fail("on purpose")


def test_databases_left(postgres_server):
    left = postgres_server.databases()
    assert LEFT["passes"] not in left and LEFT["fails"] in left, (LEFT, left)
