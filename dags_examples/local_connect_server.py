"""A Spark Connect server on 127.0.0.1, started from the pyspark wheel (demo, tests, benchmark).

``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer spark-internal``
of this virtualenv, in a process group of its own so that stopping it ends its Python workers
too. A ``token`` is handed over in the server's environment (``SPARK_CONNECT_AUTHENTICATE_TOKEN``),
never on its command line; clients then connect to ``localhost`` with that token.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalConnectServer:
    """``start()`` waits until the port accepts; ``stop()`` ends the process group by its PID."""

    def __init__(self, log_path: Path, *, port: int | None = None, token: str | None = None,
                 confs: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None):
        self.log_path = log_path
        self.port = port or free_port()
        self.token = token
        self.confs = {"spark.ui.enabled": "false", **(confs or {})}
        self.env = dict(env or {})
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> LocalConnectServer:
        bin_dir = Path(sys.executable).parent  # spark-submit and the Python of this venv
        env = {**os.environ, **self.env, "PYSPARK_PYTHON": sys.executable,
               "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        if self.token:
            env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = self.token
        confs = {**self.confs, "spark.connect.grpc.binding.address": "127.0.0.1",
                 "spark.connect.grpc.binding.port": str(self.port)}
        command = [str(bin_dir / "spark-submit"), "--master", "local[2]", "--class", SERVER_CLASS]
        for key, value in confs.items():
            command += ["--conf", f"{key}={value}"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([*command, "spark-internal"], env=env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_until_accepting(timeout)
        return self

    def _wait_until_accepting(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited; see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"no Spark Connect server on port {self.port} after {timeout} s; "
                           f"see {self.log_path}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)  # its own group: pgid == pid
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> LocalConnectServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
