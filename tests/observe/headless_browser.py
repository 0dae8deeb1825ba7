"""A headless Chromium driven over its DevTools protocol (a websocket; no test framework): open a page,
evaluate JavaScript in it, click where an element is, save a screenshot."""
from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from websockets.sync.client import connect

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


class HeadlessBrowser:
    def __init__(self, binary: str, profile_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={profile_dir}",
             "--window-size=1280,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._devtools_port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self._stack = ExitStack()
        self.ws = self._stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))
        self._ids = itertools.count(1)

    def _devtools_port(self, timeout_s: float = 15.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if match := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
                return int(match.group(1))
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError("the browser did not open its DevTools port")

    def call(self, method: str, **params) -> dict:
        call_id = next(self._ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=20))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        """Open `url` and wait until its document has loaded."""
        self.call("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def wait_for(self, expression: str, timeout_s: float = 10.0):
        """Evaluate until the value is truthy; that value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if value := self.evaluate(expression):
                return value
            time.sleep(0.1)
        raise AssertionError(f"never true in {timeout_s} s: {expression}")

    def click(self, selector: str) -> None:
        """A real mouse click (pressed, released) at the middle of the element's box."""
        box = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                            ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        self._stack.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
