"""lms_refresh/disclosure/names.py: what a course name may be published as."""

import pytest

from lms_refresh.disclosure.names import MAX_NAME_CHARS, actor_identifiers, clean_name, pick_language, reduce_multilang


def span(tag, text, first="lang"):
    if first == "lang":
        return f'<span lang="{tag}" class="multilang">{text}</span>'
    return f"<span class='multilang' lang='{tag}'>{text}</span>"


@pytest.mark.parametrize(("text", "language", "expected"), [
    (span("en", "Maths") + span("fr", "Maths (FR)"), "fr", "Maths (FR)"),
    (span("en", "Maths") + " " + span("fr", "Maths (FR)", first="class"), "fr", "Maths (FR)"),  # either order
    (span("en", "Maths") + span("fr", "Mathématiques"), "fr_CA", "Mathématiques"),  # its base language
    (span("de", "Mathe") + span("en", "Maths"), "fr", "Mathe"),  # neither: the group's first
    (span("en", "Algebra") + " and " + span("fr", "Géométrie") + span("en", "Geometry"), "fr",
     "Algebra and Géométrie"),  # two groups, text between them kept; the first group only has "en"
    ('<lang lang="en">Physics</lang><lang lang="pt_br">Física</lang>', "pt-BR", "Física"),  # the older form
    ("No markup <span>here</span>", "en", "No markup <span>here</span>"),
])
def test_multilang_markup_is_reduced_as_moodle_shows_it(text, language, expected):
    assert reduce_multilang(text, language) == expected


@pytest.mark.parametrize(("names", "language", "expected"), [
    ({"fr": "Cours", "en-US": "Course US", "en": "Course"}, "fr", "Cours"),
    ({"FR": "Cours", "en": "Course"}, "fr", "Cours"),  # tags in any letter case
    ({"de": "Kurs", "en-US": "Course US", "en": "Course"}, "fr", "Course US"),
    ({"de": "Kurs", "en": "Course"}, "fr", "Course"),
    ({"zz": "Zed", "de": "Kurs", "ar": "Arabic"}, "fr", "Arabic"),  # sorted tags: deterministic
    ({"fr": "", "en": "Course"}, "fr", "Course"),  # an empty text is no name
    ({"fr": 7, "en": None}, "fr", None),
    ("Course", "fr", None),  # not a language map
])
def test_a_language_map_is_read_in_the_language_then_en_us_then_en_then_any(names, language, expected):
    assert pick_language(names, language) == expected


def test_a_clean_name_has_no_control_or_format_characters_and_is_bounded():
    assert clean_name("A\x00B\u202eC\u2066D\u200dE\ufeffF\ud800G") == "ABCDEFG"
    assert clean_name(" one\t two\n\n three\u2028four ") == "one two three four"
    assert clean_name("z" * 10_000) == "z" * MAX_NAME_CHARS
    assert clean_name("\x00\u202e ") is None and clean_name(None) is None and clean_name(42) is None
    assert clean_name("Intro <script>alert(1)</script>") == "Intro <script>alert(1)</script>"  # text, not markup


def test_a_clean_name_keeps_no_address_and_no_identifier_of_its_writer():
    assert clean_name("Tutor: Jane.Doe@Example.EDU, room 4") == "Tutor: [redacted], room 4"
    assert clean_name("Mentoring of jdoe42 (JDOE42)", identifiers=["jdoe42"]) == \
        "Mentoring of [redacted] ([redacted])"
    assert clean_name("jdoe42", identifiers=["jdoe42"]) == "[redacted]"


def test_an_address_cut_off_by_the_read_bound_does_not_survive_in_part():
    """A text longer than what is read is cut; cleaning can bring the cut near the front (here 3,990
    zero-width characters vanish): the word cut in two there goes, so no part of an address remains."""
    name = clean_name("Course " + "\u200b" * 3990 + " jane.doe@example.edu")
    assert name == "Course" and "jane" not in name


def test_the_identifiers_of_an_actor_and_its_members():
    actor = {"objectType": "Group", "name": "Team A", "mbox": "mailto:team@example.edu",
             "member": [{"account": {"homePage": "https://lms.example.edu", "name": "u77"}},
                        {"openid": "https://id.example.edu/u78"}, "junk"]}
    assert actor_identifiers(actor) == ["mailto:team@example.edu", "Team A", "u77", "https://id.example.edu/u78"]
    assert actor_identifiers(None) == [] and actor_identifiers({"mbox_sha1sum": "ab" * 20}) == ["ab" * 20]
