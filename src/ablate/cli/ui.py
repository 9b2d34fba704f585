"""`python -m ablate ui`: the MLflow UI over a store, on 127.0.0.1 unless another address is named
with --public (Jupyter's and TensorBoard's rule: whoever reaches the server reads and writes the store).

MLflow 3's server also starts background job consumers (several processes); ablate's stores
use no server-side jobs, so they are turned off to keep a laptop's cores for training.
Before the server starts, the address of the latest sweep's chart (val/loss against FLOPs for all
its runs, a saved view: tracking/views.py) is printed.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import socket
import sys
from pathlib import Path

from ablate.config import ConfigError
from ablate.oneline import fail, one_line
from ablate.tracking import client_for, latest_views, sqlite_path


def server_command(store: str, host: str = "127.0.0.1", port: int = 5000, workers: int = 1) -> list[str]:
    mlflow = Path(sys.executable).with_name("mlflow")
    return [
        str(mlflow),
        "server",
        "--backend-store-uri",
        store,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]


# MLflow 3.17's server imports starlette.middleware.wsgi, which starlette 1.x marks deprecated at
# import time (a StarletteDeprecationWarning in every UI log). Only that message is silenced, in
# the server's processes only; it is MLflow's import to change, and nothing a user can act on.
WSGI_WARNING = "ignore:starlette.middleware.wsgi is deprecated"


def server_env() -> dict:
    warnings = ",".join(w for w in (os.environ.get("PYTHONWARNINGS", ""), WSGI_WARNING) if w)
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONWARNINGS": warnings}


def latest_chart(uri: str, base: str) -> str | None:
    """Lines naming the newest sweep's experiment page and chart, with their addresses; None when the store has none."""

    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        return None
    from mlflow.tracking import MlflowClient

    found = latest_views(MlflowClient(tracking_uri=uri))
    if not found:
        return None
    name, link, _, page = found[0]
    return (
        f"open:   {base}/{page}   (its runs, in MLflow's model-training layout)\n"
        f"latest: {name}: val/loss against FLOPs, every run\n  {base}/{link}"
    )


LOOPBACK_NAMES = ("localhost",)


def check_host(host: str, public: bool) -> None:
    """`host` is an IP address (or localhost); one that is not loopback needs --public. ConfigError otherwise."""
    valid = "127.0.0.1, ::1 or localhost; another address of this machine, such as 0.0.0.0, with --public"
    if host in LOOPBACK_NAMES:
        return
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(f"--host {host!r} is not an IP address (valid: {valid})") from None
    if not address.is_loopback and not public:
        raise ConfigError(
            f"--host {host} is reachable from other machines, and the UI can change the store "
            f"(valid: {valid}, to say so)"
        )


def check_port_free(host: str, port: int) -> None:
    """The server would fail on a taken port with a traceback of its own: say it in one line first."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            why = "is in use" if taken else f"cannot be bound ({exc.strerror})"
            raise ConfigError(f"--port {port} on {host} {why} (valid: a free port, e.g. --port {port + 1})") from None


def store_uri(path_or_uri: str) -> str:
    if "://" in path_or_uri:
        return path_or_uri
    return f"sqlite:///{Path(path_or_uri).resolve()}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="ablate ui",
        description="MLflow UI over an ablate store",
        epilog="example:\n  ablate ui --store mlflow.db --port 5000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--store", default="mlflow.db", help="sqlite file or any MLflow backend URI")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1, loopback only)")
    parser.add_argument(
        "--public", action="store_true", help="allow a --host other machines can reach (they can change the store)"
    )
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        fail(f"--port {args.port} is out of range (valid: 1..65535)")
    with one_line():
        check_host(args.host, args.public)
    uri = store_uri(args.store)
    with one_line(lambda message: message.replace("tracking.uri=", "--store ")):
        client_for(uri)  # a store that is not there is named, not created empty and served
    with one_line():
        check_port_free(args.host, args.port)
    base = f"http://[{args.host}]:{args.port}" if ":" in args.host else f"http://{args.host}:{args.port}"
    print(f"MLflow UI on {base} over {uri}", file=sys.stderr)
    chart = latest_chart(uri, base)
    if chart:
        print(chart, file=sys.stderr)
    cmd = server_command(uri, args.host, args.port)
    os.execve(cmd[0], cmd, server_env())


if __name__ == "__main__":
    main()
