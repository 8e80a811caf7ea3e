"""Text as a reader sees it, so that what must not be shown is found however it is written.

A pattern reads code points; a reader sees glyphs. An e-mail address can be hidden from the pattern by a
character that shows as nothing ("jane\ufe0f@example.edu" looks like jane@example.edu), by a mark the pattern
does not count as part of a word, or by a compatibility form that shows as the character it stands for (the
full-width "＠" and "．"). `view` is a text as the pattern should read it, with the place in the text each of its
characters came from, so that `redacted` removes what is found there from the text itself and leaves the rest
as it was written.
"""

import functools
import re
import unicodedata

# Unicode's Default_Ignorable_Code_Point property (DerivedCoreProperties.txt of Unicode 14.0, the version of Python
# 3.11's unicodedata; the property is stable: a code point in it stays in it): what a renderer shows as nothing
# when it does not support it. unicodedata has no API for the property, so these are the file's ranges, in order:
# soft hyphen, combining grapheme joiner, Arabic letter mark, Hangul fillers, Khmer inherent vowels, Mongolian
# variation selectors and vowel separator, zero-width and bidi characters, word joiner to nominal digit shapes,
# Hangul filler, variation selectors, BOM, half-width Hangul filler, reserved FFF0-FFF8, shorthand format
# controls, musical format controls, tags and variation selectors 17-256 (E0000-E0FFF).
IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
# IDNA's other label separators (RFC 3490, 3.1), which mail software reads as ".": NFKC has already made the
# full-width and half-width ones this one.
_DOTS = {"\u3002": "."}


@functools.lru_cache(maxsize=4096)
def _fold(char):
    """What `char` is in a view: nothing if it shows as nothing or is a mark (it splits no word for a reader), else
    its NFKC form without marks ("＠" is "@", "ｊ" "j", "क़" "क"), or itself where that form would split a word
    the character is part of (½ is 1⁄2, whose fraction slash is no letter): a view joins words, never splits one,
    so that what a pattern finds in the text, it finds whole in the view."""
    if IGNORABLE.match(char) or unicodedata.category(char)[0] == "M":
        return ""
    form = "".join(part for part in unicodedata.normalize("NFKC", char) if unicodedata.category(part)[0] != "M")
    if (char.isalnum() or char == "_") and not form.isalnum():
        return char
    return _DOTS.get(form, form)


def looks_like(text):
    """What `text` looks like, to compare it with others: two texts that differ only in letter case, in how Unicode
    spells a letter ("A\u0301" and "\u00c1"), in characters shown as nothing, or in white space (a Hangul filler
    is shown as one) are one."""
    text = IGNORABLE.sub("", _BLANKS.sub(" ", text))
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


_BLANKS = re.compile("[\u115f\u1160\u3164\uffa0]")  # Hangul fillers: default-ignorable, yet shown as blank


def one_case(text):
    """`text` in one letter case whichever it was written in (upper first: "ı" and "i" are both "I")."""
    return text.upper().casefold()


def view(text):
    """Return (folded, origin): `text` as a pattern should read it (`_fold` of each character) and, for each
    character of `folded`, the index in `text` of the character it came from."""
    pieces, origin = [], []
    for index, char in enumerate(text):
        form = char if char.isascii() else _fold(char)
        pieces.append(form)
        origin += [index] * len(form)
    return "".join(pieces), origin


def redacted(text, pattern, replacement, triggers):
    """Return `text` with `replacement` for each match of `pattern` in its view that the text does not show as it
    is (a character of it folded or left out): what the pattern finds in the text itself is left to the caller.
    Without one of `triggers` in the text's NFKC form, nothing is looked for (the common case: no view at all)."""
    if text.isascii():
        return text
    composed = unicodedata.normalize("NFKC", text)
    if not any(trigger in composed for trigger in triggers):
        return text
    folded, origin = view(text)
    kept, position = [], 0
    for match in pattern.finditer(folded):
        start, end = max(origin[match.start()], position), origin[match.end() - 1] + 1
        if text[start:end] != match.group():
            kept += (text[position:start], replacement)
            position = end
    return "".join(kept) + text[position:] if kept else text
