"""A throwaway MariaDB server for the tests and the benchmark, like pgserver.py's PostgreSQL: Debian's
mariadb-server run as the unprivileged `mysql` user in a scratch directory, on a held loopback port and a
Unix socket, one database per test."""

import os
import shutil
import subprocess
import tempfile
import time

from helpers.ports import held_port


def _programs():
    """(mariadb-install-db, mariadbd) found on PATH (and /usr/sbin, where Debian puts the server), or None."""
    path = os.environ.get("PATH", "")
    found = shutil.which("mariadb-install-db", path=path), shutil.which("mariadbd", path=f"{path}:/usr/sbin")
    return found if all(found) else None


def missing():
    """Why no MariaDB server can be started here, or None."""
    import importlib.util

    if _programs() is None or importlib.util.find_spec("MySQLdb") is None:
        return (
            "MariaDB is not installed: install the Debian packages mariadb-server and python3-mysqldb "
            "(tests/run.sh does)"
        )
    return None


class MariaDBServer:
    """A throwaway MariaDB server on loopback; `admin` runs statements as its root over the socket."""

    def __init__(self, durable=False):
        self.base = tempfile.mkdtemp(prefix="lmsr-mariadb-")
        os.chmod(self.base, 0o755)
        self.data, self.sockets = os.path.join(self.base, "data"), os.path.join(self.base, "sock")
        # Its own temporary directory: in /tmp, another process's cleanup (or another server) removed the
        # bootstrap's temporary tables under it once, and mariadb-install-db failed with "Unknown table".
        self.tmp = os.path.join(self.base, "tmp")
        for path in (self.data, self.sockets, self.tmp):
            os.mkdir(path)
            shutil.chown(path, "mysql", "mysql")
        self.socket = os.path.join(self.sockets, "mysqld.sock")
        self.port_holder = held_port()  # held until the server stops: nothing else is given the port meanwhile
        self.port = self.port_holder.getsockname()[1]
        install_db, server = _programs()
        subprocess.run(
            [
                install_db,
                "--no-defaults",
                "--user=mysql",
                f"--datadir={self.data}",
                f"--tmpdir={self.tmp}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )
        options = [
            server,
            "--no-defaults",
            "--user=mysql",
            f"--datadir={self.data}",
            f"--tmpdir={self.tmp}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            "--skip-log-bin",
            f"--pid-file={os.path.join(self.sockets, 'mysqld.pid')}",
            "--innodb-buffer-pool-size=128M",
            f"--log-error={os.path.join(self.base, 'server.log')}",
            # Moodle's own server settings (admin/environment.xml): utf8mb4 throughout.
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci",
        ]
        if not durable:
            options.append("--innodb-flush-log-at-trx-commit=0")  # tests need no crash safety of the server itself
        self.process = subprocess.Popen(
            options, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait()
        self.count = 0

    def _wait(self):
        """Return once the server answers on its socket (it takes a few seconds to start)."""
        import MySQLdb

        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"mariadbd exited with {self.process.returncode}: "
                    f"{open(os.path.join(self.base, 'server.log')).read()[-2000:]}"
                )
            try:
                MySQLdb.connect(unix_socket=self.socket, user="root").close()
                return
            except MySQLdb.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # polling a starting server, not timing a test

    def admin(self, statement, database=None, parameters=None):
        """Run statements (';'-separated, none holding a ';'; or one statement with %s `parameters`) as root over
        the socket; return the last one's rows."""
        import MySQLdb

        db = MySQLdb.connect(
            unix_socket=self.socket,
            user="root",
            charset="utf8mb4",
            autocommit=True,
            **({"db": database} if database else {}),
        )
        try:
            cursor, rows = db.cursor(), None
            for part in [statement] if parameters is not None else (piece.strip() for piece in statement.split(";")):
                if part:
                    cursor.execute(part, parameters)
                    rows = cursor.fetchall() if cursor.description else None
            return [tuple(row) for row in rows] if rows is not None else None
        finally:
            db.close()

    def new_database(self, charset="utf8mb4", collation="utf8mb4_unicode_ci"):
        self.count += 1
        name = f"t{self.count}"
        self.admin(f"CREATE DATABASE {name} CHARACTER SET {charset} COLLATE {collation}")
        return name

    def url(self, database, user):
        return f"mariadb://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.port_holder.close()
        shutil.rmtree(self.base, ignore_errors=True)
