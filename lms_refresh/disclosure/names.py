"""Course names as they may be published: every name is text an attacker may have written.

A course's name comes from a course's author (Moodle's course table) or from whoever sends
statements to the LRS (an xAPI activity's `definition.name`). Before it is stored, and so before
it can reach a publication, `clean_name`:

- reduces Moodle's multilang markup (`<span lang="xx" class="multilang">…</span>`, and the older
  `<lang lang="xx">…</lang>`) to one language, as Moodle's multilang filter shows it;
- removes control characters, Unicode format characters (bidi overrides and isolates such as U+202E,
  zero-width joiners, the BOM) and every other code point a reader is shown nothing of (Unicode's
  default-ignorable code points: variation selectors, Khmer inherent vowels, Hangul fillers, tags;
  disclosure/folding.py), and turns line and paragraph separators into spaces;
- collapses runs of white space into one space;
- removes identifiers of people through lms_refresh.disclosure.redaction: anything shaped like an
  e-mail address (also as a reader sees it: "jane＠example.edu"), credentials, and (`identifiers`) the
  identifiers of every person in the naming statement (its actor, an Agent object, the context's team and
  instructor...: actor_identifiers), as words ("_" parts words) and as a reader sees them ("ｊｄｏｅ");
- bounds the result to MAX_NAME_CHARS characters, after all of the above, so that no cut leaves part of
  an address that the rule could no longer recognise.

Other markup (`<script>`, `<b>`) is kept as the text it is: a name is plain text, and whoever shows
it (a dashboard, the report) escapes it, as it must escape any text.
"""

import re
import unicodedata

from lms_refresh.disclosure import folding, redaction

MAX_NAME_CHARS = 200  # longer than any real course name, short enough for any dashboard's column
# Work done on a name is bounded too: a longer text is cut here first, then cleaned, redacted and bounded.
_MAX_READ = 20 * MAX_NAME_CHARS
_FALLBACK_LANGUAGES = ("en-us", "en")
_LONGEST_ADDRESS = 3 * 254  # RFC 5321's 254 octets, each percent-encoded at worst ("%40")
WITHHELD = ("the people of a statement too deep to walk",)  # actor_identifiers: no name of it can be shown

_MULTILANG = re.compile(
    r"<span\s+(?:lang=[\"']([A-Za-z0-9_-]{1,20})[\"']\s+class=[\"']multilang[\"']"
    r"|class=[\"']multilang[\"']\s+lang=[\"']([A-Za-z0-9_-]{1,20})[\"'])\s*>(.*?)</span\s*>"
    r"|<lang\s+lang=[\"']([A-Za-z0-9_-]{1,20})[\"']\s*>(.*?)</lang\s*>", re.IGNORECASE | re.DOTALL)
_SPACE = re.compile(r"\s+")
_REMOVED = {"Cc", "Cf", "Cs", "Co", "Cn"}  # controls, format (bidi, zero-width), surrogates, private, unassigned
_SPACED = {"Zl", "Zp"}


def _tag(language):
    return language.lower().replace("_", "-")


def reduce_multilang(text, language):
    """Return `text` with each group of adjacent multilang blocks (only white space between them) reduced to
    the block in `language`, else in its base language ("en" for "en-GB"), else the group's first block;
    text outside the blocks stays."""
    blocks = list(_MULTILANG.finditer(text))
    if not blocks:
        return text
    wanted, out, position, group = _tag(language), [], 0, []

    def flush():
        tags = [_tag(block.group(1) or block.group(2) or block.group(4)) for block in group]
        for choice in (wanted, wanted.split("-")[0], tags[0]):
            chosen = [block for block, tag in zip(group, tags, strict=True) if tag == choice]
            if chosen:
                out.append("".join(block.group(3) if block.group(3) is not None else block.group(5)
                                   for block in chosen))
                return

    for block in blocks:
        between = text[position:block.start()]
        if group and between.strip():
            flush()
            group = []
        if not group:
            out.append(between)
        group.append(block)
        position = block.end()
    flush()
    out.append(text[position:])
    return "".join(out)


