"""Credentials: a bare name from the unit's $CREDENTIALS_DIRECTORY, else the credentials directory; a path as is."""

import os
import shutil
import subprocess
import tempfile

import pytest

from helpers.readable import readable_package
from lms_refresh.credentials import CREDENTIALS_DIRECTORY, credentials_directory, read_secret
from lms_refresh.errors import ConfigError


def test_the_default_directory_is_etc_lms_refresh_credentials():
    assert CREDENTIALS_DIRECTORY == "/etc/lms-refresh/credentials"
    assert credentials_directory({}) == CREDENTIALS_DIRECTORY
    assert credentials_directory({"LMS_REFRESH_CREDENTIALS": "/elsewhere"}) == "/elsewhere"


def test_the_order_is_the_units_copy_then_the_directory_and_a_path_is_read_as_is(tmp_path):
    loaded, directory = tmp_path / "loaded", tmp_path / "dir"
    loaded.mkdir()
    directory.mkdir()
    (directory / "store-password").write_text("from-the-directory\n")
    env = {"LMS_REFRESH_CREDENTIALS": str(directory)}
    assert read_secret("store-password", env) == "from-the-directory"
    assert read_secret("store-password", dict(env, CREDENTIALS_DIRECTORY=str(loaded))) == "from-the-directory"
    (loaded / "store-password").write_text("  from-the-unit \n")
    assert read_secret("store-password", dict(env, CREDENTIALS_DIRECTORY=str(loaded))) == "from-the-unit"
    assert read_secret(str(directory / "store-password"), dict(env, CREDENTIALS_DIRECTORY=str(loaded))) == \
        "from-the-directory"
    assert read_secret("", env) is None and read_secret(None, env) is None


def test_a_missing_credential_names_where_it_was_looked_for(tmp_path):
    env = {"LMS_REFRESH_CREDENTIALS": str(tmp_path)}
    with pytest.raises(ConfigError) as raised:
        read_secret("alert-webhook", env)
    assert str(raised.value).startswith(f"Credential 'alert-webhook' is not at {tmp_path}/alert-webhook and no unit "
                                        "loaded it; put it there as root (install -m 0640 -o root -g lms-refresh")
    with pytest.raises(ConfigError) as raised:
        read_secret("alert-webhook", dict(env, CREDENTIALS_DIRECTORY="/run/credentials/x.service"))
    assert "the unit's $CREDENTIALS_DIRECTORY (/run/credentials/x.service) has none" in str(raised.value)


def test_an_unreadable_credential_says_how_to_make_it_readable(tmp_path):
    """As another account (nobody), like the service user before the file's group is set."""
    directory = tmp_path / "credentials"
    directory.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(directory, 0o755)
    (directory / "store-password").write_text("secret\n")
    os.chmod(directory / "store-password", 0o600)
    script = ("import sys; from lms_refresh.credentials import read_secret\n"
              "try:\n    read_secret('store-password', {'LMS_REFRESH_CREDENTIALS': sys.argv[1]})\n"
              "except Exception as error:\n    print(error)\n")
    reachable = tempfile.mkdtemp(prefix="lmsr-code-")  # pytest's own tmp_path lies below a 0700 directory
    try:
        python, code = readable_package(reachable)
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c",
                                 script, str(directory)], capture_output=True, text=True, check=True,
                                env=dict(os.environ, PYTHONPATH=code, PYTHONDONTWRITEBYTECODE="1"), cwd=code)
    finally:
        shutil.rmtree(reachable)
    assert result.stdout.startswith(f"Cannot read the credential {directory}/store-password: Permission denied; "
                                    "the service user reads it through its group: chown root:lms-refresh and "
                                    "chmod 0640 it"), result
    assert "secret\n" not in result.stdout


def test_a_directory_or_binary_file_is_a_configuration_error(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    for name in ("dir", "binary"):
        with pytest.raises(ConfigError):
            read_secret(name, {"LMS_REFRESH_CREDENTIALS": str(tmp_path)})


def test_a_fifo_a_device_or_a_huge_file_is_refused_at_once(tmp_path):
    """A FIFO as healthchecks_url_file held every scheduled run (and check, and the alert) forever."""
    os.mkfifo(tmp_path / "fifo")
    with open(tmp_path / "huge", "wb") as handle:
        handle.truncate(1 << 30)
    for name in ("fifo", "huge", "/dev/zero"):
        with pytest.raises(ConfigError, match="not a regular file|larger than"):
            read_secret(name, {"LMS_REFRESH_CREDENTIALS": str(tmp_path)})
