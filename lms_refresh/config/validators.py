"""The values a configuration key may take: one validator per kind of value.

A validator takes the TOML value and returns it (possibly normalised, e.g. a
duration in seconds) or raises ValueError with the end of a sentence ("must be
at least 1"). Each also says what it accepts, in words, and the Python type of
what it returns (`accepts`, `type`): the typed configuration sections and the
man page are built from them (see lms_refresh.config).
"""

import datetime as dt
import functools
import ipaddress
import math
import re
import unicodedata
import zoneinfo

from lms_refresh import instants
from lms_refresh.config.mysql_url import MYSQL_SCHEME, mysql_url
from lms_refresh.disclosure import folding

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
LONGEST_DURATION = 3660 * 86400  # ten years: longer is a typo, and would overflow date arithmetic


def accepting(accepts, kind):
    """Mark a validator with what it accepts (words for the documentation) and the type it returns."""
    def mark(check):
        check.accepts, check.type = accepts, kind
        return check

    return mark


@accepting('a duration ("90s", "5m", "1h30m", "2d") or a number of seconds, at most 3660 days', int)
def parse_duration(value):
    """Given an int (seconds) or a string like '90s', '5m', '1h30m', '2d', return seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return _bounded_duration(value)
    if not isinstance(value, str):
        raise ValueError("expected a duration such as \"5m\" or a number of seconds")
    match = _DURATION.match(value.strip())
    if not value.strip() or not match:
        raise ValueError(f"{value!r} is not a duration such as \"90s\", \"5m\", \"1h30m\" or \"2d\"")
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return _bounded_duration(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _bounded_duration(seconds):
    if seconds > LONGEST_DURATION:
        raise ValueError(f"must be at most 3660 days ({LONGEST_DURATION} seconds)")
    return seconds


@accepting("a duration of at least 1 second", int)
def at_least_a_second(value):
    seconds = parse_duration(value)
    if seconds < 1:
        raise ValueError("must be at least 1 second")
    return seconds


# Files of the time zone database that name no place's zone: the machine's own zone (which changes with it, and
# the published calendar with it), the rules of POSIX TZ strings, and tzdata's placeholder for an unset zone.
_NOT_A_PLACE = {"localtime": "this machine's zone (/etc/localtime), which changes when the machine's does",
                "posixrules": "the time zone database's rules for POSIX TZ strings",
                "Factory": "the time zone database's placeholder for a zone nobody set"}


@functools.cache
def _zone_names():
    return zoneinfo.available_timezones()  # IANA names only: no posix/ or right/ copies


@accepting('an IANA time zone name such as "Europe/Paris"', str)
def timezone(value):
    if not isinstance(value, str):
        raise ValueError("expected a time zone name such as \"Europe/Paris\"")
    if value in _NOT_A_PLACE:
        raise ValueError(f"{value!r} is not a time zone name but {_NOT_A_PLACE[value]}; name the zone "
                         "explicitly, such as \"Europe/Paris\" (see timedatectl list-timezones)")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value[:100]!r} is not a known time zone (see timedatectl list-timezones; "
                         "is tzdata installed?)") from None
    if value not in _zone_names():  # a file of the database that is no IANA name (posix/..., right/...)
        raise ValueError(f"{value[:100]!r} is not an IANA time zone name; name the zone explicitly, such as "
                         "\"Europe/Paris\" (see timedatectl list-timezones)")
    return value


def _range_words(low, high):
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" of at least {low}"
    return f" of at most {high}" if high is not None else ""


def typed(kind, low=None, high=None):
    """A validator of one TOML type (an int also passes as a float), within [low, high] if given."""
    words = {int: "an integer", float: "a number", str: "text"}[kind] + _range_words(low, high)

    @accepting(words, kind)
    def check(value):
        if isinstance(value, bool) or not isinstance(value, kind):
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            else:
                raise ValueError(f"expected {'a number' if kind is float else kind.__name__}")
        if kind is float and not math.isfinite(value):
            raise ValueError(f"must be a finite number, not {value}")
        if low is not None and value < low:
            raise ValueError(f"must be at least {low}")
        if high is not None and value > high:
            raise ValueError(f"must be at most {high}")
        return value

    check.low, check.high = low, high  # for what must agree with them (the demo's --days)
    return check


def choice(*choices):
    """A validator of one of `choices`."""
    @accepting("one of " + ", ".join(f'"{c}"' for c in choices), str)
    def check(value):
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(repr(c) for c in choices)}")
        return value

    return check


@accepting("a regular expression with at most one capturing group", str)
def regex(value):
    if not isinstance(value, str):
        raise ValueError("expected a regular expression")
    try:
        compiled = re.compile(value)
    except re.error as error:
        raise ValueError(f"is not a valid regular expression ({error})") from None
    except OverflowError as error:  # a repetition count past what re can hold: a{99999999999}
        raise ValueError(f"is not a valid regular expression ({error})") from None
    except RecursionError:
        raise ValueError("is not a valid regular expression (nested too deeply)") from None
    if compiled.groups > 1:
        raise ValueError("may have at most one capturing group")
    return value


@accepting('a language tag such as "en", "fr", "en-US" or Moodle\'s "pt_br"', str)
def language_tag(value):
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8}){0,3}", value):
        raise ValueError(f"must be a language tag such as \"en\" or \"fr-CA\", not {str(value)[:40]!r}")
    return value


@accepting('a date: 2026-09-01 (a TOML date) or "2026-09-01"', str)
def calendar_day(value):
    """Return a day as ISO text, from a TOML local date or the same as text; within the days a store can hold."""
    if isinstance(value, dt.datetime):
        raise ValueError(f"must be a date without a time, not {value.isoformat()}")
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        try:
            value = dt.date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"is no such day: {value!r}") from None
    if not isinstance(value, dt.date):
        raise ValueError(f"expected a date such as 2026-09-01, not {str(value)[:40]!r}")
    day = value.isoformat()
    if not instants.FIRST_DAY <= day <= instants.LAST_DAY:
        raise ValueError(f"must lie between {instants.FIRST_DAY} and {instants.LAST_DAY}, not {day}")
    return day


@accepting("text of 1 to 100 characters, without control characters", str)
def label(value):
    """A name the publication shows as it is (a term's): bounded, printable, not blank."""
    value = typed(str)(value)
    if not value.strip():
        raise ValueError("must not be blank")
    if len(value) > 100:
        raise ValueError(f"must be at most 100 characters, not {len(value)}")
    if any(unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp") for character in value):
        raise ValueError("must not contain control or format characters")
    # Shown as nothing, or as whatever a font makes of it: a private-use or unassigned character, or a name of
    # marks, blanks and characters shown as nothing only (a Hangul filler, U+2800 BRAILLE PATTERN BLANK: as a reader
    # sees it, folding.view), which would be a blank row's name.
    if any(unicodedata.category(character) in ("Co", "Cn") for character in value):
        raise ValueError("must not contain private-use or unassigned characters")
    if not folding.view(value)[0].strip():
        raise ValueError("must show as something: it is only marks or characters shown as nothing")
    return value


@accepting("a list of at most 100 patterns of course IRIs, each of 1 to 500 characters without control characters: "
           "* matches any text, ? one character, [abc] one of those (Python's fnmatch, case-sensitive)", tuple)
def course_patterns(value):
    """The course IRIs a category holds ([[categories]] courses), as fnmatch patterns."""
    if not isinstance(value, list):
        raise ValueError("must be a list of patterns")
    if len(value) > 100:
        raise ValueError(f"must hold at most 100 patterns, not {len(value)}")
    patterns = []
    for pattern in value:
        pattern = typed(str)(pattern)
        if not 1 <= len(pattern) <= 500:
            raise ValueError(f"must hold patterns of 1 to 500 characters, not {len(pattern)}")
        if any(unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp") for character in pattern):
            raise ValueError("must hold patterns without control or format characters")
        patterns.append(pattern)
    return tuple(patterns)


@accepting("an absolute path (it starts with /)", str)
def path(value):
    """A path, absolute: a relative one would be read from the working directory, which is / under systemd
    and wherever an operator stands otherwise."""
    value = typed(str)(value)
    if not value:
        raise ValueError("must not be empty; give an absolute path")
    if "\0" in value:
        raise ValueError("must not contain a NUL character (no file name can)")
    if not value.isprintable():  # a newline or an escape would forge lines in every message naming the path
        raise ValueError(f"must not contain control or format characters: {value[:100]!r}")
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute path (starting with /), not {value[:100]!r}: a relative path would be "
                         "read from the working directory, which is / under systemd")
    return value


@accepting('a credential name without "/" (see man 5 lms-refresh.toml) or an absolute path', str)
def credential(value):
    """A credential: a bare name, looked up in the credentials directories, or an absolute path."""
    value = typed(str)(value)
    if value and "/" not in value and value.isprintable() and value not in (".", ".."):
        return value
    return path(value)


@accepting("true or false", bool)
def boolean(value):
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


@accepting("a number from 0 to 100", float)
def variance(value):
    return typed(float, 0.0, 100.0)(value)


@accepting('a postgresql:// URL without a password', str)
def postgres_url(value):
    if not isinstance(value, str) or not re.match(r"^postgres(ql)?://", value):
        raise ValueError("expected a URL such as \"postgresql://user@host:5432/database\"")
    if re.match(r"^postgres(ql)?://[^/@]*:[^/@]*@", value) or "password=" in value:
        raise ValueError("must not contain a password; put it in the file named by store.password_file")
    return value


LONGEST_URL = 2000  # longer is no URL anyone typed (and many servers refuse it)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+")


def url_problem(value):
    """Given text meant to be an http(s) URL, return what is wrong with it (the end of a sentence that
    never quotes the URL, which may hold a token), or None if it is one.

    The URL is taken apart by hand rather than by urllib, whose errors quote it.
    """
    if not isinstance(value, str):
        return "is not text"
    if len(value) > LONGEST_URL:
        return f"is longer than {LONGEST_URL} characters"
    if any(char.isspace() or not char.isprintable() for char in value):
        return "contains a space or a control character (percent-encode it)"
    if not value.isascii():
        return "contains a character that is not ASCII (percent-encode it, and give a host name in its xn-- form)"
    scheme = _SCHEME.match(value)
    if not scheme:
        return "has no scheme: it must start with http:// or https://"
    if scheme.group(1).lower() not in ("http", "https"):
        return "has a scheme other than http:// or https://"
    authority = re.split(r"[/?#]", value[scheme.end():], maxsplit=1)[0]
    if "@" in authority:
        return "contains a user name or password (user:password@ before the host)"
    return _authority_problem(authority)


def _authority_problem(authority):
    """What is wrong with a URL's host[:port], or None."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            return "has an IPv6 address without its closing bracket"
        host, port = authority[1:end], authority[end + 1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return "has something other than an IPv6 address between brackets"
        if port and not port.startswith(":"):
            return "has text after the closing bracket of its IPv6 address"
        port = port[1:]
    else:
        if "[" in authority or "]" in authority:
            return "has a bracket outside an IPv6 address (write one as [2001:db8::1])"
        host, _, port = authority.partition(":")
        if not host:
            return "has no host"
        if not _HOST_NAME.fullmatch(host):
            return "has a host name with a character no host name has"
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        return "has a port that is not a number from 1 to 65535"
    return None


@accepting("an http:// or https:// URL without a user name or password", str)
def http_url(value):
    problem = url_problem(value)
    if problem and "user name or password" in problem:
        raise ValueError("must not contain a user name or password; use source.username and source.password_file")
    if problem:
        raise ValueError(f"{problem}; expected an http:// or https:// URL such as \"https://lrs.example.edu/xAPI/\"")
    return value


@accepting("a postgresql://, mysql:// or mariadb:// URL of Moodle's database without a password", str)
def database_url(value):
    if isinstance(value, str) and MYSQL_SCHEME.match(value):
        mysql_url(value)
        return value
    if isinstance(value, str) and re.match(r"^postgres(ql)?://", value):
        return postgres_url(value)
    raise ValueError("expected a URL such as \"postgresql://user@host:5432/moodle\" or "
                     "\"mariadb://user@host:3306/moodle\" (mysql:// is the same)")


def sql_name(longest, example, what):
    """A validator for a lower-case SQL name (a schema, a table prefix) that is safe to splice into SQL."""
    @accepting(f"a lower-case {what} of at most {longest} characters", str)
    def check(value):
        if not isinstance(value, str) or not re.fullmatch(rf"[a-z_][a-z0-9_]{{0,{longest - 1}}}", value):
            raise ValueError(f"must be a lower-case {what} such as \"{example}\"")
        return value

    return check


identifier = sql_name(41, "lms_refresh", "SQL identifier")


@accepting("a lower-case SQL identifier of at most 41 characters, not beginning with pg_", str)
def schema_name(value):
    """A schema for the store (and `<schema>_serving` beside it): PostgreSQL refuses to create a schema whose name
    begins with pg_, and information_schema is its own, so a run would fail (78) where `check` said it would
    create it."""
    value = identifier(value)
    if value.startswith("pg_") or value == "information_schema":
        raise ValueError(f"must not be \"{value}\": PostgreSQL keeps names beginning with pg_, and "
                         "information_schema, for itself")
    return value
identifier_prefix = sql_name(21, "mdl_", "table prefix")


@accepting("a list of 1 to 20 Moodle role short names or archetypes (letters, digits, _ and -; up to 100 each)", tuple)
def moodle_roles(value):
    """The Moodle roles counted as learners, each matched against a role's `shortname` and `archetype`; returned as a
    tuple, in the order given, each once."""
    if not isinstance(value, list) or not 1 <= len(value) <= 20:
        raise ValueError("must be a list of 1 to 20 role names, such as [\"student\"]")
    for name in value:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,100}", name):
            raise ValueError(f"{name!r} is not a Moodle role short name or archetype (letters, digits, _ and -)")
    return tuple(dict.fromkeys(value))
