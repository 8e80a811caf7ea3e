"""One rule reads every identifier as a reader sees it: what looks alike is one (disclosure/folding.py).

The characters tried here are not a list kept by hand: each class is generated from Python's own unicodedata, so
a character Unicode adds to a class, or one nobody thought of, is tried too — every dash (category Pd, and what
NFKC makes one, U+2011 NON-BREAKING HYPHEN), every space (Zs), every format character (Cf), every character
named as a full stop or an at-sign, and every Cyrillic, Greek, Armenian or Coptic letter that Unicode names as a
Latin letter ("CYRILLIC SMALL LETTER O"). Each must hide no address, no person's identifier, no "Whole site" and
no blank term name. Found by the third hostile review: "jane.doe@uni‑bonn.de" (U+2011),
"jean‐pierre.dupont@example.edu" (U+2010) and "Sandbox of Jean‑Pierre Dupont" were published."""

import re
import sys
import unicodedata

import pytest

from lms_refresh.config.validators import label as term_label
from lms_refresh.disclosure import folding
from lms_refresh.disclosure.names import carries_address, clean_name
from lms_refresh.disclosure.redaction import REDACTED, scrub_text
from lms_refresh.run import report_data


def _characters(test):
    return [chr(code) for code in range(sys.maxunicode + 1) if test(chr(code))]


def _name(char):
    return unicodedata.name(char, f"U+{ord(char):04X}")


DASHES = _characters(lambda c: unicodedata.category(c) == "Pd" or (
    len(unicodedata.normalize("NFKC", c)) == 1 and unicodedata.category(unicodedata.normalize("NFKC", c)) == "Pd"))
SPACES = _characters(lambda c: unicodedata.category(c) == "Zs")
FORMATS = _characters(lambda c: unicodedata.category(c) == "Cf")
FULL_STOPS = _characters(lambda c: unicodedata.category(c) == "Po" and unicodedata.name(c, "").endswith("FULL STOP"))
AT_SIGNS = _characters(lambda c: unicodedata.name(c, "").endswith("COMMERCIAL AT") and unicodedata.category(c) != "Cf")
_TWIN = re.compile(r"(?:CYRILLIC|GREEK|ARMENIAN|COPTIC) ((?:SMALL|CAPITAL) LETTER [A-Z ]+)")


def _latin_twin(char):
    named = _TWIN.fullmatch(unicodedata.name(char, ""))
    try:
        return unicodedata.lookup(f"LATIN {named.group(1)}") if named else None
    except KeyError:
        return None


TWINS = [(char, _latin_twin(char)) for char in _characters(lambda c: unicodedata.category(c)[0] == "L")
         if _latin_twin(char)]


def test_the_generated_classes_hold_what_they_are_about():
    """A guard on the generators themselves: each class is as big as Unicode 14 makes it, and holds the review's
    characters."""
    assert len(DASHES) >= 25 and {"\u2010", "\u2011", "\u2212"} & set(DASHES) == {"\u2010", "\u2011"}
    assert len(SPACES) == 17 and len(FORMATS) >= 160
    assert {"\u3002", "\uff0e", "\u0589"} <= set(FULL_STOPS) and {"@", "\ufe6b", "\uff20"} <= set(AT_SIGNS)
    assert ("\u043e", "o") in TWINS and ("\u0430", "a") in TWINS and len(TWINS) >= 10


@pytest.mark.parametrize("dash", DASHES, ids=map(_name, DASHES))
def test_an_address_or_a_name_written_with_any_dash_is_found(dash):
    for address in (f"jane.doe@uni{dash}bonn.de", f"jean{dash}pierre.dupont@example.edu"):
        assert scrub_text(f"Skipped {address}: mail {address}") == f"Skipped {REDACTED}: mail {REDACTED}"
        assert clean_name(f"Sandbox of {address}") == f"Sandbox of {REDACTED}"
        assert carries_address(f"https://lms.example/course/{address}")
    assert clean_name(f"Sandbox of Jean{dash}Pierre Dupont", identifiers=["Jean-Pierre Dupont"]) == \
        f"Sandbox of {REDACTED}"
    assert clean_name("Sandbox of Jean-Pierre Dupont", identifiers=[f"Jean{dash}Pierre Dupont"]) == \
        f"Sandbox of {REDACTED}"


@pytest.mark.parametrize("space", SPACES, ids=map(_name, SPACES))
def test_a_name_written_with_any_space_is_found_and_whole_site_is_marked(space):
    assert clean_name(f"Sandbox of Jean{space}Dupont", identifiers=["Jean Dupont"]) == f"Sandbox of {REDACTED}"
    assert report_data.label("c", {"c": f"Whole{space}site"}).endswith(report_data.COURSE_MARK)


