"""The windows (lms_refresh.window): their local days across a DST change, and how the watermark moves."""

import datetime as dt

from helpers.times import t
from lms_refresh.window import Window, next_watermark


def test_local_days_of_a_window_across_the_dst_change():
    window = Window(t("2026-10-24T04:15:00+02:00"), t("2026-10-26T04:15:00+01:00"))
    assert window.local_days("Europe/Paris") == ["2026-10-24", "2026-10-25", "2026-10-26"]
    one_day = Window(t("2026-10-25T00:00:00+02:00"), t("2026-10-26T00:00:00+01:00"))
    assert one_day.until - one_day.since == dt.timedelta(hours=25)
    assert one_day.local_days("Europe/Paris") == ["2026-10-25"]


def test_next_watermark_rules():
    mark = t("2026-11-02T00:00:00+00:00")
    later = Window(t("2026-11-01T00:00:00+00:00"), t("2026-11-03T00:00:00+00:00"))
    gap = Window(t("2026-11-02T12:00:00+00:00"), t("2026-11-03T00:00:00+00:00"))
    earlier = Window(t("2026-10-01T00:00:00+00:00"), t("2026-10-03T00:00:00+00:00"))
    assert next_watermark(mark, later, is_backfill=True) == later.until
    assert next_watermark(mark, gap, is_backfill=True) == mark
    assert next_watermark(mark, earlier, is_backfill=True) == mark
    assert next_watermark(None, earlier, is_backfill=True) == earlier.until
    assert next_watermark(mark, earlier, is_backfill=False) == mark
