"""Where the repository is: the directory above tests/ (under debian/tests/suite, the copy it runs in)."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
