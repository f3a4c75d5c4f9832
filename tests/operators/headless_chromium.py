"""A headless Chromium (Debian's ``chromium``) driven over the DevTools protocol.

No driver package: Chromium writes its DevTools port to its profile folder, and the protocol
is JSON over one WebSocket (``websockets``, which Airflow's API server already installs).
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from websockets.sync.client import connect


class HeadlessChromium:
    """One Chromium process with one page; stop() ends it by its own PID."""

    def __init__(self, folder: Path, width: int = 1600, height: int = 560):
        executable = shutil.which("chromium") or shutil.which("chromium-browser")
        if executable is None:
            raise RuntimeError("Debian's `chromium` is not installed (apt-get install -y chromium)")
        profile = folder / "profile"
        profile.mkdir(parents=True)
        self._log = (folder / "chromium.log").open("wb")
        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=self._log, stderr=subprocess.STDOUT)
        port = self._devtools_port(profile / "DevToolsActivePort")
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(p for p in pages if p["type"] == "page")
        self._closing = ExitStack()
        self._socket = self._closing.enter_context(
            connect(page["webSocketDebuggerUrl"], max_size=None))
        self._ids = itertools.count(1)
        self.call("Emulation.setDeviceMetricsOverride",
                  width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _devtools_port(self, active_port: Path, wait: float = 60.0) -> int:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            if active_port.exists() and active_port.read_text().strip():
                return int(active_port.read_text().split()[0])
            time.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One protocol command; events arriving meanwhile are skipped."""
        message_id = next(self._ids)
        self._socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self._socket.recv())
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        return result["result"].get("value")

    def wait_for(self, expression: str, wait: float = 120.0) -> Any:
        """The value of ``expression`` once truthy (a bound for a slow machine, not a measure)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"never true in the page: {expression}\n"
                             f"{self.evaluate('document.body.innerText')}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def stop(self) -> None:
        try:
            self._closing.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self._log.close()
