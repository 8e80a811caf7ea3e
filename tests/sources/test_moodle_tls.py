"""The Moodle source's `url` is a libpq connection URI, so TLS is asked for with libpq's own parameters
(docs/sources/moodle.md): a server that cannot give what `sslmode` demands is refused with a sentence, never
read in clear text."""

from helpers.moodledb import EXPECTED_TWO_DAYS, MoodleDatabase, load_two_days, moodle_project

NOW = "2026-11-25T04:15:00+01:00"


def test_sslmode_in_the_url_is_what_the_connection_demands(tmp_path, postgres_server, moodle_reader):
    moodle = MoodleDatabase(postgres_server)
    load_two_days(moodle)

    # The tests' server offers no TLS: a URL that requires it is refused, and nothing is read.
    demanding = moodle_project(tmp_path / "tls", moodle, moodle_reader, url=moodle.url + "?sslmode=require")
    checked = demanding.invoke("check", now=NOW)
    assert checked.returncode == 69, checked.stderr
    assert "server does not support SSL" in checked.stderr, checked.stderr
    result = demanding.invoke("run", now=NOW)
    assert result.returncode == 69 and "server does not support SSL" in result.stderr, result.stderr
    assert not demanding.serving()

    # Parameters after '?' reach libpq: one it accepts here connects and reads as without it.
    plain = moodle_project(tmp_path / "plain", moodle, moodle_reader, url=moodle.url + "?sslmode=disable")
    plain.invoke("check", now=NOW, check=0)
    plain.invoke("run", now=NOW, check=0)
    assert plain.serving() == EXPECTED_TWO_DAYS
