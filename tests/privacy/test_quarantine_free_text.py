"""No free text at rest in the quarantine: a stranger's words are kept as their length and a keyed hash.

A quarantined statement kept its language maps, names, descriptions, responses and extension strings as they
were written: an account name inside a verb.display of someone who is not in the statement (no rule can tell it
from other words) stayed in the state directory (found by the third hostile review, and by the one before). Now
the record keeps what an operator needs to fix its source — every field path, the numbers, the IRIs (without the
identifiers found in the record), ids and times — and each other string as `[text: N characters, keyed hash H]`.
"""

import hashlib
import hmac
import json
import os
import re

from helpers.statements import HOME, statement
from lms_refresh.disclosure.pseudonyms import read_key
from lms_refresh.disclosure.redaction import Redactor
from lms_refresh.sources.xapi_fields import actor_identifier

KEY = bytes(range(32))
STRANGER = "mwhite55"  # someone the statement does not name as a person: no identifier rule can find them
LEAK = re.compile(rb"mwhite55|Margaret", re.IGNORECASE)
DESCRIBED = re.compile(r"\[text: (\d+) characters, keyed hash ([0-9a-f]{16})\]")


def keyed(key, text):
    """The keyed hash an operator who holds `key` computes for a value they suspect."""
    return hmac.new(key, b"quarantined text\0" + text.encode(), hashlib.sha256).hexdigest()[:16]


def written_by_a_stranger():
    record = statement(learner="u1", score=7)  # malformed: a score is an object
    record["verb"]["display"] = {"en-US": f"asked {STRANGER}", "de": "Margaret"}
    record["object"]["definition"] = {
        "name": {"en": f"Quiz of {STRANGER}"}, "description": {"en": "Margaret White's notes"},
        "interactionType": "choice", "choices": [{"id": "a", "description": {"en": STRANGER}}]}
    record["result"]["response"] = f"my name is {STRANGER}"
    record["context"]["extensions"] = {f"{HOME}/note": f"{STRANGER} wrote this", f"{HOME}/count": 3,
                                       f"{HOME}/page": f"{HOME}/course/BIO101/page/2",
                                       f"{HOME}/label": "Margaret:White",  # shaped as a scheme, no IRI
                                       "Margaret's key": True}
    return record


def test_a_quarantined_record_keeps_its_structure_and_no_free_text():
    record = written_by_a_stranger()
    origin, reason, text, _ = Redactor(KEY, actor_identifier).row("a.ndjson:3", "result.score is not an object",
                                                                  json.dumps(record))
    assert not LEAK.search(text.encode()), text
    kept = json.loads(text)
    # The structure an operator fixes a source with: field paths, ids, times, IRIs, numbers, enumerations.
    assert kept["id"] == record["id"] and kept["timestamp"] == record["timestamp"]
    assert kept["verb"]["id"] == record["verb"]["id"] and kept["object"]["id"] == record["object"]["id"]
    assert kept["result"]["score"] == {"scaled": 7} and kept["actor"]["account"]["name"].startswith("pseudonym:")
    assert kept["object"]["definition"]["interactionType"] == "choice"
    extensions = kept["context"]["extensions"]
    assert extensions[f"{HOME}/count"] == 3 and extensions[f"{HOME}/page"] == f"{HOME}/course/BIO101/page/2"
    # Each text as its length and a hash keyed with the store's key: the same text, the same hash.
    for path, written in ((("verb", "display", "en-US"), f"asked {STRANGER}"),
                          (("verb", "display", "de"), "Margaret"),
                          (("object", "definition", "name", "en"), f"Quiz of {STRANGER}"),
                          (("result", "response"), f"my name is {STRANGER}"),
                          (("context", "extensions", f"{HOME}/note"), f"{STRANGER} wrote this")):
        value = kept
        for step in path:
            value = value[step]
        assert DESCRIBED.fullmatch(value).groups() == (str(len(written)), keyed(KEY, written)), (path, value)
    choice, = kept["object"]["definition"]["choices"]
    assert choice["id"] == "a" and DESCRIBED.fullmatch(choice["description"]["en"])
    key, = [key for key in extensions if isinstance(extensions[key], bool)]
    assert DESCRIBED.fullmatch(key).group(1) == str(len("Margaret's key"))
    # Without the key, a guess cannot be confirmed: another key gives another hash.
    _, _, other, _ = Redactor(bytes(32), actor_identifier).row("a.ndjson:3", "r", json.dumps(record))
    assert json.loads(other)["verb"]["display"]["de"] != kept["verb"]["display"]["de"]
    assert origin == "a.ndjson:3" and reason == "result.score is not an object"


def test_a_reason_that_quotes_a_free_text_value_quotes_its_description():
    record = statement(learner="u1", timestamp=f"{STRANGER} was here")
    _, reason, text, _ = Redactor(KEY, actor_identifier).row(
        "a.ndjson:3", f"timestamp {f'{STRANGER} was here'!r} is not an ISO 8601 time", json.dumps(record))
    assert not LEAK.search(reason.encode() + text.encode())
    described = json.loads(text)["timestamp"]
    assert reason == f"timestamp '{described}' is not an ISO 8601 time"


def test_a_run_leaves_no_strangers_words_in_the_state_directory(sqlite_project):
    project = sqlite_project
    project.configure(extra_top="max_quarantine_share = 0.5\nmin_cell_size = 2")
    project.write("a.ndjson", [statement(learner=f"u{i}") for i in range(4)] + [written_by_a_stranger()])
    project.invoke("run", now="2026-11-03T04:15:00+01:00", check=0)
    (raw,), = project.query("SELECT raw FROM quarantine")
    key = read_key(str(project.state / "pseudonymisation.key"))
    assert f"keyed hash {keyed(key, 'Margaret')}]" in raw and "quarantine:   1 record(s) kept" in \
        project.invoke("status", now="2026-11-03T05:00:00+01:00").stdout
    for root, _, names in os.walk(project.state):
        for name in names:
            with open(os.path.join(root, name), "rb") as handle:
                assert not LEAK.search(handle.read()), name
