"""A source's whole window read in this process, batch by batch, as a test compares it."""


def collect_batches(source, window, index=None):
    """Read a source's whole window, after restoring `index` (its saved state) if given:
    (events, quarantined records, source state)."""
    events, quarantined, state = [], [], {}
    if index is not None:
        source.restore(lambda paths: {path: index[path] for path in paths if path in index})
    for batch in source.batches(window):
        events += batch.events
        quarantined += batch.quarantined
        state.update(batch.state)
    return events, quarantined, state
