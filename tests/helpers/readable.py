"""The package under test where any account can read it, for tests that run code as another user.

A clone in a private home (tests/fresh-machine.sh clones into /root/lms-refresh, mode 0700) is not
readable by 'nobody': a process that has become it fails at its next lazy import. The installed
package (/usr/lib/python3/dist-packages) is readable by all, as these tests assume; a copy of the
package under test, in a directory open to all, gives them the same ground wherever the tree lies.
"""

import os
import shutil
import sys

import lms_refresh


def readable_package(directory):
    """Copy the lms_refresh package that is under test into `directory`; return (python, pythonpath)
    that run it as any account: Debian's interpreter itself (a virtualenv's may lie in a private
    directory; its system site-packages hold what the tests need) and the copy's directory."""
    target = os.path.join(directory, "readable-code")
    shutil.copytree(os.path.dirname(lms_refresh.__file__), os.path.join(target, "lms_refresh"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for parent, _directories, files in os.walk(target):
        os.chmod(parent, 0o755)
        for name in files:
            os.chmod(os.path.join(parent, name), 0o644)
    os.chmod(directory, 0o755)
    return os.path.realpath(sys.executable), target
