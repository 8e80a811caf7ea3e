"""An e-mail address written so that the redaction rule's pattern misses it while a reader still sees it — a
character shown as nothing (a variation selector, a Khmer inherent vowel, a tag), a mark the pattern does not
count, a full-width "＠" or "．" — is removed whole wherever the rule applies: any text shown (scrub_text), a
published course name (disclosure/names.py) and a quarantined record (Redactor); names in other scripts keep
every character. A name longer than what is read keeps no part of an address cut in two there."""

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers.statements import statement
from lms_refresh.disclosure.names import MAX_NAME_CHARS, clean_name
from lms_refresh.disclosure.redaction import REDACTED, Redactor, scrub_text
from lms_refresh.sources.xapi_fields import actor_identifier

KEY = bytes(range(32))
# jane.doe@example.edu as it can be written to look the same (or near enough) to whoever reads it.
HIDDEN = {
    "variation selector 16 before the @": "jane.doe\ufe0f@example.edu",
    "variation selector 16 inside the local part": "jo\ufe0fhn.doe@example.edu",
    "variation selector 17": "jane.doe\U000e0100@example.edu",
    "Khmer inherent vowel": "jane.doe\u17b4@example.edu",
    "Mongolian free variation selector": "jane.doe\u180b@example.edu",
    "tag character": "jane.doe@exam\U000e0041ple.edu",
    "a mark the pattern does not list": "jane.doe\u0951@example.edu",
    "full-width at": "jane.doe\uff20example.edu",
    "small at": "jane.doe\ufe6bexample.edu",
    "full-width full stop": "jane.doe@example\uff0eedu",
    "ideographic full stop (an IDNA label separator)": "jane.doe@example\u3002edu",
    "all full-width": "ｊａｎｅ．ｄｏｅ＠ｅｘａｍｐｌｅ．ｅｄｕ",
    "full-width percent-encoded at": "jane.doe％４０example.edu",
}
# Names in other scripts, whose marks and letters are theirs to keep (each already composed, as names keep them).
NAMES = {
    "Arabic with its vowel marks": "مُقَدِّمَة فِي البَرْمَجَة",
    "Devanagari with its vowel signs and virama": "कंप्यूटर विज्ञान का परिचय",
    "Chinese and Japanese": "计算机科学导论 コンピュータ科学入門",
    "half-width katakana": "ｺﾝﾋﾟｭｰﾀ",
    "Korean": "컴퓨터 과학 개론",
    "Hebrew with points": "מָבוֹא לְמַדְּעֵי הַמַּחְשֵׁב",
    "Thai": "การเขียนโปรแกรมเบื้องต้น",
    "Vietnamese": "Nhập môn Tin học",
    "French, composed": "Introduction à l'économie",
}


@pytest.mark.parametrize("hidden", HIDDEN.values(), ids=HIDDEN.keys())
def test_an_address_hidden_from_the_pattern_is_redacted_whole_in_any_text_shown(hidden):
    assert scrub_text(f"Skipped /srv/in/{hidden}/a.ndjson: mail {hidden}, please") == \
        f"Skipped /srv/in/{REDACTED}/a.ndjson: mail {REDACTED}, please"


# A name lost its format characters (the tags among them) already: the others hid an address from it.
@pytest.mark.parametrize("hidden", [HIDDEN[key] for key in HIDDEN if key != "tag character"],
                         ids=[key for key in HIDDEN if key != "tag character"])
def test_a_course_name_keeps_no_hidden_address(hidden):
    assert clean_name(f"Biology \u2014 tutor {hidden} (room 4)") == f"Biology \u2014 tutor {REDACTED} (room 4)"
    assert clean_name(f"Biology \u2014 tutor {hidden}", identifiers=["u77"]) == f"Biology \u2014 tutor {REDACTED}"


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_names_in_other_scripts_keep_every_character_while_a_hidden_address_beside_them_goes(name):
    assert clean_name(f"{name} \u2014 {HIDDEN['variation selector 16 before the @']}") == f"{name} \u2014 {REDACTED}"


def test_an_address_whose_local_part_is_in_another_script_goes_whole():
    """Devanagari's vowel signs are marks, which the pattern does not count as letters: before, only the part of
    the address after the last of them was found ("रा[redacted]")."""
    assert scrub_text("write to राम@example.in or संजय@example.in") == f"write to {REDACTED} or {REDACTED}"
    assert clean_name("Hindi \u2014 राम@example.in") == f"Hindi \u2014 {REDACTED}"


def test_a_course_name_shows_none_of_the_characters_a_reader_is_shown_nothing_of():
    assert clean_name("Bio\ufe0flogy\u17b4 101\U000e0041\u3164") == "Biology 101"


