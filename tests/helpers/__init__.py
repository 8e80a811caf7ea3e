"""What the tests share, one module per thing (fixtures, markers and hooks stay in tests/conftest.py):

- project: the Project, a temporary installation and the CLI run against it
- statements: builders of xAPI statements (HOME, statement, voiding)
- exports: daily export files delivered day by day, as an exporter would (deliver)
- batches: a source's whole window read in this process
- readers: what the source readers' unit tests share (WINDOW, MAPPER, an LRS source without a server)
- times: ISO 8601 text as an aware UTC datetime (t)
- commands: the installed CLI's command line, a copy another user can run, a run's peak memory
- inprocess: the CLI run inside this process, as the installed command would run it
- reference: the independent recount the serving table is compared with
- attacks: the disclosure attacks of the README's "Threat model"
- pgserver, lrsserver, moodledb: a throwaway PostgreSQL server, a Ralph LRS, a Moodle log database
- ports: loopback ports held for a server that starts later, or for none
- lrs_sample: projects reading Ralph, and sample statements timed for Ralph's real clock
- receiver: a local HTTP server standing for a webhook or Healthchecks
- publication: where a project's SQLite publication is, and what a dashboard reads from it
- container: a fresh Debian root booted under systemd-nspawn (tests/system)
- paths: where the repository (or debian/tests/suite's copy of it) is

pytest puts tests/ on sys.path (its default "prepend" import mode, for tests/conftest.py), so every
test imports these as `from helpers.project import Project`, from whatever directory it is in.
"""