@pytest.mark.parametrize("char", FORMATS, ids=map(_name, FORMATS))
def test_a_format_character_hides_no_address_and_no_identifier(char):
    assert scrub_text(f"mail jane.doe{char}@example.edu now") == f"mail {REDACTED} now"
    assert clean_name(f"Sandbox jd{char}oe", identifiers=["jdoe"]) == f"Sandbox {REDACTED}"
    assert folding.looks_like(f"Whole si{char}te") == folding.looks_like("Whole site")


@pytest.mark.parametrize("dot", FULL_STOPS, ids=map(_name, FULL_STOPS))
def test_an_address_written_with_any_full_stop_is_found(dot):
    assert scrub_text(f"mail jane{dot}doe@example{dot}edu now") == f"mail {REDACTED} now"


@pytest.mark.parametrize("at", AT_SIGNS, ids=map(_name, AT_SIGNS))
def test_an_address_written_with_any_at_sign_is_found(at):
    assert scrub_text(f"mail jane.doe{at}example.edu now") == f"mail {REDACTED} now"


@pytest.mark.parametrize("letter, latin", TWINS, ids=[_name(letter) for letter, _ in TWINS])
def test_a_letter_named_as_a_latin_one_hides_no_identifier(letter, latin):
    """Read as its Latin twin, or, where the confusables say it looks like another Latin letter (CYRILLIC SMALL
    LETTER U is "у", like y), as that one: an ASCII letter either way."""
    form = folding.bare(letter)
    assert form == folding.bare(latin) or (latin.isascii() and form.isascii() and form.isalpha()), (form, latin)
    assert clean_name(f"Notes zq{letter}zq", identifiers=[f"zq{form}zq"]) == f"Notes {REDACTED}"
    assert clean_name(f"Notes zq{form}zq", identifiers=[f"zq{letter}zq"]) == f"Notes {REDACTED}"


# Letters that look like Latin ones although Unicode names them otherwise (UTS #39's confusables): the review's
# Cyrillic о and е, the Greek omicron, the Cyrillic р, с, х, у.
LOOK_ALIKE = {"Cyrillic o": "Wh\u043ele site", "Cyrillic ie": "Whole sit\u0435", "Greek omicron": "Wh\u03bfle site",
              "full-width": "\uff37\uff48\uff4f\uff4c\uff45\u3000\uff53\uff49\uff54\uff45",
              "Cyrillic capitals": "WH\u041eL\u0415 SIT\u0415", "a no-break space": "Whole\u00a0site",
              "a braille blank": "Whole\u2800site"}


@pytest.mark.parametrize("name", LOOK_ALIKE.values(), ids=LOOK_ALIKE.keys())
def test_a_course_named_like_the_whole_site_is_marked_as_a_course(name):
    assert report_data.label("https://lms.example/course/1", {"https://lms.example/course/1": name}) == \
        clean_name(name) + report_data.COURSE_MARK
    assert report_data.label(None, {}) == report_data.SITE_LABEL


def test_identifiers_written_with_look_alike_letters_are_found():
    assert clean_name("Sandbox \u0440\u0441\u0445\u0443", identifiers=["pcxy"]) == f"Sandbox {REDACTED}"
    assert clean_name("Sandbox of j\u0501\u043e\u0435", identifiers=["jdoe"]) == f"Sandbox of {REDACTED}"
    assert scrub_text("mail j\u0430ne.doe@ex\u0430mple.edu") == f"mail {REDACTED}"


def test_names_in_other_scripts_are_kept_as_written():
    """Look-alike letters are read as Latin ones only to be compared: a name in Cyrillic or Greek is published
    as it was written."""
    for name in ("\u0412\u0432\u0435\u0434\u0435\u043d\u0438\u0435 \u0432 \u0445\u0438\u043c\u0438\u044e",
                 "\u0395\u03b9\u03c3\u03b1\u03b3\u03c9\u03b3\u03ae", "Jean\u2011Pierre's course"):
        assert clean_name(name, identifiers=["jdoe"]) == name


@pytest.mark.parametrize("blank", ["\u2800", "\u3164", "\u2800\u3000\u2800", "\u0301\u2800"])
def test_a_term_name_that_shows_as_nothing_is_refused(blank):
    with pytest.raises(ValueError, match="must show as something"):
        term_label(blank)
