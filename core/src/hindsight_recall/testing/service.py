"""A real ``hindsight-recall serve`` application on 127.0.0.1, run by uvicorn in a thread, for tests."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx


def wait_for_operation(http: httpx.Client, bank_path: str, operation_id: str, status: str = "completed",
                       timeout: float = 60) -> dict[str, Any]:
    """The operation once it has ``status``, read from ``{bank_path}/operations/{operation_id}``; an
    ``AssertionError`` when it ends otherwise or is still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        op: dict[str, Any] = http.get(f"{bank_path}/operations/{operation_id}").json()
        if op["status"] == status:
            return op
        assert op["status"] in ("pending", "processing") and time.monotonic() < deadline, op
        time.sleep(0.05)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerThread:
    """The service app on its own event loop in a thread; ``url`` once :meth:`start` returns.

    :param settings: the service's core settings (its own embedded data directory, say).
    """

    def __init__(self, settings: Any) -> None:
        import uvicorn

        from hindsight_recall.service.app import create_app

        self.app = create_app(settings)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, lifespan="on", access_log=False,
                                log_config=None, timeout_graceful_shutdown=10)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="hindsight-service", daemon=True)

    @property
    def engine(self) -> Any:
        """The service's engine (for tests that reach past the API)."""
        return self.app.app.state.engine

    def start(self, timeout: float = 600) -> ServerThread:
        """Start serving and wait until ``/health/ready`` answers 200 (the model is loaded)."""
        self.thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.app.state.failure:
                raise RuntimeError(f"the service failed to start: {self.app.state.failure}")
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the service was not ready in time")

    def stop(self) -> None:
        """Shut down as on SIGTERM: requests in flight finish, then the engine closes."""
        self.server.should_exit = True
        self.thread.join(timeout=60)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServeProcess:
    """``hindsight-recall serve`` as a process of its own (killable, as in production).

    :param env: the process's environment (``HINDSIGHT_API_*`` settings); its port is chosen here.
    :param log: a file the process's output goes to.
    """

    def __init__(self, env: dict[str, str], log: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**env, "HINDSIGHT_API_PORT": str(self.port), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.log = log
        self.process: Any = None

    def start(self, timeout: float = 600) -> ServeProcess:
        """Start and wait until ``/health/ready`` answers 200."""
        import subprocess
        import sys

        self.process = subprocess.Popen([sys.executable, "-m", "hindsight_recall.cli", "serve"], env=self.env,
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("serve was not ready in time")

    def stop(self, sig: int | None = None, timeout: float = 60) -> float:
        """Send ``sig`` (SIGTERM by default) and return the seconds until the process exited."""
        import signal

        if self.process is None or self.process.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM if sig is None else sig)
        try:
            self.process.wait(timeout=timeout)
        except Exception:
            self.process.kill()
            self.process.wait()
        return time.monotonic() - started
