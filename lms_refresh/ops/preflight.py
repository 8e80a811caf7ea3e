"""`check`: validate the configuration and reach the state directory, the source and the store,
writing nothing — what a run would meet, before it meets it."""

import dataclasses
import os

from lms_refresh import atomic
from lms_refresh.config.paths import named_paths, refuse_collisions, report_files_directory
from lms_refresh.disclosure import weakening
from lms_refresh.disclosure.pseudonyms import Pseudonymiser
from lms_refresh.disclosure.redaction import url_origin
from lms_refresh.errors import ConfigError, StateError
from lms_refresh.instants import to_cursor
from lms_refresh.ops import alerts
from lms_refresh.ops.monitoring import read_url
from lms_refresh.run import after_commit, identity, publication_group, upgrade
from lms_refresh.sources import OK, WARNING, Finding, build_source, json_decoding
from lms_refresh.state_directory import refuse_a_file, user_name
from lms_refresh.store import open_store, store_exists


def preflight(config, euid, environ):
    """Check configuration, state directory, source and store without writing; return Findings.

    Raises the RefreshError of the first check that fails.
    """
    findings = [Finding(OK, f"configuration {config.origin}: valid")]
    if config.unused:
        findings.append(Finding(WARNING, config.unused_keys_sentence(), about="configuration"))
    overlapping = weakening.overlapping_terms(config)
    if overlapping:
        findings.append(Finding(WARNING, overlapping, about="privacy"))
    refuse_collisions(config)
    written = [named for named in named_paths(config) if named.written and not named.directory]
    findings.append(Finding(OK, f"paths: the {len(written)} files a run writes are distinct from each other and "
                                "from the files it reads"))
    directory = config.state_directory
    refuse_a_file(directory)  # as run and status do (78), not a traceback further down
    if os.path.isdir(directory):
        if not os.access(directory, os.W_OK | os.X_OK) or (euid == 0 and os.stat(directory).st_uid != 0):
            owner = user_name(os.stat(directory).st_uid)
            raise StateError(
                f"The state directory {directory} belongs to '{owner}' and must not be written by "
                f"'{user_name(euid)}'; run it as root (it becomes that user) or as that user, e.g. "
                f"'runuser -u {owner} -- lms-refresh check'."
            )
        findings.append(Finding(OK, f"state directory {directory}: writable"))
    else:
        findings.append(Finding(OK, f"state directory {directory}: will be created on the first run"))
    findings.extend(_url_findings(config, environ))
    mailer = config.alerts.mail_to and alerts.mailer_problem(config.alerts.sendmail)
    if mailer:
        findings.append(Finding(WARNING, f"the alert mail would fail under the alert unit: {mailer}", about="alerts"))
    findings.append(Finding(OK, f"JSON parser: {json_decoding.describe()}"))
    problem = json_decoding.setting_problem(json_decoding.REQUESTED)
    if problem:
        findings.append(Finding(WARNING, f"{json_decoding.ENVIRONMENT_VARIABLE} {problem}"))
    source = build_source(config, Pseudonymiser(b"check"), environ)
    try:
        findings.extend(dataclasses.replace(finding, about="source") for finding in source.preflight())
    finally:
        source.close()
    if store_exists(config, environ):
        store = open_store(config, environ, create=False, read_only=True, behind_ok=True)
        try:
            with store.errors():
                if store.behind is not None:
                    findings.extend(_behind_findings(store))
                    return _after_store(config, euid, findings)
                weakening.require(config, store, accepted=False)  # the run would refuse it: so does check
                # A changed time zone, course rule, ... too; a run staging meanwhile (it holds the table) has events.
                meta, has_events = store.meta(), store.staging_held() or store.has_events()
                # An upgrade of the statement mapping the next run would refuse, refused as it says it.
                planned = upgrade.plan(config, True, store, meta=meta, has_events=has_events)
                identity.verify_identity(config, meta, has_events, upgrading=planned is not None)
                if planned is not None:
                    findings.append(Finding(OK, f"the next run upgrades it from statement mapping version "
                                                f"{planned[0]} to {identity.MAPPING_VERSION}: it reads the source "
                                                f"again from {to_cursor(planned[1])}", about="store"))
                findings.append(Finding(OK, f"store {store.describe()}: reachable, schema v{store.schema_version()}"
                                            f"{_store_rights(config, store)}"))
                missing = store.missing_views()
                if missing:
                    findings.append(Finding(WARNING, f"the serving view{'s' if len(missing) > 1 else ''} "
                                                     f"{', '.join(missing)} {'are' if len(missing) > 1 else 'is'} "
                                                     "missing (dropped?): dashboards read nothing there until the "
                                                     "next run re-creates it (then run 'lms-refresh grant-reader "
                                                     "ROLE' again)", about="store"))
        finally:
            store.close()
    else:
        identity.verify_store_present(config, True)  # gone beside its key: the run refuses it, so does check
        findings.append(Finding(OK, f"store {config.store_location}: will be created on the first run"))
    return _after_store(config, euid, findings)


def _behind_findings(store):
    """What check says of a store of an earlier schema version: the next run upgrades it (each run migrates the
    store it opens first), which is no fault; what the run then refuses of it can only be read once it is."""
    version, target = store.behind
    return [Finding(OK, f"the next run upgrades it from schema version {version} to {target}; the settings it "
                        "keeps are compared with the configuration's once it is upgraded", about="store"),
            Finding(OK, f"store {store.describe()}: reachable, schema v{version}")]


