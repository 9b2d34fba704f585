"""`python -m ablate.ui`: the MLflow UI over a store, on 127.0.0.1 unless a host is named.

MLflow 3's server also starts background job consumers (several processes); ablate's stores
use no server-side jobs, so they are turned off to keep a laptop's cores for training.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def server_command(store: str, host: str = "127.0.0.1", port: int = 5000, workers: int = 1) -> list[str]:
    mlflow = Path(sys.executable).with_name("mlflow")
    return [str(mlflow), "server", "--backend-store-uri", store, "--host", host, "--port", str(port),
            "--workers", str(workers)]


def server_env() -> dict:
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def store_uri(path_or_uri: str) -> str:
    if "://" in path_or_uri:
        return path_or_uri
    return f"sqlite:///{Path(path_or_uri).resolve()}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ablate.ui", description="MLflow UI over an ablate store")
    parser.add_argument("--store", default="mlflow.db", help="sqlite file or any MLflow backend URI")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    uri = store_uri(args.store)
    print(f"MLflow UI on http://{args.host}:{args.port} over {uri}", file=sys.stderr)
    cmd = server_command(uri, args.host, args.port)
    os.execve(cmd[0], cmd, server_env())


if __name__ == "__main__":
    main()
