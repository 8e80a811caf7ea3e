"""`lms-refresh demo`: sample data → one real refresh into SQLite → a table of the metrics (demo/command.py).

Only the limits of its options live here: every command's module imports them (they are the CLI's option
ranges), and `lms_refresh.demo.command` brings in the whole refresh, which only `demo` needs.
"""

from lms_refresh.config.schema import SCHEMA

# The first run reads back the sample's days plus a week, so that today and late arrivals are in it.
READ_BACK_MARGIN = 7
# What --days and --learners accept, checked before anything is generated: --days so that the demo's own
# bootstrap_days stays within what the configuration accepts (one declaration, in SCHEMA); --learners so
# that the sample stays a demo (about 500 statements a day per 1,000 learners).
DAYS = (1, SCHEMA["window"]["bootstrap_days"].check.high - READ_BACK_MARGIN)
LEARNERS = (1, 100_000)
