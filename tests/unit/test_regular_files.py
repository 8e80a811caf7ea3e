"""regular_files: what a stranger may put where a file is expected is refused at once, and said for what it is."""

import os

import pytest

from lms_refresh.config import load_config
from lms_refresh.credentials import read_secret
from lms_refresh.errors import ConfigError
from lms_refresh.regular_files import NotRegularFile, TooLarge, open_regular, read_bounded


@pytest.mark.parametrize("kind, what", [("fifo", "a FIFO"), ("directory", "a directory"),
                                        ("device", "a character device")])
def test_anything_but_a_regular_file_is_refused_without_blocking_and_named(tmp_path, kind, what):
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking open would wait forever
    elif kind == "directory":
        path.mkdir()
    else:
        path = "/dev/null"
    for attempt in (open_regular, lambda where: read_bounded(where, 10)):
        with pytest.raises(NotRegularFile) as raised:
            attempt(str(path))
        assert raised.value.strerror == what and raised.value.filename == str(path)


def test_a_file_is_read_up_to_its_bound_and_refused_one_byte_past_it(tmp_path):
    path = tmp_path / "doc"
    path.write_bytes(b"x" * 10)
    assert read_bounded(str(path), 10) == b"x" * 10
    with pytest.raises(TooLarge) as raised:
        read_bounded(str(path), 9)
    assert raised.value.strerror == "larger than 9 bytes"


def test_a_sparse_file_of_gigabytes_is_refused_without_being_read(tmp_path):
    path = tmp_path / "huge"
    with open(path, "wb") as handle:
        handle.truncate(1 << 32)
    with pytest.raises(TooLarge):
        read_bounded(str(path), 1 << 20)


def test_a_missing_file_is_the_os_error_the_caller_words(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_bounded(str(tmp_path / "absent"), 10)


def test_the_configuration_and_a_credential_say_what_stands_at_their_path(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    for name, what in (("fifo", "a FIFO"), ("folder", "a directory")):
        path = tmp_path / name
        with pytest.raises(ConfigError) as raised:
            load_config(str(path), {})
        assert str(raised.value) == (f"The configuration path {path} is {what}, not a regular file; "
                                     "point --config at the TOML file.")
        with pytest.raises(ConfigError) as raised:
            read_secret(name, {"LMS_REFRESH_CREDENTIALS": str(tmp_path)})
        assert str(raised.value) == (f"The credential {path} is {what}, not a regular file; "
                                     "put the secret in a file there.")
