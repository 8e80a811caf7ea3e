"""lms-refresh: keep an LMS metrics store fresh, safely and unattended."""

__version__ = "0.6.0"
