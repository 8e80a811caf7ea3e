"""Written by lms-refresh: show IRIs and URLs of the lms-refresh publication as plain text, never as links."""

import markupsafe
from datasette import hookimpl


@hookimpl
def render_cell(value):
    if isinstance(value, str) and value.strip().startswith(("http://", "https://")):
        return markupsafe.escape(value)
    return None
