"""`check`: validate the configuration and reach the state directory, the source and the store,
writing nothing — what a run would meet, before it meets it."""

import dataclasses
import os

from lms_refresh.disclosure import weakening
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.errors import StateError
from lms_refresh.config.paths import named_paths, refuse_collisions
from lms_refresh.sources import OK, Finding, build_source
from lms_refresh.state_directory import user_name
from lms_refresh.store import open_store, store_exists


def preflight(config, euid, environ):
    """Check configuration, state directory, source and store without writing; return Findings.

    Raises the RefreshError of the first check that fails.
    """
    findings = [Finding(OK, f"configuration {config.origin}: valid")]
    refuse_collisions(config)
    written = [named for named in named_paths(config) if named.written and not named.directory]
    findings.append(Finding(OK, f"paths: the {len(written)} files a run writes are distinct from each other and "
                                "from the files it reads"))
    directory = config.state_directory
    if os.path.isdir(directory):
        if not os.access(directory, os.W_OK | os.X_OK) or (euid == 0 and os.stat(directory).st_uid != 0):
            owner = user_name(os.stat(directory).st_uid)
            raise StateError(
                f"The state directory {directory} belongs to '{owner}' and must not be written by "
                f"'{user_name(euid)}'; run as that user, e.g. 'sudo -u {owner} lms-refresh check'."
            )
        findings.append(Finding(OK, f"state directory {directory}: writable"))
    else:
        findings.append(Finding(OK, f"state directory {directory}: will be created on the first run"))
    source = build_source(config, Pseudonymiser(b"check"), environ)
    try:
        findings.extend(dataclasses.replace(finding, about="source") for finding in source.preflight())
    finally:
        source.close()
    if store_exists(config, environ):
        store = open_store(config, environ, create=False, read_only=True)
        try:
            weakening.require(config, store, accepted=False)  # the run would refuse it: so does check
            detail = f"; {store.privileges()}" if hasattr(store, "privileges") else ""
            findings.append(Finding(OK, f"store {store.describe()}: reachable, "
                                        f"schema v{store.schema_version()}{detail}"))
        finally:
            store.close()
    else:
        findings.append(Finding(OK, f"store {config.store_location}: will be created on the first run"))
    return findings
