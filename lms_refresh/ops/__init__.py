"""The run as operators see it: the scheduled job and its retries, `status` and `check`,
monitoring (Healthchecks pings, the Prometheus textfile, staleness) and the failure alert."""
