"""The Python packages a source or store type needs beyond the standard library, and the refusal of a configuration
whose type needs one that cannot be imported (a pip install without its extra)."""

import importlib

from lms_refresh.errors import ConfigError

# The Python packages a source or store type needs beyond the standard library: (module, pip extra, Debian package).
DRIVERS = {
    ("source", "moodle"): ("psycopg", "postgresql", "python3-psycopg"),
    ("store", "postgresql"): ("psycopg", "postgresql", "python3-psycopg"),
    ("source", "xapi-lrs"): ("requests", "lrs", "python3-requests"),
}


def refuse_missing_drivers(values, origin):
    """Refuse a source or store whose Python package cannot be imported, naming what to install: found here, every
    command says so in one sentence before it reaches anything, instead of a traceback from deep inside a run."""
    for (section, kind), (module, extra, package) in DRIVERS.items():
        if values[f"{section}.type"] != kind:
            continue
        try:
            importlib.import_module(module)
        except ImportError:
            raise ConfigError(
                f"{origin}: {section} type \"{kind}\" needs the Python package {module}, which cannot be imported: "
                f"install the Debian package {package} (apt install {package}), or in a virtualenv "
                f"pip install 'lms-refresh[{extra}]'.") from None
