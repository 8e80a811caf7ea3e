"""What the stores share for an upgrade's rebuild (lms_refresh.run.upgrade): where the staged events
were first read from, and whether a re-read found every statement the store held again."""


class RebuildCheck:
    def built_since(self):
        """Where the first window the staged events were read in began (since the last rebuild), or None."""
        return self.execute("SELECT min(window_since) FROM runs WHERE exit_code = 0 AND kind IN ('run', 'backfill', "
                            "'rebuild') AND started_at >= coalesce((SELECT max(started_at) FROM runs WHERE kind = "
                            "'rebuild' AND exit_code = 0), '')").fetchone()[0]

    def keep_staged_ids(self):
        """Before an upgrade's rebuild, in its transaction: which statements are staged now."""
        self.execute("CREATE TEMP TABLE upgrade_previous AS SELECT event_id FROM staged_events")

    def missing_staged_ids(self):
        """After its re-read: how many of them are neither staged nor voided now."""
        missing = self.execute("SELECT count(*) FROM (SELECT event_id FROM upgrade_previous EXCEPT SELECT event_id "
                               "FROM staged_events EXCEPT SELECT event_id FROM voided_events) AS gone").fetchone()[0]
        self.execute("DROP TABLE upgrade_previous")
        return missing
