"""Text as a reader sees it, so that what must not be shown is found however it is written.

A pattern reads code points; a reader sees glyphs. An e-mail address or a person's name can be hidden from the
pattern by a character that shows as nothing ("jane\ufe0f@example.edu" looks like jane@example.edu), by a mark the
pattern does not count as part of a word, by a compatibility form that shows as the character it stands for (the
full-width "＠" and "．"), or by a character that looks like another: a dash other than "-" ("uni\u2011bonn.de"),
a blank other than " ", a letter of another script ("jdое" with a Cyrillic о and е). One rule reads them all,
in the spirit of Unicode's confusables skeleton (UTS #39): each character is taken in its compatibility form
(NFKC), without marks and what shows as nothing, and each of what is left in the one form of all that look like it
(`_one_form`: white space and blanks " ", dashes "-", full stops ".", at-signs "@", look-alike letters the Latin
letter). `view` is a text so read, with the place in the text each of its characters came from, so that
`redacted` removes what is found there from the text itself and leaves the rest as it was written. An identifier
of a person is looked for alike (disclosure/redaction.py): `words` finds it as a word ("_" parts words too), as
written and in a bare view (`bare`: marks left out, also of a composed letter), and `replaced` removes from the
text what it finds in the bare view ("ｊｄｏｅ", "j\u0301doe", "jdое" are jdoe). `looks_like` compares two
names so (a term's, the report's "Whole site"). An ASCII text is its own view, and costs nothing here.
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
# Letters that look like an ASCII letter although Unicode names them otherwise: Cyrillic, Greek and Armenian ones,
# and Latin ones outside ASCII (ɑ, ı, ɡ, small capitals), as Unicode's confusables data (UTS #39) maps them to one
# ASCII letter. unicodedata cannot tell these: it names "о" CYRILLIC SMALL LETTER O, which `_one_form` finds by its
# name, but "е" CYRILLIC SMALL LETTER IE. Each key is the ASCII letter, each value the letters that look like it.
_LOOK_ALIKE = {
    "a": "\u0430\u0251\u03b1", "c": "\u0441\u03f2\u1d04", "d": "\u0501", "e": "\u0435\u04bd", "g": "\u0261\u0581",
    "h": "\u04bb\u0570", "i": "\u0456\u03b9\u0269\u0131", "j": "\u0458\u03f3", "l": "\u04cf", "n": "\u0578",
    "o": "\u043e\u03bf\u03c3\u0585\u1d0f", "p": "\u0440\u03c1", "q": "\u051b\u0566", "s": "\u0455", "u": "\u057d\u03c5",
    "v": "\u03bd\u0475", "w": "\u051d\u0461", "x": "\u0445\u03c7", "y": "\u0443\u03b3\u04af",
    "A": "\u0410\u0391", "B": "\u0412\u0392", "C": "\u0421\u03f9", "E": "\u0415\u0395", "H": "\u041d\u0397",
    "I": "\u0406\u0399\u04c0", "J": "\u0408", "K": "\u041a\u039a", "M": "\u041c\u039c", "N": "\u039d",
    "O": "\u041e\u039f", "P": "\u0420\u03a1", "S": "\u0405", "T": "\u0422\u03a4", "X": "\u0425\u03a7",
    "Y": "\u04ae\u03a5", "Z": "\u0396"}
_LOOK_ALIKE = {letter: latin for latin, letters in _LOOK_ALIKE.items() for letter in letters}
# A letter of these scripts named as a Latin letter is shown as one (CYRILLIC SMALL LETTER A, ... SCHWA).
_NAMED_LETTER = re.compile(r"(?:CYRILLIC|GREEK|ARMENIAN|COPTIC) ((?:SMALL|CAPITAL) LETTER [A-Z ]+)")
# Punctuation and symbols Unicode names as a dash (HYPHEN, FIGURE DASH, MINUS SIGN, HYPHEN BULLET...), besides those
# of its Pd category; a dot (IDEOGRAPHIC FULL STOP, ARMENIAN FULL STOP...); an at-sign (SMALL COMMERCIAL AT).
_NAMED = ((re.compile(r"(?:^| )(?:HYPHEN(?: BULLET)?|DASH|MINUS SIGN)$"), "-"),
          (re.compile(r"(?:^| )FULL STOP$"), "."), (re.compile(r"(?:^| )COMMERCIAL AT$"), "@"))
# Shown as a blank although not white space: the spacing Hangul fillers (default-ignorable, yet most fonts draw
# them as wide as a letter; the conjoining CHOSEONG and JUNGSEONG ones are drawn as nothing) and the blank Braille
# pattern.
_BLANK = re.compile(r"BRAILLE PATTERN BLANK|(?:HALFWIDTH )?HANGUL FILLER")


@functools.lru_cache(maxsize=4096)
def _one_form(part):
    """The one form of a character that looks like others (a part of a character's NFKC form, no mark): " " for
    what shows as a blank, "-" for a dash, "." for a full stop, "@" for an at-sign, the ASCII letter for a letter
    of another script that looks like it (UTS #39's skeleton, for these classes), else `part` itself."""
    if part.isascii():
        return part
    category, name = unicodedata.category(part), unicodedata.name(part, "")
    if category == "Zs" or _BLANK.fullmatch(name):
        return " "
    if category[0] in "PS":
        if category == "Pd":
            return "-"
        return next((form for pattern, form in _NAMED if pattern.search(name)), part)
    if category[0] == "L":
        if part in _LOOK_ALIKE:
            return _LOOK_ALIKE[part]
        named = _NAMED_LETTER.fullmatch(name)
        latin = _named(f"LATIN {named.group(1)}") if named else None
        if latin:  # CYRILLIC SMALL LETTER SCHWA is LATIN SMALL LETTER SCHWA, and looks like it
            return _one_form(latin)
        if name.startswith("LATIN "):  # LATIN SMALL LETTER ALPHA is read as GREEK SMALL LETTER ALPHA is: "a"
            return next((_LOOK_ALIKE[twin] for script in _SCRIPTS
                         if (twin := _named(f"{script} {name[6:]}")) in _LOOK_ALIKE), part)
    return part


_SCRIPTS = ("CYRILLIC", "GREEK", "ARMENIAN", "COPTIC")


def _named(name):
    """The character Unicode names `name`, or None."""
    try:
        return unicodedata.lookup(name)
    except KeyError:
        return None


@functools.lru_cache(maxsize=4096)
def _fold(char):
    """What `char` is in a view: nothing if it shows as nothing or is a mark (it splits no word for a reader), else
    its NFKC form without marks, each character of it in its one form (`_one_form`: "＠" is "@", "ｊ" "j", "‑" "-",
    "о" "o", "क़" "क"), or itself where that form would split a word the character is part of (½ is 1⁄2, whose
    fraction slash is no letter): a view joins words, never splits one, so that what a pattern finds in the text,
    it finds whole in the view."""
    if _BLANK.fullmatch(unicodedata.name(char, "")) or unicodedata.category(char) == "Zs":
        return " "
    if IGNORABLE.match(char) or unicodedata.category(char) in ("Mn", "Mc", "Me", "Cf"):
        return ""
    form = "".join(_one_form(part) for part in unicodedata.normalize("NFKC", char)
                   if unicodedata.category(part)[0] != "M")
    if (char.isalnum() or char == "_") and not form.isalnum():
        return char
    return form


def looks_like(text):
    """What `text` looks like, to compare it with others: two texts that differ only in letter case, in how Unicode
    spells a letter ("A\u0301" and "\u00c1"), in characters shown as nothing, in white space (a Hangul filler is
    shown as one), or in characters that look alike (`_one_form`: "Ｗｈｏｌｅ", "Whоle" with a Cyrillic о) are one."""
    return " ".join(one_case(view(unicodedata.normalize("NFC", text))[0]).split())


def one_case(text):
    """`text` in one letter case whichever it was written in (upper first: "ı" and "i" are both "I")."""
    return text.upper().casefold()


@functools.lru_cache(maxsize=4096)
def _bare(char):
    """`char` as in a view, and without the marks of a letter that holds them ("é" is "e", as "e\u0301" is in a
    view; "ё" is "e", as "е" is): how an identifier is compared, where a mark added to a letter must not hide the
    word."""
    form = _fold(char)
    if form.isascii():
        return form
    kept = "".join(_one_form(part) for part in unicodedata.normalize("NFD", form)
                   if unicodedata.category(part)[0] != "M")
    return unicodedata.normalize("NFC", kept) or form


def view(text, bare=False):
    """Return (folded, origin): `text` as a pattern should read it (`_fold` of each character; `_bare` if `bare`)
    and, for each character of `folded`, the index in `text` of the character it came from."""
    pieces, origin, fold = [], [], _bare if bare else _fold
    for index, char in enumerate(text):
        form = char if char.isascii() else fold(char)
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


def words(values, shortest):
    """A pattern, in any letter case, of each of `values` as a word, as written and as a reader sees it (its bare
    view, if that is `shortest` characters or more), longest first: an address goes whole before a shorter value in
    it. White space and "_" part words, in a text and in a value alike ("Jane Doe" is in "sandbox_Jane_Doe"). A
    letter at an edge of a value must have no letter beside it ("ann" is not in "Annual"), a digit no letter or
    digit: a value glued to digits is found ("jdoe2026", "2026jdoe": user names take years and numbers so, and
    keeping those would publish the name), a number glued to another, or to letters, is not (an account "123" is
    not in an origin "export.ndjson:1234", nor in a hex id's "2c123f": it would garble them, and what is kept of
    such a text names no one: a number glued to digits is another number)."""
    forms = set(values) | {form for form in map(bare, values) if len(form) >= shortest}
    return _Words(sorted(forms, key=len, reverse=True))


class _Words:
    """The pattern `words` returns, compiled only for a text it may be found in.

    Compiling it costs about 2 ms for the half-dozen identifiers of one statement, and a course's name is cleaned
    so once for each statement that names it (records.title_of) — at 50,000 courses, most of a run. A match holds
    each part of one of the values (a run of characters without white space or "_") as it is written, in some
    letter case: where a text holds the longest part of none of them, nothing can be found and nothing is compiled.
    For an ASCII text and part that is a substring test of their lower case (re's IGNORECASE pairs an ASCII letter
    with no other ASCII character than its other case); else the part itself, compiled alone, is searched for.
    """

    __slots__ = ("_forms", "_needles", "_pattern")

    def __init__(self, forms):
        self._forms, self._pattern = forms, None
        # (the longest part in lower case if ASCII else None, the part) of each form
        self._needles = []
        for form in forms:
            part = max(form.replace("_", " ").split() or [""], key=len)  # str.split's white space is re's \s
            self._needles.append((part.lower() if part.isascii() else None, part))

    def _may_hold(self, text):
        lowered = text.lower() if text.isascii() else None
        for ascii_part, part in self._needles:
            if ascii_part is not None and lowered is not None:
                if ascii_part in lowered:
                    return True
            elif _literal(part).search(text):
                return True
        return False

    @property
    def pattern(self):
        if self._pattern is None:
            self._pattern = re.compile("|".join(map(_word, self._forms)), re.IGNORECASE)
        return self._pattern

    def sub(self, replacement, text):
        return self.pattern.sub(replacement, text) if self._may_hold(text) else text

    def finditer(self, text):
        return self.pattern.finditer(text) if self._may_hold(text) else iter(())


@functools.lru_cache(maxsize=1024)
def _literal(part):
    """`part` as a pattern in any letter case, as `_word` writes it (re.escape)."""
    return re.compile(re.escape(part), re.IGNORECASE)


def _word(value):
    head, core, tail = re.fullmatch(r"([\s_]*)(.*?)([\s_]*)", value, re.DOTALL).groups()
    body = re.escape(head) + r"[\s_]+".join(map(re.escape, re.split(r"[\s_]+", core))) + re.escape(tail)
    return _EDGES[0][_kind(value[0])] + body + _EDGES[1][_kind(value[-1])]


def _kind(char):
    return "letter" if re.match(r"[^\W\d_]", char) else "digit" if re.match(r"\d", char) else ""


# What may not stand before and after a value's edge of each kind: a letter beside a letter, a letter or digit
# beside a digit (\w without "_": a letter or digit).
_EDGES = ({"letter": r"(?<![^\W\d_])", "digit": r"(?<![^\W_])", "": ""},
          {"letter": r"(?![^\W\d_])", "digit": r"(?![^\W_])", "": ""})


def bare(text):
    """`text` as an identifier is compared with it: its bare view (an ASCII text is its own)."""
    return text if text.isascii() else view(text, bare=True)[0]


def replaced(text, pattern, replacement):
    """Return `text` with `replacement` for each match of `pattern` in its bare view (`view(text, bare=True)`): from
    the character of the match's first to that of its last, with the characters after it that the view leaves out
    (marks, characters shown as nothing). An ASCII text is its own view: the caller has matched it already."""
    if text.isascii():
        return text
    folded, origin = view(text, bare=True)
    kept, position = [], 0
    for match in pattern.finditer(folded):
        if match.end() > match.start():
            start = max(origin[match.start()], position)
            end = max(origin[match.end()] if match.end() < len(origin) else len(text), origin[match.end() - 1] + 1)
            kept += (text[position:start], replacement)
            position = end
    return "".join(kept) + text[position:] if kept else text
