"""The one place source JSON is decoded: orjson where it can be imported, the standard library otherwise.

Both paths give the same value, or refuse with the same reason, for every input, so that staging,
the quarantine and the publication are byte-identical whichever is installed. The standard library's
reading is the reference, and orjson is only a faster way to the same value where the two are known
to agree:

- anything orjson refuses is read again by the standard library, whose verdict and reason stand:
  it accepts NaN, Infinity, 1e400 (an infinite float), lone surrogates (`"\\ud800"`) and, in a whole
  document, a BOM or UTF-16, which orjson refuses; and the reasons are always the standard library's;
- orjson reads integers beyond 64 bits as floats, where the standard library keeps them exact: a
  line with a run of 19 digits or more (anywhere, strings included: a cheap test) goes to the
  standard library straight away, as does an export line starting with whitespace (the line
  reader's own rules for it are the standard library's);
- orjson reads 1,024 levels of nesting, the standard library as many as Python's recursion limit
  leaves (about 900, fewer the deeper the caller's stack): a value nested deeper than MAX_DEPTH
  is refused on both paths, for the same reason (`TooDeep`), whatever the stack.
Duplicate keys (the last wins, in the first one's place), floats and escapes agree already; the
tests (tests/hostile_input/test_json_decoders_agree.py) check each case on both paths.

`LMS_REFRESH_JSON_PARSER=stdlib` in the environment, read once at import, makes the standard library
the parser even where orjson is installed (the tests use `use()` as well, in the same process).
"""

import json
import os
import re

try:
    import orjson
except ImportError:  # the .deb only recommends python3-orjson; Debian 12 has none
    orjson = None

ENVIRONMENT_VARIABLE = "LMS_REFRESH_JSON_PARSER"
STDLIB, ORJSON = "stdlib", "orjson"
# Far deeper than any statement (a dozen levels) and below both libraries' own limits with room to
# spare for the caller's stack, so that neither limit is ever the one that decides.
MAX_DEPTH = 512
_DEEP_TEXT = 2 * MAX_DEPTH + 1  # a well-formed text nested deeper holds at least two brackets per level: longer

_STD_DECODER = json.JSONDecoder()
_raw_decode = _STD_DECODER.raw_decode  # str in, no encoding sniffing per line
_scan_once = _STD_DECODER.scan_once  # what raw_decode calls: (value, end) or StopIteration
_std_loads = json.loads
_fast_loads = orjson.loads if orjson is not None else None
_FAST_ERROR = orjson.JSONDecodeError if orjson is not None else ValueError
# Digits to "0", so that `in` finds a run of them in one fast substring search.
_ZEROED_BYTES = bytes.maketrans(b"123456789", b"000000000")
_ZEROED_TEXT = str.maketrans("123456789", "000000000")
_LONG_NUMBER = 19  # digits: 2**63 has 19, and orjson keeps exact integers only within 64 bits
_LONG_BYTES, _LONG_TEXT = b"0" * _LONG_NUMBER, "0" * _LONG_NUMBER
_SPACE_BYTES = frozenset(b" \t\r\n\x0b\x0c")
_STRINGS = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_STEPS = tuple(1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256))
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")


class NotJSON(ValueError):
    """The data is not JSON this job reads; the message is the standard library's reason."""


class TooDeep(NotJSON):
    """The data nests arrays and objects more than MAX_DEPTH levels deep."""


def nesting_depth(data):
    """Return how deep arrays and objects nest in JSON `data` (bytes or str), brackets in strings apart.

    A function of the text alone, for malformed text too (an unterminated string's brackets count).
    """
    if type(data) is str:
        data = data.encode("utf-8", "surrogatepass")
    skeleton = _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for step in map(_STEPS.__getitem__, skeleton):
        depth += step
        if depth > deepest:
            deepest = depth
    return deepest


def _too_deep(data):
    """Whether `data` nests deeper than MAX_DEPTH; cheap unless it holds that many brackets."""
    return data.count(b"[" if type(data) is bytes else "[") + data.count(b"{" if type(data) is bytes else "{") \
        > MAX_DEPTH and nesting_depth(data) > MAX_DEPTH


def _deep():
    """The error of a text nested deeper than MAX_DEPTH."""
    return TooDeep(f"nested more than {MAX_DEPTH} levels deep")


