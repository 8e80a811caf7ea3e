"""The Python packages a source or store type needs beyond the standard library, and the refusal of a configuration
whose type needs one that cannot be imported (a pip install without its extra)."""

import importlib

from lms_refresh.errors import ConfigError

# (section, type, the URL schemes that need it, or None for any) -> (module, pip extra, Debian package). The Moodle
# source needs its database's driver only: psycopg for PostgreSQL, MySQLdb for MySQL and MariaDB.
DRIVERS = {
    ("source", "moodle", ("postgresql", "postgres")): ("psycopg", "postgresql", "python3-psycopg"),
    ("source", "moodle", ("mysql", "mariadb")): ("MySQLdb", "mysql", "python3-mysqldb"),
    ("store", "postgresql", None): ("psycopg", "postgresql", "python3-psycopg"),
    ("source", "xapi-lrs", None): ("requests", "lrs", "python3-requests"),
}


def refuse_missing_drivers(values, origin):
    """Refuse a source or store whose Python package cannot be imported, naming what to install: found here, every
    command says so in one sentence before it reaches anything, instead of a traceback from deep inside a run."""
    for (section, kind, schemes), (module, extra, package) in DRIVERS.items():
        if values[f"{section}.type"] != kind:
            continue
        if schemes and (values.get(f"{section}.url") or "").partition(":")[0].lower() not in schemes:
            continue
        try:
            importlib.import_module(module)
        except ImportError:
            raise ConfigError(
                f"{origin}: {section} type \"{kind}\" needs the Python package {module}, which cannot be imported: "
                f"install the Debian package {package} (apt install {package}), or in a virtualenv "
                f"pip install 'lms-refresh[{extra}]'.") from None
