"""Debian's headless chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: file
descriptors 3 and 4, messages of JSON ended by a NUL byte), for what only a laid-out page can tell: where a text is
drawn and how large, at a chosen window width. The standard library alone: no WebSocket, no driver to install.

    with Browser(tmp_path) as browser:
        browser.open(url, width=375)
        browser.evaluate("document.title")
"""

import base64
import json
import os
import subprocess
import time


class BrowserError(AssertionError):
    pass


class Browser:
    def __init__(self, directory, timeout=60):
        self.directory, self.timeout = directory, timeout
        self._next, self._buffer, self.session = 0, b"", None

    def __enter__(self):
        ours, theirs_in = os.pipe()  # chromium reads its commands on its descriptor 3
        theirs_out, mine = os.pipe()  # and writes its answers on 4

        def descriptors():
            # Duplicated first: a pipe's own number may be 3 or 4, and dup2 onto itself keeps close-on-exec.
            read, write = os.dup(ours), os.dup(mine)
            os.dup2(read, 3)
            os.dup2(write, 4)

        profile = os.path.join(self.directory, "browser-profile")
        self.process = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={profile}", "--disable-dev-shm-usage", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=descriptors, close_fds=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={**os.environ, "HOME": str(self.directory)})
        os.close(ours)
        os.close(mine)
        self._write, self._read = theirs_in, theirs_out
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable")
        # The report forbids every script (its Content-Security-Policy); the test's own questions are let through.
        self.call("Page.setBypassCSP", {"enabled": True})
        return self

    def __exit__(self, *exc):
        os.close(self._write)
        os.close(self._read)
        self.process.kill()
        self.process.wait()

    def call(self, method, params=None):
        """Send one command and return its result (BrowserError on an error answer)."""
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" not in self._buffer:
                if time.monotonic() > deadline:
                    raise BrowserError(f"no answer to {method} within {self.timeout} s")
                chunk = os.read(self._read, 1 << 16)
                if not chunk:
                    raise BrowserError(f"chromium ended before answering {method}")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                return answer["result"]

    def open(self, url, *, width, height=900):
        """Show `url` in a window `width` CSS pixels wide (a phone's, with its viewport meta honoured, below 600)."""
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": width < 600})
        self.call("Page.navigate", {"url": url})
        deadline = time.monotonic() + self.timeout
        while self.evaluate("document.readyState") != "complete" or self.evaluate("location.href") != url:
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} did not load within {self.timeout} s")
            time.sleep(0.05)

    def evaluate(self, expression):
        """The JSON value of a JavaScript expression evaluated in the page."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path, clip=None):
        """Write a PNG of the page (the whole of it, or `clip` {x, y, width, height} in CSS pixels) to `path`."""
        params = {"format": "png", "captureBeyondViewport": True}
        if clip is None:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            clip = {"x": 0, "y": 0, "width": size[0], "height": size[1]}
        params["clip"] = {**clip, "scale": 1}
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(self.call("Page.captureScreenshot", params)["data"]))
        return path
