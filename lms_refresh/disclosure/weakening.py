"""Whether a configuration would protect the publication less than the settings in force.

The store keeps the privacy settings in force (its `privacy_settings` row). A run may apply
stronger ones from its configuration at once, but weaker ones only when asked to on its
command line (`--accept-weaker-privacy`): one host's typo, or a second host sharing a store
with `method = "none"`, must not lower what every dashboard reader is protected by.

The order, one setting at a time — a change is weaker if any of these goes down, whatever
the others do:

- `min_cell_size`: a lower threshold is weaker;
- `method`: "none" (exact counts) is weaker than "cell-key";
- the noise, while both use "cell-key": a lower `max_noise` (D) or a lower `variance` is
  weaker (from "none" to "cell-key" any noise is stronger; under "none" they do nothing);
- `withhold_zeros`: false is weaker than true.

And what a configuration exposes beyond its settings: under exact counts (`method = "none"`), two overlapping
terms' event counts subtract to those of the days one holds and the other does not, however few learners were
active on them (docs/privacy.md); `check` warns of such pairs (`overlapping_terms`). The cell key method
gives each term's row its own noise, so the difference is a guess, never certain.
"""

import datetime as dt
import itertools

from lms_refresh.disclosure.policy import PrivacySettings, in_force as settings_in_force
from lms_refresh.errors import ConfigError


def configured(config):
    """Return the PrivacySettings a configuration asks for."""
    section = config.privacy
    return PrivacySettings(config.min_cell_size, section.method, section.max_noise, float(section.variance),
                            bool(section.withhold_zeros))


def describe(settings):
    """Return the protection of `settings` (a PrivacySettings) in a few words."""
    noise = ("exact counts (method none)" if settings.method == "none" else
             f"cell-key noise within +-{settings.max_noise} (variance {settings.variance:g})")
    zeros = "zeros withheld" if settings.withhold_zeros else "zeros published"
    return f"min_cell_size {settings.min_cell_size}, {noise}, {zeros}"


def weaker(in_force, wanted):
    """Return how `wanted` protects less than `in_force` (phrases; [] if at least as much)."""
    found = []
    if wanted.min_cell_size < in_force.min_cell_size:
        found.append(f"min_cell_size {in_force.min_cell_size} -> {wanted.min_cell_size}")
    if in_force.method == "cell-key" and wanted.method == "none":
        found.append("method cell-key -> none (exact counts)")
    elif in_force.method == "cell-key" == wanted.method:
        if wanted.max_noise < in_force.max_noise:
            found.append(f"max_noise {in_force.max_noise} -> {wanted.max_noise}")
        if wanted.variance < in_force.variance:
            found.append(f"variance {in_force.variance:g} -> {wanted.variance:g}")
    if in_force.withhold_zeros and not wanted.withhold_zeros:
        found.append("withhold_zeros true -> false")
    return found


def require(config, store, accepted):
    """Return how `config` weakens the settings in force in `store` ([] if it does not), or raise
    ConfigError (78) if it does and that was not `accepted` on the command line."""
    in_force = settings_in_force(store, missing_ok=True)
    lowered = weaker(in_force, configured(config)) if in_force is not None else []
    if lowered and not accepted:
        raise ConfigError(
            f"{config.origin} protects the publication less than the settings in force in the store "
            f"{store.describe()} ({describe(in_force)}): {', '.join(lowered)}; nothing was read — put the settings "
            "in force back in the configuration, or weaken them deliberately with "
            "'lms-refresh run --accept-weaker-privacy' (/usr/share/doc/lms-refresh/docs/explanation/metrics.md)."
        )
    return lowered


# -- terms whose difference publishes days exactly --

SHOWN_DAYS = 3  # days named in a warning; the rest are counted


def _days(term):
    first, last = dt.date.fromisoformat(term.first_day), dt.date.fromisoformat(term.last_day)
    return {first + dt.timedelta(days=offset) for offset in range((last - first).days + 1)}


def exposed_by_overlaps(terms):
    """Return (name, name, [days in exactly one of the two, ISO text, sorted]) for each pair of `terms` (config
    Terms) that share a day and differ."""
    found = []
    for one, other in itertools.combinations(sorted(terms, key=lambda term: (term.first_day, term.name)), 2):
        a, b = _days(one), _days(other)
        if a & b and a != b:
            found.append((one.name, other.name, sorted(day.isoformat() for day in a ^ b)))
    return found


def overlapping_terms(config):
    """The sentence `check` gives of overlapping terms under exact counts, or None."""
    if config.privacy.method != "none":
        return None
    pairs = exposed_by_overlaps(config.terms)
    if not pairs:
        return None
    described = []
    for one, other, days in pairs[:SHOWN_DAYS]:
        shown = ", ".join(days[:SHOWN_DAYS]) + (f" and {len(days) - SHOWN_DAYS} more" if len(days) > SHOWN_DAYS else "")
        described.append(f"'{one}' and '{other}' ({len(days)} day{'s' if len(days) > 1 else ''} in only one: {shown})")
    more = f" and {len(pairs) - SHOWN_DAYS} more pairs" if len(pairs) > SHOWN_DAYS else ""
    return (f"terms overlap: {'; '.join(described)}{more}. With method = \"none\" each term's counts are exact, so "
            "the difference of two overlapping terms publishes the statements, attempts, completions, passes and "
            "fails of the days in only one of them exactly, even on days min_cell_size withholds; make terms that "
            "do not overlap, or use method = \"cell-key\" (/usr/share/doc/lms-refresh/docs/privacy.md)")
