"""What the stores share for erasure and retention (lms_refresh.run.forget, lms_refresh.run.retention).

A learner is in the store in these forms, and only these: their staged events (`actor`, the
keyed pseudonym) and their presence on each (day, course) in learner_days and each (week or
month, course) in learner_periods (the same pseudonym, for the periods' distinct learners);
quarantined records that carry their pseudonym marker, `"pseudonym:N"` — redacted records, second
versions of a statement id ("conflicting statement id"), statements for closed days ("older than
the staging horizon") — and, in conflict records written before the marker was used there,
`"actor": N`. Aggregates (daily metrics, published rows, their key sums) are rebuilt without them.
Nothing else the store keeps names a learner: the run log holds counts and scrubbed messages,
voided_events statement ids only, the name tables course and verb
IRIs, the file index export file paths.

Course names (course_names) get nothing here: a name is what a course's author or a statement's
sender wrote about a course, not a record of a learner, and before it is stored
lms_refresh.disclosure.names removes what can be recognised as identifying one — an address of any
shape, and for an xAPI name the naming statement's own actor identifiers (account name, mbox and
its local part, openid, name). No pseudonym is ever in one, so erasing a learner's events leaves
names as they were, rightly. What redaction cannot tell from other words (another learner's account
name or a Moodle user id written into a course's title) is the course's name in the LMS: it goes when
the course is renamed there and a run reads the new name (Moodle: every run; xAPI: the next statement
naming the course). A name
row goes with its course (a rebuild), and retention, which keeps days, has none to drop.

A pseudonym is only as findable as its key: a record quarantined under another key (before a
rebuild that made a new one) that carries a learner's pseudonym can never be matched again, and
so could never be erased on their request — while the rest of it (its statement id, times,
course) still leads to them at the source. When the key changes, such records are deleted;
the source still holds each, and the rebuild that made the new key quarantines it again under
that key, where `forget` finds it. Records that name no learner stay.
"""

import re

from lms_refresh.disclosure import redaction

_MARKER = re.compile(r'"pseudonym:-?[0-9]+"')
_LEGACY_ACTOR = re.compile(r'"actor": -?[0-9]+(?=[,}])')
_CONFLICT = "conflicting statement id%"


class Erasure:
    """A mixin of SqlStore: `execute`, `meta` and `set_meta` come from it."""

    def forget_learner(self, actor):
        """Delete the staged events of one pseudonymised learner; return the day of each deleted event, and the
        days of their presence (learner_days), closed days' too, whose periods count them."""
        present = {row[0] for row in self.execute("DELETE FROM learner_days WHERE actor = ? RETURNING day", (actor,))}
        self.execute("DELETE FROM learner_periods WHERE actor = ?", (actor,))
        days = [row[0] for row in self.execute("DELETE FROM staged_events WHERE actor = ? RETURNING day", (actor,))]
        return days, present

    def forget_quarantined(self, pseudonym):
        """Delete the quarantined records that name this pseudonym, in every form they were written; return how many."""
        pattern = '%"' + redaction.marker(pseudonym) + '"%'  # a whole JSON string: -12 is not -123
        count = self.execute("DELETE FROM quarantine WHERE raw LIKE ?", (pattern,)).rowcount
        legacy = [f'%"actor": {pseudonym},%', f'%"actor": {pseudonym}}}%']
        for form in legacy:
            count += self.execute("DELETE FROM quarantine WHERE reason LIKE ? AND raw LIKE ?",
                                  (_CONFLICT, form)).rowcount
        return count

    def follow_key(self, fingerprint):
        """Inside the transaction (before anything is quarantined in it): note that the quarantine's
        pseudonyms are made with the key of `fingerprint`, deleting the records quarantined under another
        that carry a pseudonym (see the module); return how many went."""
        if fingerprint is None:  # the run failed before it had its key: it quarantined nothing
            return 0
        meta = self.meta()
        previous = meta.get("quarantine_key", meta.get("key_fingerprint"))
        deleted = 0
        if previous is not None and previous != fingerprint:
            rows = self.execute("SELECT id, reason, raw FROM quarantine WHERE raw LIKE ? OR reason LIKE ?",
                                ('%"pseudonym:%', _CONFLICT)).fetchall()
            for number, reason, raw in rows:
                if _MARKER.search(raw) or reason.startswith("conflicting statement id") and _LEGACY_ACTOR.search(raw):
                    self.execute("DELETE FROM quarantine WHERE id = ?", (number,))
                    deleted += 1
        if previous != fingerprint:
            self.set_meta("quarantine_key", fingerprint)
        return deleted

    def drop_staged_before(self, day):
        """Delete the staged events of local days before `day` (one range of the clustered key)."""
        return self.execute("DELETE FROM staged_events WHERE day < ?", (day,)).rowcount

    def expire_quarantine(self, cutoff):
        """Delete the quarantined records recorded before the cursor text `cutoff`."""
        return self.execute("DELETE FROM quarantine WHERE recorded_at < ?", (cutoff,)).rowcount
