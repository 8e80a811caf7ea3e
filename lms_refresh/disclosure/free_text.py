"""Free text out of a quarantined record: its structure stays, a stranger's words go (disclosure/redaction.py's
Redactor applies it to every record it keeps)."""

import hashlib
import hmac
import re
import unicodedata

_REDACTED = "[redacted]"  # redaction.REDACTED, which imports this module
_SHORTEST = 3  # a shorter text is not looked for in a reason: it would garble its words


class Shape:
    """A quarantined record without free text: what an operator needs to fix its source, and nothing a stranger wrote.

    The record keeps its structure — every field path, every number, boolean and null, and of its strings those whose
    shape says they are no one's words: an IRI (the identifiers found in the record removed, then `scrub_text`), a
    UUID or other hexadecimal id, a time, a duration, a number, an xAPI enumeration (an objectType, an
    interactionType), a pseudonym marker, and in a Moodle row its lower-case names (component, action, target...).
    Every other string — a language map's texts, a name, a description, a response, an extension's text, a key that
    is no field name — is replaced by `[text: N characters, keyed hash H]` (with ", control characters", ", format
    characters", ", lone surrogates", ", not only ASCII" where it holds such): its type and length, and an HMAC under
    the pseudonymisation key, by which an operator who has the key can tell two values apart, or confirm one, and
    nobody else can."""

    def __init__(self, key, scrub, *, moodle):
        self._key, self._scrub, self._moodle, self._replaced = key, scrub, moodle, {}

    def of(self, value):
        if isinstance(value, str):
            return self._string(value, _KEPT)
        if isinstance(value, list):
            return [self.of(item) for item in value]
        if isinstance(value, dict):
            # An "id" is structure even as a bare token: an interaction component's ("a", "golf").
            return {self._string(key, _KEPT_KEY): self._string(item, _KEPT_ID) if key == "id" and isinstance(
                item, str) else self.of(item) for key, item in value.items()}
        return value

    def _string(self, text, kept):
        scrubbed = self._scrub(text)
        if scrubbed == _REDACTED or _MARKER.fullmatch(text) or kept.fullmatch(text) or (
                self._moodle and _MOODLE_NAME.fullmatch(text)):
            return scrubbed
        digest = hmac.new(self._key, b"quarantined text\0" + text.encode("utf-8", "surrogatepass"), hashlib.sha256)
        kinds = "".join(f", {kind}" for kind, holds in _KINDS if any(map(holds, text)))
        described = f"[text: {len(text)} characters{kinds}, keyed hash {digest.hexdigest()[:16]}]"
        self._replaced[text] = described
        return described

    def quoted(self, reason):
        """`reason` with each replaced text it quotes (whole, or as far as a reason quotes one) replaced so too."""
        for text, described in sorted(self._replaced.items(), key=lambda item: -len(item[0])):
            for part in dict.fromkeys((text, text[:80], text[:60], text[:40])):
                if len(part) >= _SHORTEST:
                    reason = reason.replace(repr(part)[1:-1], described).replace(part, described)
        return reason


# What a text holds that tells an operator why a source's value is no time or IRI, with no word of it.
_KINDS = (("control characters", lambda char: unicodedata.category(char) == "Cc"),
          ("format characters", lambda char: unicodedata.category(char) == "Cf"),
          ("lone surrogates", lambda char: unicodedata.category(char) == "Cs"),
          ("not only ASCII", lambda char: not char.isascii()))
_MARKER = re.compile(r"pseudonym:-?[0-9]{1,20}")
# An IRI, hierarchical ("scheme://") or of the schemes xAPI's ids use without one: a bare "word:word" is no IRI here.
_IRI = r"(?:[A-Za-z][A-Za-z0-9+.-]{0,31}://|(?i:urn|tag|mailto):)[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+"
_ENUMERATIONS = ("Activity", "Agent", "Group", "SubStatement", "StatementRef", "true-false", "choice", "fill-in",
                 "long-fill-in", "matching", "performance", "sequencing", "likert", "numeric", "other")
# What a string is when it is no one's words: an IRI, a UUID or hex id, a time or date, an ISO 8601 duration, a
# number, an xAPI version, an enumeration.
_KEPT = re.compile(
    rf"{_IRI}|[0-9A-Fa-f]{{8,64}}|[0-9A-Fa-f]{{8}}(?:-[0-9A-Fa-f]{{4}}){{3}}-[0-9A-Fa-f]{{12}}"
    r"|\d{4}-\d{2}-\d{2}(?:[T ][0-9:.]{2,32})?(?:Z|[+-]\d{2}(?::?\d{2})?)?|P[0-9.YMWDTHS]{1,1000}"
    r"|[+-]?\d{1,30}(?:\.\d{1,30})?(?:[eE][+-]?\d{1,4})?|\d\.\d\.\d{1,3}|" + "|".join(map(re.escape, _ENUMERATIONS)))
# A key is also a field name: an xAPI property or Moodle column, or a language tag (en-US).
_KEPT_KEY = re.compile(rf"{_KEPT.pattern}|[A-Za-z_][A-Za-z0-9_]{{0,39}}|[A-Za-z]{{2,3}}(?:-[A-Za-z0-9]{{1,8}}){{0,4}}")
_KEPT_ID = re.compile(rf"{_KEPT.pattern}|[A-Za-z0-9._-]{{1,64}}")
_MOODLE_NAME = re.compile(r"\\?[a-z][a-z0-9_]{0,63}(?:\\[a-z][a-z0-9_]{0,63}){0,8}")  # crud, \core\event\x
