"""A headless Chromium driven over the DevTools protocol through a pipe (`--remote-debugging-pipe`: commands on the
child's fd 3, replies on its fd 4, each a JSON message ended by a NUL byte), so a test can type into a page, click,
read the DOM and take screenshots with nothing but the standard library. Offline: the pages are on 127.0.0.1."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM = next((path for path in map(shutil.which, BROWSERS) if path), None)


class Chromium:
    """One headless browser with one page; use as a context manager."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1600) -> None:
        commands_in, self._commands = os.pipe()
        self._replies, replies_out = os.pipe()

        def on_fds_3_and_4() -> None:  # in the child, before exec: the pipe ends where Chromium looks for them
            a, b = fcntl.fcntl(commands_in, fcntl.F_DUPFD, 10), fcntl.fcntl(replies_out, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            preexec_fn=on_fds_3_and_4, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands_in)
        os.close(replies_out)
        self._buffer, self._next, self._session = b"", 0, None
        self.console: list[str] = []  # messages the page logged and exceptions it threw

    def send(self, method: str, params: dict | None = None, page: bool = True, timeout: float = 30) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if page and self._session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("method") == "Runtime.exceptionThrown":
                    self.console.append(json.dumps(reply["params"]["exceptionDetails"])[:2000])
                elif reply.get("method") == "Runtime.consoleAPICalled" and reply["params"]["type"] in ("error", "warning"):
                    self.console.append(json.dumps(reply["params"]["args"])[:2000])
                if reply.get("id") == self._next:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise TimeoutError(f"Chromium did not answer {method} in {timeout} s")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe")
            self._buffer += chunk

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, page=False)["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, page=False)["sessionId"]
        self.send("Runtime.enable")
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(json.dumps(result["exceptionDetails"])[:2000])
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        """The expression's value once it is truthy (polled; an error counts as not yet: the page may be loading)."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:
                value, last = None, exc
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"never true in {timeout} s: {expression}" + (f" (last error: {last})" if last else ""))

    def screenshot(self, path: Path, selector: str | None = None, max_height: int = 4000) -> Path:
        """The whole page, or the element `selector` picks, as a PNG (its top `max_height` pixels)."""
        box = self.evaluate("(() => { const r = " + (f"document.querySelector({json.dumps(selector)})" if selector
                                                    else "document.documentElement") + ".getBoundingClientRect();"
                            " return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })()")
        box["height"] = min(box["height"], max_height)
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                     "clip": {**box, "scale": 1}})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.send("Browser.close", page=False, timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._replies)
