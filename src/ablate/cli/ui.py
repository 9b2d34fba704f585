"""`python -m ablate ui`: the MLflow UI over a store, on 127.0.0.1 unless a host is named.

MLflow 3's server also starts background job consumers (several processes); ablate's stores
use no server-side jobs, so they are turned off to keep a laptop's cores for training.
Before the server starts, the address of the latest sweep's chart (val/loss against FLOPs for all
its runs, a saved view: tracking/views.py) is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ablate.cli.common import fail
from ablate.config import ConfigError
from ablate.tracking.store import client_for, sqlite_path
from ablate.tracking.views import latest_views


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
    """A line naming the newest sweep's chart and its address, or None when the store has none."""

    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        return None
    from mlflow.tracking import MlflowClient

    found = latest_views(MlflowClient(tracking_uri=uri))
    if not found:
        return None
    name, link, _ = found[0]
    return f"latest: {name}: val/loss against FLOPs, every run\n  {base}/{link}"


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
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        fail(f"--port {args.port} is out of range (valid: 1..65535)")
    uri = store_uri(args.store)
    try:  # a store that is not there is named, not created empty and served
        client_for(uri)
    except ConfigError as exc:
        fail(str(exc).replace("tracking.uri=", "--store "))
    base = f"http://{args.host}:{args.port}"
    print(f"MLflow UI on {base} over {uri}", file=sys.stderr)
    chart = latest_chart(uri, base)
    if chart:
        print(chart, file=sys.stderr)
    cmd = server_command(uri, args.host, args.port)
    os.execve(cmd[0], cmd, server_env())


if __name__ == "__main__":
    main()
