"""For tests that start real processes (a triggerer, an api-server): wait for a state, then
stop the process by its own PID."""

from __future__ import annotations

import subprocess
import time


def wait_for(condition, timeout: float, what: str):
    """``condition()``'s first truthy result, polled every 0.25 s for up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stop(process: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited after ``timeout`` s."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
