"""Protection is never weakened by accident (issue 20, class 10), on both stores.

The store's privacy settings in force may be strengthened by any run's configuration, but a
configuration that protects less — exact counts, a lower threshold, less noise, zeros no
longer withheld — is refused with 78 and one sentence, unless the run is asked to apply it
(`--accept-weaker-privacy`), which the journal and the run log record.
"""

import shutil

import pytest
from hypothesis import given, settings, strategies as st

from helpers.project import Project
from helpers.statements import statement
from lms_refresh.disclosure.policy import PrivacySettings as Settings
from lms_refresh.disclosure.weakening import weaker

NOW = "2026-11-03T04:15:00+01:00"
LATER = "2026-11-04T04:15:00+01:00"
CELL_KEY = 'method = "cell-key"\nmax_noise = 3\nvariance = 2.0\nwithhold_zeros = true'
REFUSED = "protects the publication less than the settings in force in the store"


def protects_at_least(wanted, in_force):
    """An independent statement of README's order: every setting at least as protective."""
    if wanted.min_cell_size < in_force.min_cell_size or in_force.withhold_zeros > wanted.withhold_zeros:
        return False
    if in_force.method == "none":
        return True
    return wanted.method == "cell-key" and wanted.max_noise >= in_force.max_noise \
        and wanted.variance >= in_force.variance


privacy_settings = st.builds(Settings, min_cell_size=st.integers(1, 30), method=st.sampled_from(["cell-key", "none"]),
                             max_noise=st.integers(0, 5), variance=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]),
                             withhold_zeros=st.booleans())


@settings(max_examples=2000, deadline=None, derandomize=True, database=None)
@given(privacy_settings, privacy_settings)
def test_a_change_is_weaker_exactly_when_some_setting_protects_less(in_force, wanted):
    found = weaker(in_force, wanted)
    assert (found == []) == protects_at_least(wanted, in_force)
    assert weaker(in_force, in_force) == []
    if found and not weaker(wanted, in_force):
        assert all("->" in phrase for phrase in found)  # each says from what to what


def crowd(day, count=12):
    return [statement(learner=f"u{i}", timestamp=f"{day}T09:00:00Z", verb="passed" if i % 2 else "failed")
            for i in range(count)]


def configure(project, privacy=CELL_KEY, k=10):
    project.configure(extra_top=f"min_cell_size = {k}", privacy=privacy)


def in_force(project):
    return project.query("SELECT min_cell_size, method, max_noise, variance, withhold_zeros FROM privacy_settings")


WEAKER = {  # what one host's configuration says instead, and what the refusal names
    "exact counts": (dict(privacy='method = "none"\nwithhold_zeros = true'), "method cell-key -> none (exact counts)"),
    "a typo in min_cell_size": (dict(k=1), "min_cell_size 10 -> 1"),
    "less noise": (dict(privacy=CELL_KEY.replace("max_noise = 3", "max_noise = 1").replace("2.0", "1.0")),
                   "max_noise 3 -> 1, variance 2 -> 1"),
    "a lower variance": (dict(privacy=CELL_KEY.replace("2.0", "0.5")), "variance 2 -> 0.5"),
    "zeros published again": (dict(privacy=CELL_KEY.replace("true", "false")), "withhold_zeros true -> false"),
}


@pytest.mark.parametrize("change", sorted(WEAKER))
def test_a_weaker_configuration_is_refused_until_applied_deliberately(project, change):
    configure(project)
    project.write("a.ndjson", crowd("2026-11-02"))
    project.invoke("run", now=NOW, check=0)
    published, settings_row = project.serving(), in_force(project)
    options, named = WEAKER[change]
    configure(project, **options)
    project.write("b.ndjson", crowd("2026-11-03"))
    for command in (["run"], ["run", "--dry-run"], ["backfill", "--since", "2026-11-01", "--until", "2026-11-04"]):
        refused = project.invoke(*command, now=LATER)
        assert refused.returncode == 78, refused.stderr
        assert f"{REFUSED} {project.open_store().describe()} (min_cell_size 10, cell-key noise within +-3 " \
               f"(variance 2), zeros withheld): {named}; nothing was read" in refused.stderr
        assert "'lms-refresh run --accept-weaker-privacy'" in refused.stderr
        assert project.serving() == published and in_force(project) == settings_row
    assert project.runs()[-1][1:3] == ("failed", 78)
    checked = project.invoke("check")  # check says what the run would
    assert checked.returncode == 78 and f"{named}; nothing was read" in checked.stderr

    applied = project.invoke("run", "--accept-weaker-privacy", now=LATER, check=0)
    assert f"Privacy protection weakened deliberately (--accept-weaker-privacy): {named}" in applied.stderr
    assert project.query("SELECT message FROM runs ORDER BY started_at")[-1] == (
        f"privacy weakened deliberately (--accept-weaker-privacy): {named}",)
    assert in_force(project) != settings_row and project.serving() != published
    # From then on that configuration is the one in force: later runs need no option.
    project.invoke("run", now="2026-11-05T04:15:00+01:00", check=0)


def test_a_stronger_configuration_applies_at_the_next_run(project):
    configure(project, privacy='method = "none"', k=5)
    project.write("a.ndjson", crowd("2026-11-02"))
    project.invoke("run", now=NOW, check=0)
    configure(project, k=12)  # cell-key noise, a higher threshold, zeros withheld: all stronger
    project.invoke("run", now=LATER, check=0)
    assert in_force(project) == [(12, "cell-key", 3, 2.0, 1)]
    (row,) = project.serving()
    assert row[2] is not None and row[6] is None and row[10] == 1  # 6 passed of 12: withheld under k = 12
    assert project.query("SELECT message FROM runs ORDER BY started_at")[-1] == ("",)


def test_a_second_host_sharing_the_postgresql_store_cannot_publish_exact_counts(tmp_path, postgres_server):
    first = Project(tmp_path / "a", postgres_server)
    configure(first)
    first.write("a.ndjson", crowd("2026-11-02"))
    first.invoke("run", now=NOW, check=0)
    published = first.serving()
    second = Project(tmp_path / "b", postgres_server, first.database)  # another host, the same store and key
    second.state.mkdir()
    shutil.copy(first.state / "pseudonymisation.key", second.state / "pseudonymisation.key")
    configure(second, privacy='method = "none"\nwithhold_zeros = true')
    second.write("b.ndjson", crowd("2026-11-03"))
    refused = second.invoke("run", now=LATER)
    assert refused.returncode == 78 and "method cell-key -> none (exact counts)" in refused.stderr
    assert first.serving() == published and in_force(first) == [(10, "cell-key", 3, 2.0, 1)]
    configure(second)  # the same settings as the first host: it runs
    second.invoke("run", now=LATER, check=0)
