"""A throwaway PostgreSQL server for the tests and the benchmark (../shared/recipes/servers.md)."""

import glob
import os
import shutil
import subprocess

from helpers.ports import held_port


def _server_binaries():
    """The newest installed PostgreSQL's bin directory: 15 on Debian 12, 17 on Debian 13."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]))
    if not found:
        raise RuntimeError("No PostgreSQL server is installed; install the 'postgresql' package (tests/run.sh does).")
    return os.path.dirname(found[-1])


class PostgresServer:
    """A throwaway PostgreSQL cluster on loopback (../shared/recipes/servers.md), one database per test."""

    PASSWORD = "refresh-secret"
    running = set()  # the servers started and not stopped (tests/conftest.py drops a passing test's databases)

    def __init__(self, durable=False):
        import tempfile

        self.bin = _server_binaries()
        self.base = tempfile.mkdtemp(prefix="lmsr-pg-")
        os.chmod(self.base, 0o755)
        self.data, self.sockets = os.path.join(self.base, "data"), os.path.join(self.base, "sock")
        for path in (self.data, self.sockets):
            os.mkdir(path)
            shutil.chown(path, "postgres", "postgres")
        self.port_holder = held_port()  # held until the server stops: nothing else is given the port meanwhile
        self.port = self.port_holder.getsockname()[1]
        self._postgres(f"{self.bin}/initdb", "-D", self.data, "-A", "trust", "--auth-host=scram-sha-256",
                       "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
        self._postgres(f"{self.bin}/pg_ctl", "-D", self.data, "-l", os.path.join(self.data, "server.log"), "-w",
                       "-t", "30", "-o", f"-k {self.sockets} -p {self.port} -c listen_addresses=127.0.0.1"
                       # Tests need no crash safety of the server itself; and its write-ahead log is recycled past
                       # 64 MB rather than the default 1 GB, which a suite's stores would fill in /tmp (the
                       # benchmark's durable server keeps PostgreSQL's defaults, which its figures are taken with).
                       + ("" if durable else " -c fsync=off -c max_wal_size=64MB -c min_wal_size=32MB"),
                       "start")
        self.count = 0
        self.kept = set()  # databases that outlive the test that created them (a cache later tests copy)
        PostgresServer.running.add(self)
        self.admin(f"CREATE ROLE lms_refresh LOGIN PASSWORD '{self.PASSWORD}'")
        self.password_file = os.path.join(self.base, "store-password")
        with open(self.password_file, "w") as handle:
            handle.write(self.PASSWORD + "\n")

    def _postgres(self, *command):
        subprocess.run(["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True, timeout=120)

    def admin(self, statement, database="postgres"):
        """Run one statement as the superuser (over the Unix socket); return the rows, if any."""
        import psycopg

        with psycopg.connect(host=self.sockets, port=self.port, user="postgres", dbname=database,
                             autocommit=True) as db:
            cursor = db.execute(statement)
            return cursor.fetchall() if cursor.description else None

    def new_database(self, template=None):
        self.count += 1
        name = f"t{self.count}"
        self.admin(f"CREATE DATABASE {name} OWNER lms_refresh" + (f" TEMPLATE {template}" if template else ""))
        return name

    def databases(self):
        """The names of the databases on the server but its own (postgres, the templates)."""
        return {row[0] for row in self.admin("SELECT datname FROM pg_database WHERE datname <> 'postgres' "
                                             "AND NOT datistemplate")}

    def drop_databases(self, names):
        for name in sorted(set(names) - self.kept):
            self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def url(self, database):
        return f"postgresql://lms_refresh@127.0.0.1:{self.port}/{database}"

    def stop(self):
        PostgresServer.running.discard(self)
        subprocess.run(["runuser", "-u", "postgres", "--", f"{self.bin}/pg_ctl", "-D", self.data, "-m", "immediate",
                        "-w", "stop"], capture_output=True, timeout=60)
        self.port_holder.close()
        shutil.rmtree(self.base, ignore_errors=True)
