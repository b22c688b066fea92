"""A small Chrome DevTools Protocol client for tests: starts headless Debian `chromium` and
drives one page over the DevTools websocket (`websockets`, installed with uvicorn[standard]).

```python
with Browser(tmp_path) as b:
    b.viewport(1280, 800)
    b.goto("http://127.0.0.1:9000/console/")
    b.wait("document.readyState === 'complete'")
    b.type_text("AKIA...")          # into the focused element, as a keyboard would
    b.key("Tab"); b.key("Enter")
    b.screenshot(tmp_path / "page.png")
```
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
KEYS = {  # key -> (code, windowsVirtualKeyCode, text)
    "Enter": ("Enter", 13, "\r"), "Tab": ("Tab", 9, ""), "ArrowRight": ("ArrowRight", 39, ""),
    "ArrowLeft": ("ArrowLeft", 37, ""), "ArrowDown": ("ArrowDown", 40, ""),
    "ArrowUp": ("ArrowUp", 38, ""), "Home": ("Home", 36, ""), "End": ("End", 35, ""),
    " ": ("Space", 32, " "),
}


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(RuntimeError):
    pass


class Browser:
    def __init__(self, workdir: Path, binary: str | None = None) -> None:
        self.binary = binary or chromium_binary()
        if self.binary is None:
            raise CDPError("no chromium binary")
        self.profile = Path(workdir) / "chromium-profile"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ws: Any = None
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, timeout: float = 60.0) -> None:
        self.profile.mkdir(parents=True, exist_ok=True)
        log = open(self.profile.parent / "chromium.log", "wb")  # noqa: SIM115 (kept open)
        self.proc = subprocess.Popen(
            [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--hide-scrollbars",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={self.profile}", "--window-size=1280,800", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise CDPError("chromium did not start: " +
                               (self.profile.parent / "chromium.log").read_text(errors="replace")[-2000:])
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        while True:
            with _NO_PROXY.open(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not pages:
            raise CDPError("chromium has no page")
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None,
                          open_timeout=20).__enter__()
        self.call("Page.enable")
        self.call("Runtime.enable")

    def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                self.ws.__exit__(None, None, None)
            self.ws = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None

    # -- protocol ----------------------------------------------------------------------------

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        mid = next(self._ids)
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"{method}: no answer in {timeout:g}s")
            msg = json.loads(self.ws.recv(timeout=left))
            if msg.get("id") == mid:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def eval(self, expression: str, *, await_promise: bool = False) -> Any:
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=await_promise)
        if "exceptionDetails" in r:
            raise CDPError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression: str, timeout: float = 30.0, interval: float = 0.2) -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"timed out waiting for: {expression}")
            time.sleep(interval)

    # -- page --------------------------------------------------------------------------------

    def viewport(self, width: int, height: int, *, mobile: bool = False,
                 scale: float = 1.0) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=scale, mobile=mobile)

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def type_text(self, text: str) -> None:
        self.call("Input.insertText", text=text)

    def key(self, key: str, *, shift: bool = False) -> None:
        code, vk, text = KEYS[key]
        base = {"key": key, "code": code, "windowsVirtualKeyCode": vk,
                "nativeVirtualKeyCode": vk, "modifiers": 8 if shift else 0}
        self.call("Input.dispatchKeyEvent", type="keyDown", **base,
                  **({"text": text} if text else {}))
        self.call("Input.dispatchKeyEvent", type="keyUp", **base)

    def click(self, selector: str) -> None:
        """A real mouse click at the centre of the element."""
        box = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                        " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                        " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                      clickCount=1)

    def exceptions(self) -> list[str]:
        """Uncaught JavaScript exceptions seen so far."""
        return [e["params"]["exceptionDetails"].get("exception", {}).get("description", "?")
                for e in self.events if e.get("method") == "Runtime.exceptionThrown"]

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", timeout=60, **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
