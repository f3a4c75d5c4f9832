"""A test that runs past its time limit is reported and ends the run, so that a hang shows
where it hangs instead of holding CI until the CI's own limit kills it with no report.

The report (every Python thread's stack, the processes the run started, the disk's free
space, the open descriptors) goes to pytest's terminal; then SIGINT ends the run the way
Ctrl-C does, with pytest's summary of what failed so far.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import traceback

# Seconds; the slowest test of the suite takes a few minutes.
TIME_LIMIT = float(os.environ.get("DELTA_TEST_TIME_LIMIT", "900"))
_GRACE = 120  # seconds for pytest to end after SIGINT before the process is ended outright


def watch(item) -> threading.Timer:
    """A started timer that reports the test ``item`` and ends the run unless cancelled
    within ``TIME_LIMIT``."""
    timer = threading.Timer(TIME_LIMIT, _end_run, args=(item,))
    timer.daemon = True
    timer.start()
    return timer


def _end_run(item) -> None:
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture()  # the report goes to the terminal, as pdb's does
    lines = [f"\n{item.nodeid} still runs after {TIME_LIMIT:.0f} s "
             "(DELTA_TEST_TIME_LIMIT): ending the run", *_report()]
    if hasattr(item.config, "workerinput"):
        # A pytest-xdist worker: its terminal goes nowhere, its standard error is the run's.
        # Its Ctrl-C ends the whole run ("node down: keyboard-interrupt"), with the summary.
        print(*lines, sep="\n", file=sys.stderr, flush=True)
    else:
        terminal = item.config.get_terminal_writer()
        for line in lines:
            terminal.line(line)
        terminal.flush()
    os.kill(os.getpid(), signal.SIGINT)
    threading.Event().wait(_GRACE)
    os._exit(70)


def _report() -> list[str]:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    lines = []
    for ident, frame in sys._current_frames().items():
        lines.append(f"--- thread {names.get(ident, ident)}")
        lines.extend(line.rstrip() for line in traceback.format_stack(frame))
    tree = subprocess.run(["ps", "-e", "-o", "pid,ppid,etime,pcpu,rss,args", "--forest"],
                          capture_output=True, text=True, check=False)
    lines.append(f"--- processes (this one is {os.getpid()})")
    lines.extend(line[:300] for line in tree.stdout.splitlines()
                 if line.split()[1] != "2")  # not the kernel's threads
    free = shutil.disk_usage(os.getcwd()).free
    lines.append(f"--- {free / 2**30:.1f} GiB free here; "
                 f"{len(os.listdir('/proc/self/fd'))} descriptors open in this process")
    return lines
