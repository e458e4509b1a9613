"""The fixtures of the client's tests: a real `leasehold serve` (the binary
named by `LEASEHOLD_BIN`) on `127.0.0.1:0`, whose runs call a scripted
model ([`support.scripted_model`]) and may call a tool that hangs
([`support.hanging_mcp`]); stopped, by its PID, when the tests end."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest

from leasehold_client import AsyncClient, Client

from support.scripted_model import ScriptedModel

HERE = Path(__file__).parent
TOKEN = "python-client-test-token"
#: How long the server may take to say where it listens.
START_PATIENCE = 30.0


class Served:
    """One `leasehold serve` process: its base URL, data directory and log."""

    def __init__(self, model: ScriptedModel, data_dir: Path, addr: str = "127.0.0.1:0") -> None:
        self.model = model
        self.data_dir = data_dir
        self.token = TOKEN
        self._config = data_dir.parent / "leasehold.toml"
        self._config.write_text(
            "[[tools]]\n"
            'name = "ledger"\n'
            f"command = [{_toml_str(sys.executable)}, {_toml_str(str(HERE / 'support' / 'hanging_mcp.py'))}]\n"
            "idempotent = { charge = false }\n"
        )
        self.log = data_dir.parent / f"serve-{uuid.uuid4().hex[:6]}.log"
        self.process: Optional[subprocess.Popen] = None
        self.base_url = ""
        self.start(addr)

    def start(self, addr: str) -> None:
        binary = os.environ.get("LEASEHOLD_BIN")
        if not binary:
            pytest.fail("LEASEHOLD_BIN names no leasehold binary (cargo test sets it)")
        env: Dict[str, str] = {
            "PATH": os.environ.get("PATH", ""),
            "LEASEHOLD_DATA_DIR": str(self.data_dir),
            "LEASEHOLD_CONFIG": str(self._config),
            "LEASEHOLD_MODEL_BASE_URL": self.model.base_url,
            "LEASEHOLD_MODEL_NAME": "scripted",
            "LEASEHOLD_API_TOKEN": self.token,
            "LEASEHOLD_RESUME_ON_BOOT": "true",
        }
        log = open(self.log, "ab")
        self.process = subprocess.Popen(
            [binary, "serve", "--addr", addr],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=_dies_with_its_parent,
        )
        log.close()
        line = _first_line(self.process, START_PATIENCE)
        urls = [word for word in line.split() if word.startswith("http://")]
        if not urls:
            self.kill()
            pytest.fail(f"leasehold serve said {line!r}, not where it listens; log: {self.log}")
        self.base_url = urls[0].rstrip("/")
        # The rest of its standard output is read, so that it never blocks.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    @property
    def addr(self) -> str:
        return self.base_url.removeprefix("http://")

    def kill(self) -> None:
        """Kills the process by its PID (SIGKILL) and reaps it."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, 9)
            self.process.wait()

    def terminate(self) -> None:
        """Stops the process as an operator does (SIGTERM): its streams get
        their last `shutdown` frame."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, 15)
            self.process.wait(timeout=30)

    def client(self, token: Optional[str] = "operator", **options) -> Client:
        return Client(self.base_url, token=self.token if token == "operator" else token, **options)

    def async_client(self, token: Optional[str] = "operator", **options) -> AsyncClient:
        return AsyncClient(
            self.base_url, token=self.token if token == "operator" else token, **options
        )


def _dies_with_its_parent() -> None:
    """On Linux, the server is killed with the test process, even when the
    test process is killed before it could stop it."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _first_line(process: subprocess.Popen, patience: float) -> str:
    said: Dict[str, str] = {}

    def read() -> None:
        said["line"] = process.stdout.readline().decode("utf-8", errors="replace")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(patience)
    if "line" not in said:
        process.kill()
        pytest.fail(f"leasehold serve did not say where it listens within {patience} s")
    return said["line"]


@pytest.fixture(scope="session")
def model() -> Iterator[ScriptedModel]:
    model = ScriptedModel()
    yield model
    model.stop()


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="leasehold-python-client-") as dir:
        yield Path(dir)


@pytest.fixture(scope="session")
def served(model: ScriptedModel, workdir: Path) -> Iterator[Served]:
    data = workdir / "data"
    data.mkdir()
    server = Served(model, data)
    yield server
    server.kill()


@pytest.fixture
def client(served: Served) -> Iterator[Client]:
    with served.client() as client:
        yield client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def name() -> str:
    """A name no other test's run has, for its flow and its gates."""
    return "t" + uuid.uuid4().hex[:10]


def flow(name: str, task: str = "answer the question", **more) -> dict:
    """A flow of one loop without tools, named `name`."""
    return {"name": name, "task": f"{task} [{name}]", "max_steps": 4, **more}