def _after_store(config, euid, findings):
    """Add the publication's findings (a SQLite store's) to `findings`; return them."""
    gid = publication_group.require_group(config, user_name(_service_uid(config, euid)), outcome="a run would refuse "
                                    "to start (78) for the same reason.")
    if gid is not None:
        findings.append(Finding(OK, f"publication.group {config.publication.group} (gid {gid}): a new file in "
                                    f"{os.path.dirname(config.publication.path)} gets that group"))
        report_directory = os.path.dirname(os.path.abspath(config.report.path))
        if config.report.enabled and report_directory != os.path.dirname(os.path.abspath(config.publication.path)):
            try:
                given = atomic.new_file_group(report_directory)
            except OSError:
                given = None
            if given != gid:
                findings.append(Finding(WARNING, f"the report {config.report.path} would not get the group "
                                                 f"{config.publication.group!r} the publication has ({report_directory}"
                                                 " is no setgid directory of it), so each run would warn that it "
                                                 "wrote no report; make it one as the publication's is, or leave "
                                                 "report.path beside the publication", about="report"))
    if config.store.type == "sqlite":
        findings.extend(_publication_findings(config, user_name(euid)))
    return findings


def _service_uid(config, euid):
    """The user a run is: the state directory's owner (root's run becomes it), else this one."""
    try:
        return os.stat(config.state_directory).st_uid
    except OSError:
        return euid


def _directory_problem(path, user):
    """Return (the directory a run writes `path` into — or, missing, the nearest ancestor it creates it in —,
    what is wrong with it for the running user or None)."""
    directory = os.path.dirname(path)
    while not os.path.lexists(directory):  # the paths are absolute: "/" ends it
        directory = os.path.dirname(directory)
    if not os.path.isdir(directory):
        return directory, "is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return directory, f"is not writable by '{user}'"
    return directory, None


def _publication_findings(config, user):
    """Refuse (78) a publication whose directory the running user may not write, as the run would after its
    commit; a report's is a note, since a run only warns that it wrote no report."""
    path = config.publication.path
    directory, problem = _directory_problem(path, user)
    if problem:
        raise StateError(
            f"The publication {path} cannot be written: {directory} {problem}, so a run would commit "
            "the store and then fail (78) to publish it; make that directory writable by the service user (its "
            "owner or mode, and a ReadWritePaths= drop-in for the unit), or point publication.path elsewhere.")
    findings = [Finding(OK, f"publication {path}: {_writable(path, directory, user)}")]
    if config.report.enabled:
        path = config.report.path
        directory, problem = _directory_problem(path, user)
        if problem:
            findings.append(Finding(WARNING, f"the report {path} cannot be written: {directory} {problem}, "
                                             "so each run would publish but warn that it wrote no report; "
                                             "make that directory writable by the service user, point report.path "
                                             "elsewhere or set report.enabled = false", about="report"))
        else:
            findings.append(Finding(OK, f"report {path}: {_writable(path, directory, user)}"))
            files = report_files_directory(path)  # a directory there already: refuse_collisions saw to that
            if os.path.isdir(files) and not os.access(files, os.W_OK | os.X_OK):
                findings.append(Finding(WARNING, f"the report's course pages and CSVs cannot be written: {files} is "
                                                 f"not writable by '{user}', so each run would publish but warn that "
                                                 "it wrote no report; make that directory writable by the service "
                                                 "user, or remove it (the next run makes it again)", about="report"))
        failure = after_commit.report_failure(config)
        if failure:
            findings.append(Finding(WARNING, f"the last run could not write the report {failure.get('path')} "
                                             f"({failure.get('message')}); the next run that writes it clears this",
                                    about="report"))
    return findings


def _writable(path, directory, user):
    if directory == os.path.dirname(path):
        return f"its directory is writable by '{user}'"
    return f"its directory will be created in {directory}, which is writable by '{user}'"


def _url_findings(config, environ):
    """The alert and ping URLs, read as a run reads them: a bad one is a warning (the run goes on without
    it), said in a sentence that never quotes the URL."""
    findings = []
    for key in ("webhook_url_file", "healthchecks_url_file"):
        name = getattr(config.alerts, key)
        if not name:
            continue
        try:
            url = read_url(name, environ, f"alerts.{key}")
        except ConfigError as error:
            findings.append(Finding(WARNING, f"{error} Until then nothing is sent there.", about=f"alerts.{key}"))
        else:
            findings.append(Finding(OK, f"a valid URL ({url_origin(url)})", about=f"alerts.{key}"))
    return findings


def _store_rights(config, store):
    """Refuse (78) a PostgreSQL store whose role cannot do what a run does; return the words for the `ok` line."""
    if config.store.type != "postgresql":
        return ""
    missing = store.missing_privileges()
    if missing:
        raise ConfigError(f"The store {store.describe()} is reachable, but its role may not {', '.join(missing)}, "
                          "so a run would fail; connect as the role that owns the schema "
                          "(/usr/share/doc/lms-refresh/docs/admin/postgresql.md) or grant it those privileges.")
    return "; its role may write every table"
