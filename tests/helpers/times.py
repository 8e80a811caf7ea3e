"""Times written as ISO 8601 text in the tests, as aware UTC datetimes."""

import datetime as dt


def t(text):
    return dt.datetime.fromisoformat(text).astimezone(dt.UTC)