def _refused(error, data):
    """The error to raise for `data`, which the standard library refused with `error`."""
    if isinstance(error, RecursionError) or len(data) > MAX_DEPTH and _too_deep(data):
        return _deep()
    return NotJSON(str(error))


def _std_line(line):
    """The standard library's reading of one export line (bytes, not blank): the reference."""
    try:
        text = line.decode()
        if text[0] in " \t":
            text = text.strip()
        try:
            value, end = _scan_once(text, 0)  # raw_decode's own scanner, without its regex that skips whitespace
        except StopIteration:  # no value at 0: raw_decode skips the whitespace first, or gives the reason
            value, end = _raw_decode(text)
        if end != len(text) and text[end:].strip():
            raise ValueError(f"extra data after the JSON value at character {end}")
    except (ValueError, RecursionError) as error:
        raise _refused(error, line) from None
    if len(line) > _DEEP_TEXT and _too_deep(line):  # inline: this runs once per export line
        raise _deep()
    return value


def _fast_line(line):
    """orjson's reading of one export line, or the standard library's where the two could differ."""
    if line[0] in _SPACE_BYTES or _LONG_BYTES in line.translate(_ZEROED_BYTES):
        return _std_line(line)
    try:
        value = _fast_loads(line)
    except _FAST_ERROR:
        return _std_line(line)  # refused: the standard library's verdict, and its reason
    if len(line) > _DEEP_TEXT and _too_deep(line):  # inline: this runs once per export line
        raise _deep()
    return value


def _std_document(data):
    """The standard library's reading of a whole document (bytes or str), as json.loads reads it."""
    try:
        value = _std_loads(data)
    except (ValueError, RecursionError) as error:
        raise _refused(error, data) from None
    if len(data) > _DEEP_TEXT and _too_deep(data):
        raise _deep()
    return value


def _fast_document(data):
    if (_LONG_BYTES in data.translate(_ZEROED_BYTES) if type(data) is bytes
            else _LONG_TEXT in data.translate(_ZEROED_TEXT)):
        return _std_document(data)
    try:
        value = _fast_loads(data)
    except _FAST_ERROR:
        return _std_document(data)
    if len(data) > _DEEP_TEXT and _too_deep(data):
        raise _deep()
    return value


# Each parser's (line, document) decoders; `use` picks one pair.
PATHS = {STDLIB: (_std_line, _std_document), ORJSON: (_fast_line, _fast_document)}
decode_line, decode_document = PATHS[STDLIB]
parser = STDLIB


def use(name):
    """Make `name` ("orjson" or "stdlib") the parser of this process and of the workers it forks from now on.

    Raises ModuleNotFoundError for "orjson" where it cannot be imported.
    """
    global decode_line, decode_document, parser
    if name == ORJSON and orjson is None:
        raise ModuleNotFoundError("orjson is not installed (pip install 'lms-refresh[fast]', or python3-orjson)")
    decode_line, decode_document = PATHS[name]
    parser = name


def line_decoder():
    """Return the function that decodes one export line (bytes, not blank) with the parser in use.

    It returns the value or raises NotJSON (TooDeep if too deeply nested).
    """
    return decode_line


def describe():
    """One line saying which parser is in use, and why when it is the standard library."""
    if parser == ORJSON:
        return f"orjson {orjson.__version__} (the standard library's json where the two could differ)"
    if orjson is not None:
        return (f"the standard library's json (orjson {orjson.__version__} is installed, but "
                f"{ENVIRONMENT_VARIABLE}=stdlib says not to use it)")
    return "the standard library's json (orjson is not installed; python3-orjson or the 'fast' extra is faster)"


def setting_problem(requested):
    """What is wrong with `requested`, the value of LMS_REFRESH_JSON_PARSER (None: unset, or nothing wrong)."""
    if requested in (None, "", STDLIB) or (requested == ORJSON and orjson is not None):
        return None
    if requested == ORJSON:
        return "asks for orjson, which is not installed: the standard library's json decodes"
    shown = requested[:40].encode("unicode_escape").decode("ascii")  # an operator's typo, shown as typed
    return f"is '{shown}', which names no parser (stdlib or orjson): ignored"


REQUESTED = os.environ.get(ENVIRONMENT_VARIABLE)  # what this process was started with (status and check say it)
use(STDLIB if orjson is None or REQUESTED == STDLIB else ORJSON)
