"""Set-up of the docs examples: a fresh checkout per page, the warm runner, servers and bash.

What each directive means is documented in docs/README.md; the parsing is in doc_examples.py.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import doc_examples as examples
import pytest

from support import free_port

RUNNER = Path(__file__).with_name("runner.py")
VENV_BIN = Path(sys.executable).parent


def command_env(checkout: Path) -> dict:
    """A user's shell after `source .venv/bin/activate` in the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stop_group(proc: subprocess.Popen, grace: float = 20) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Runner:
    """The warm process of runner.py, started on first use and again after a timeout."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.cpu_s = 0.0  # of the last command

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        self.proc = subprocess.Popen(
            [sys.executable, str(RUNNER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        assert json.loads(self.answer(300)) == {"ready": True}

    def answer(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.stop()
            raise TimeoutError(f"no answer from the runner within {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            raise RuntimeError(f"the runner exited with {code}")
        return line

    def run(self, args: list[str], cwd: Path, env: dict, log: Path, timeout: float) -> int:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        request = {"argv": args, "cwd": str(cwd), "env": env, "log": str(log)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.answer(timeout))
        self.cpu_s = answer["cpu_s"]
        return answer["code"]

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace=5)
            self.proc = None


@pytest.fixture(scope="session")
def pristine_checkout(tmp_path_factory) -> Path:
    """The files a clone would hold: what git tracks, plus new files it does not ignore."""
    root = tmp_path_factory.mktemp("clone")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=examples.ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, (name.decode() for name in listed)):
        src = examples.ROOT / rel
        if src.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    return root


@pytest.fixture(scope="session")
def runner():
    r = Runner()
    yield r
    r.stop()


class PageRun:
    """One page's examples, top to bottom, in its own fresh checkout."""

    def __init__(self, page: examples.Page, checkout: Path, runner: Runner, cuda: bool) -> None:
        self.page, self.checkout, self.runner, self.cuda = page, checkout, runner, cuda
        self.env = command_env(checkout)
        self.n = 0

    def block(self, block: examples.Block) -> None:
        port = free_port()
        for command in block.commands:
            prepared = examples.prepare(block, command, port=port, cuda=self.cuda)
            where = f"{block.where.rsplit(':', 1)[0]}:{command.line}: $ {prepared.code}"
            started, cpu = time.monotonic(), children_cpu()
            if block.server:
                self.serve(prepared.code, block.server.replace("{port}", str(port)), block.timeout, where)
                self.times(started, children_cpu() - cpu, where + "  (serving)")
                continue
            code, output = self.execute(prepared, block.timeout)
            self.times(started, self.runner.cpu_s if prepared.in_process else children_cpu() - cpu, where)
            expected = 0 if prepared.make else block.exit
            assert code == expected, f"{where}\nexit {code}, expected {expected}\n{output[-6000:]}"
            missing = examples.promised_missing(command.promised, output)
            assert not missing, f"{where}\nthe page promises {missing}, not in the output:\n{output[-6000:]}"
            if "gpu" in block.flags and not self.cuda and prepared.args is not None:
                self.check_schema(prepared.args, output, where)
        for pattern in block.files:
            assert glob.glob(str(self.checkout / pattern)), f"{block.where}: no file matches {pattern}"

    @staticmethod
    def times(started: float, cpu: float, where: str) -> None:
        """With ABLATE_DOCS_TIMES set, where the test's time goes: wall and CPU seconds per command."""
        if os.environ.get("ABLATE_DOCS_TIMES"):
            print(f"{time.monotonic() - started:6.1f} s {cpu:6.1f} s cpu  {where}", file=sys.stderr)

    def execute(self, prepared: examples.Prepared, timeout: float) -> tuple[int, str]:
        self.n += 1
        log = self.checkout / f".example-{self.n}.log"
        if prepared.in_process:
            code = self.runner.run(prepared.args, self.checkout, self.env, log, timeout)
            return code, log.read_text(errors="replace")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", prepared.code],
                cwd=self.checkout,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                stop_group(proc)
                raise AssertionError(f"{prepared.code}: still running after {timeout:.0f} s") from None
        return code, log.read_text(errors="replace")

    def serve(self, code: str, url: str, timeout: float, where: str) -> None:
        """Start a server, wait until it answers, stop it."""
        log = self.checkout / f".example-{self.n}.log"
        self.n += 1
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", code],
                cwd=self.checkout,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + timeout
            while True:
                assert proc.poll() is None, f"{where}\nexited {proc.returncode}:\n{log.read_text()[-4000:]}"
                try:
                    with urllib.request.urlopen(url, timeout=5) as response:
                        if response.status == 200:
                            return
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                assert time.monotonic() < deadline, f"{where}\n{url} did not answer in {timeout:.0f} s"
                time.sleep(0.5)
        finally:
            stop_group(proc)

    @staticmethod
    def check_schema(args: list[str], output: str, where: str) -> None:
        """A GPU example without a GPU: the config Hydra composed must parse as the command's schema."""
        import yaml

        tree = yaml.safe_load(output)
        assert isinstance(tree, dict), f"{where}\nno config printed:\n{output[-2000:]}"
        if examples.command_name(args) == "train":
            from ablate.config import parse_run

            parse_run(tree)


@pytest.fixture
def page_run(pristine_checkout, runner, tmp_path):
    """Runs a page's blocks in a fresh copy of the checkout."""

    def start(page: examples.Page) -> PageRun:
        checkout = tmp_path / "checkout"
        shutil.copytree(pristine_checkout, checkout, symlinks=True)
        return PageRun(page, checkout, runner, cuda=_cuda())

    return start


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