def test_a_quarantined_record_keeps_no_hidden_address_in_any_string():
    record = statement(learner="u1", score=7)  # the score makes it malformed
    record["result"]["response"] = ("mail jane.doe\ufe0f@example.edu or bob\uff20example.edu or "
                                    "carl@example.edu")
    record["verb"]["display"] = {"en-US": "asked ｄａｎ＠ｅｘａｍｐｌｅ．ｅｄｕ"}
    record["context"]["extensions"] = {"https://x.example/e": "mailto:jane.doe@example.edu",
                                       "https://x.example/f": "mailto:jane.doe@example\uff0eedu"}
    origin, reason, text, _ = Redactor(KEY, actor_identifier).row(
        "/srv/in/eve\u200b@example.edu.ndjson:3", "sent by eve\U000e0100@example.edu", json.dumps(record))
    kept = json.loads(text)
    # Free text is kept as its length and keyed hash alone; an IRI loses the address.
    assert kept["result"]["response"].startswith("[text: 65 characters, not only ASCII, keyed hash ")
    assert kept["verb"]["display"]["en-US"].startswith("[text: ")
    extensions = kept["context"]["extensions"]
    assert extensions["https://x.example/e"] == f"mailto:{REDACTED}"
    # Not ASCII: no IRI by shape, so kept as its length and keyed hash.
    assert extensions["https://x.example/f"].startswith("[text: 27 characters, not only ASCII, keyed hash ")
    assert origin == f"/srv/in/{REDACTED}:3" and reason == f"sent by {REDACTED}"  # as for eve@example.edu.ndjson


# Zero-width characters vanish when a name is cleaned: so many that the address cut in two where a name stops being
# read (4,000 characters) ends up within the 200 published, after "Course " and `words` letters.
@pytest.mark.parametrize("words", range(182, 192))
def test_a_name_cut_where_it_stops_being_read_keeps_no_part_of_the_address_cut_there(words):
    fragment = "jane.doe@ex"  # of jane.doe@example.edu, cut at the 4,000th character
    head = "Course " + "\u200b" * (4000 - 7 - words - 1 - len(fragment)) + "y" * words + " "
    name = clean_name(head + fragment + "ample.edu and more")
    assert len(head + fragment) == 4000 and len(f"Course {'y' * words} {fragment}") > MAX_NAME_CHARS
    assert name == f"Course {'y' * words}"


def test_a_word_cut_where_a_name_stops_being_read_goes_however_many_marks_it_holds():
    """The part of the cut word that goes was bounded in code points: with eight combining marks on each letter
    (kept in a name, invisible to a reader) the start of the local part stayed (review: "Course jane.doe.smith")."""
    marked = "".join(letter + "\u0338" * 8 for letter in "jane.doe.smith.secret.mailbox.name.that.is.long.enough")
    domain = "".join(letter + "\u0338" * 8 for letter in "departmentofcomputerscienceandengineeringresearchlab")
    cut = marked + "@" + domain[:-9]  # the domain's first label, less its last letter: no dot yet
    name = "Course " + "\u200b" * (4000 - 7 - len(cut)) + cut + "\u0338" * 8 + "b.example.edu"
    assert clean_name(name) == "Course"
    assert clean_name("z" * 10000) == "z" * MAX_NAME_CHARS  # a word of letters alone still gives its first 200


_INVISIBLE = st.sampled_from(["\ufe0f", "\ufe00", "\U000e0100", "\U000e01ef", "\u17b4", "\u17b5", "\u180b",
                              "\u034f", "\U000e0020", "\u2064", "\ufff0", "\u0951", "\u0f35", "\u115f",
                              "\u1160", "\u200d", "\u00ad"])
_FULL_WIDTH = {"@": ["\uff20", "\ufe6b"], ".": ["\uff0e", "\u3002", "\uff61"]}
# Letters whose compatibility forms are other letters, or hold a mark or a character that is no letter (½ is 1⁄2):
# the rule's pattern reads each as part of the word it is in, and must go on doing so.
_COMPATIBLE = st.sampled_from(["½", "Ĳ", "\u0958", "ﬁ", "ａ", "²", "ǅ", "\u0301", "\u093c"])
# Every generated local part starts with "zq" and every domain with "xj": no fixed text here holds either.
_LEAK = re.compile("zq|xj")


@st.composite
def hidden_addresses(draw):
    """zq…@xj….edu with invisible characters put anywhere and some of its @ and dots written full-width."""
    local = "zq" + draw(st.text(st.sampled_from("abcdefghij0123456789._+-") | _COMPATIBLE, max_size=8))
    address = f"{local}@xj{draw(st.text(st.sampled_from('abcdefghij0123456789-') | _COMPATIBLE, max_size=8))}.edu"
    written = []
    for index, char in enumerate(address):
        if char in _FULL_WIDTH and draw(st.booleans()):
            char = draw(st.sampled_from(_FULL_WIDTH[char]))
        written.append(char)
        if index < len(address) - 1 and draw(st.integers(0, 3)) == 0:
            written.append(draw(_INVISIBLE))
    text = "".join(written)
    return text if text != address else "zq\ufe0f" + address[2:]  # at least one thing hidden


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(hidden_addresses(), st.sampled_from(["{}", "mail {} now", "/srv/in/{}.ndjson", "({})", "مدرس: {}",
                                            "講師 {} まで", "x={}&y=1", "https://lms.example/u/{}/p"]))
def test_an_address_with_invisible_and_full_width_characters_anywhere_is_redacted_whole(address, context):
    text = context.format(address)
    for kept in (scrub_text(text), clean_name(text)):
        assert not _LEAK.search(kept.casefold()) and REDACTED in kept, (text, kept)