def clean_name(text, *, language=None, identifiers=()):
    """Return `text` as it may be published (see the module doc), or None if nothing is left of it (or it
    is not text). `language` reduces Moodle's multilang markup; `identifiers` are identifier strings of
    the people in the statement that names it (actor_identifiers), removed wherever they appear — WITHHELD
    (people that could not be found) leaves nothing."""
    if not isinstance(text, str) or identifiers is WITHHELD:
        return None
    cut = len(text) > _MAX_READ
    text = text[:_MAX_READ]
    if language is not None:
        text = reduce_multilang(text, language)
    text = _plain(text)
    if identifiers:
        text = redaction.without_identifiers(text, [value for value in identifiers if value])
    else:
        text = redaction.scrub_text(text)
    if cut:
        # The last word was cut in two at _MAX_READ: it may be part of an address that redaction could not
        # recognise ("jane.doe@ex"), so it goes, whether or not cleaning brought it within MAX_NAME_CHARS (it
        # can reach the name from thousands of characters away, after removed ones) — but no more of it than
        # an address can be long, as a reader sees it (marks, which a view leaves out, take no room there): what
        # comes before began no address cut there.
        start = max(text.rfind(" "), 0)
        folded, origin = folding.view(text[start:])
        text = text[:start + (origin[len(folded) - _LONGEST_ADDRESS] if len(folded) > _LONGEST_ADDRESS else 0)]
    return text[:MAX_NAME_CHARS].rstrip() or None


def iri_label(iri):
    """Return what a chart calls a course its source gives no name: the last path segment of its IRI (after the last
    "/", a trailing "/" aside; the whole IRI when it has none), cleaned and bounded as a name is (`clean_name`);
    else the IRI so cleaned; never blank."""
    text = iri if isinstance(iri, str) else ""
    segment = text.rstrip("/").rpartition("/")[2]
    return clean_name(segment) or clean_name(text) or "(unnamed course)"


def carries_address(text):
    """Whether `text` (a course IRI, published as it is) holds an e-mail address as the redaction rule finds one,
    read as a reader sees it (folding.view), whose domain has a label after its first that a top-level domain could
    be: two letters or more, or an IDN's xn--. The rule itself removes more, which costs a shown text little; here
    a match quarantines a course's every statement, and course IRIs are often versioned so ("/course/BIO101@2026.1",
    "urn:course:x@v1.2")."""
    folded = text if text.isascii() else folding.view(text)[0]
    if "@" not in folded and "%40" not in folded and "%2540" not in folded:
        return False
    folded = _ENCODED.sub(_decoded, folded)  # "example.c%6Fm" is example.com to a mail client
    return any(any(map(_TOP_LEVEL.match, _AT.split(match.group())[-1].split(".")[1:]))
               for match in redaction.ADDRESS.finditer(folded))


_AT = re.compile("@|%40|%2540")
# A label that begins as a top-level domain does: what follows may be glued on ("example.edu-2026", "edu_fall").
_TOP_LEVEL = re.compile(r"[^\W\d_]{2}|(?i:xn--)")
_ENCODED = re.compile("%([0-9A-Fa-f]{2})")


def _decoded(match):
    """A percent-encoded letter, digit, "-", ".", "_" or "~" (RFC 3986's unreserved), decoded; anything else kept."""
    character = chr(int(match.group(1), 16))
    return character if character.isascii() and (character.isalnum() or character in "-._~") else match.group()


def _plain(text):
    """`text` composed (NFC), without the characters a name loses, its runs of white space as one space."""
    # Removed before composing: a combining grapheme joiner (U+034F) would keep apart what NFC composes.
    text = unicodedata.normalize("NFC", folding.IGNORABLE.sub("", text))
    text = "".join(" " if unicodedata.category(c) in _SPACED else c for c in text
                   if unicodedata.category(c) not in _REMOVED or c in "\t\n\r\f\v")
    return _SPACE.sub(" ", text).strip()


def pick_language(names, language):
    """Return the text of an xAPI language map `names` in `language`, else en-US, else en, else in the first
    language tag in sorted order (tags compared in any letter case); None if it holds no text."""
    if type(names) is not dict:
        return None
    texts = {}
    for tag in sorted(key for key, value in names.items() if type(key) is str and type(value) is str and value):
        texts.setdefault(tag.lower(), names[tag])
    for tag in (language.lower(), *_FALLBACK_LANGUAGES):
        if tag in texts:
            return texts[tag]
    return next(iter(texts.values()), None)


def actor_identifiers(actor):
    """Return the identifier strings that a name must not carry: of a naming statement (the mapper hands one so), those
    of every person in it, where the quarantine's Redactor finds them (redaction.people_in: actor, authority, an
    Agent or Group object, the context's instructor and team, a SubStatement's, Group members), or WITHHELD if it
    cannot be walked; of an xAPI actor, its own and its Group members'."""
    if type(actor) is dict and "actor" in actor:  # a statement: an Agent has no "actor"
        found = redaction.people_in(actor)
        return WITHHELD if found is None else found
    found = []
    for agent in [actor] + (actor.get("member") if type(actor) is dict and type(actor.get("member")) is list else []):
        if type(agent) is not dict:
            continue
        found += [agent.get(key) for key in ("mbox", "mbox_sha1sum", "openid", "name")]
        account = agent.get("account")
        if type(account) is dict:
            found.append(account.get("name"))
    return [value for value in found if type(value) is str and value.strip()]
