"""No file writer changes a file's owner or group: the service's unit forbids chown and fchown
(SystemCallFilter=~@privileged) and maps no group but its own (PrivateUsers=yes), so such a call works at a
terminal and fails under the unit (the report's fchown did, on every run). See lms_refresh/atomic.py."""

import ast
import os

import lms_refresh

PACKAGE = os.path.dirname(lms_refresh.__file__)
FORBIDDEN = {"chown", "fchown", "lchown"}


def test_no_module_calls_chown_fchown_or_lchown():
    found = []
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            tree = ast.parse(open(path, encoding="utf-8").read())
            for node in ast.walk(tree):
                called = node.attr if isinstance(node, ast.Attribute) else (
                    node.id if isinstance(node, ast.Name) else None)
                if called in FORBIDDEN:
                    found.append(f"{os.path.relpath(path, PACKAGE)}:{node.lineno} {called}")
    assert found == [], found
