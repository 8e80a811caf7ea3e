"""One refresh and the commands that change the store under its lock: the run object and its
report, the lock, the window's state, retention, SIGTERM, `forget` and `watermark set`."""
