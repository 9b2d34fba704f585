"""Opening MLflow stores: the experiment created once before any fan-out, and clients that refuse to
create an empty sqlite file where the user meant an existing store."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sqlite3
from contextlib import closing, contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

from ablate.config import ConfigError
from ablate.files import cache_dir, read_regular, replacing
from ablate.redact import HIDDEN, redact
from ablate.tracking.tags import EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND, REASON_TAG, SWEEP_TAG


def quiet_store_logs() -> None:
    """MLflow announces at INFO each time a process creates or migrates a sqlite store's tables
    ("Creating initial MLflow database tables..."): one line per job of a sweep, nothing to act on."""
    for name in ("mlflow.store.db.utils", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


# Backends MLflow 3 can store runs in (a bare path or ./mlruns is MLflow's old file store, which
# it refuses since 3.13).
SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")
SQLITE_HEADER = b"SQLite format 3\x00"


# An unreachable server must not stall a run or a sweep for minutes inside MLflow's own retry loop
# (by default 7 retries with a backoff factor of 2: over four minutes a request).
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


def bound_http_retries(uri: str) -> None:
    """For a tracking server: MLflow's HTTP retries bounded (HTTP_DEFAULTS, unless the user set
    them), and one line where urllib3 would warn at every retry."""
    if uri.startswith(("http://", "https://")):
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        credentials_to_env(uri)
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def credentials_to_env(uri: str) -> None:
    """A tracking server's user and password, given in its URI, also where MLflow's client reads them
    (MLFLOW_TRACKING_USERNAME/PASSWORD, unless set; this process and those it starts): the records
    keep the URI with its password hidden (redact.py), and a client opened on such a record's URI
    (a sweep's sweep.json) still authenticates."""
    parsed = urlparse(uri)
    if parsed.password and f":{HIDDEN}@" not in uri:
        os.environ.setdefault("MLFLOW_TRACKING_USERNAME", unquote(parsed.username or ""))
        os.environ.setdefault("MLFLOW_TRACKING_PASSWORD", unquote(parsed.password))


def close_orphaned_runs(uri: str, experiment_id: str, sweep_id: str, status: str, reason: str, keep=()) -> list[str]:
    """Close the runs of sweep `sweep_id` still RUNNING, but those in `keep`, with `status` and
    `reason`; called once every job of the sweep has ended, so whatever wrote them is gone (a job
    killed before its watchdog started, or with it). Returns their ids."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs(
        [experiment_id], filter_string=f"tags.`{SWEEP_TAG}` = '{sweep_id}' and attributes.status = 'RUNNING'"
    )
    closed = [r.info.run_id for r in runs if r.info.run_id not in keep]
    for run_id in closed:
        client.set_tag(run_id, REASON_TAG, reason)
        client.set_terminated(run_id, status=status)
    return closed


def check_store(uri: str, key: str = "tracking.uri") -> None:
    """A tracking URI that names a store MLflow can use, checked without creating anything: a known
    scheme; for sqlite, an absolute or relative file path whose folder exists and can be written,
    and, when the file exists, an SQLite database. Servers are not contacted (an outage while a run
    trains is survived, tracker.py); ConfigError (one line) otherwise."""

    scheme = uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""
    valid = "valid: sqlite:////abs/path/mlflow.db, http://host:port, postgresql://user@host/db"
    if scheme not in SCHEMES:
        raise ConfigError(f"{key}={uri!r} is not an MLflow store ({valid})")
    if scheme in ("http", "https"):
        parsed = urlparse(uri)
        try:
            parsed.port  # noqa: B018 - raises ValueError on a port that is not a number in range
        except ValueError:
            raise ConfigError(f"{key}={uri!r} has an invalid port ({valid})") from None
        if not parsed.hostname:
            raise ConfigError(f"{key}={uri!r} names no host ({valid})")
        return
    path = sqlite_path(uri)
    if scheme != "sqlite":
        return
    if path is None or not str(path):
        raise ConfigError(f"{key}={uri!r} names no database file ({valid})")
    if path.is_dir():
        raise ConfigError(f"{key}={uri!r}: {path} is a directory ({valid})")
    if path.exists():
        try:
            head = read_regular(path, len(SQLITE_HEADER))
        except OSError as exc:
            raise ConfigError(f"{key}={uri!r}: {path} cannot be read ({exc.strerror})") from None
        if head and head != SQLITE_HEADER:
            raise ConfigError(f"{key}={uri!r}: {path} is not an SQLite database ({valid})")
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{key}={uri!r}: {path} cannot be written (valid: a store you can write)")
        if head:
            check_mlflow_tables(path, f"{key}={uri!r}")
        return
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(
            f"{key}={uri!r}: the folder {folder} does not exist "
            "(valid: a database file in an existing folder; it is created on first use)"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}={uri!r}: the folder {folder} cannot be written (valid: a folder you can write)")


# Tables every MLflow sqlite store has, from its first migration on.
MLFLOW_TABLES = frozenset({"alembic_version", "experiments", "runs", "metrics", "params", "tags"})
# How long a store another process holds write-locked is waited for before the command gives up.
STORE_WAIT_ENV, STORE_WAIT_S = "ABLATE_STORE_WAIT_S", 60.0


def check_mlflow_tables(path: Path, where: str) -> None:
    """An existing SQLite file is an MLflow store before MLflow opens it (which would create its
    ~60 tables inside another application's database): its tables are MLflow's, or it has none; it
    is whole (as many pages as its header says); and its write lock can be had within
    STORE_WAIT_S (another process writing it: a bounded wait, not MLflow's retries). Read without
    changing anything. ConfigError (one line) otherwise."""
    wait = float(os.environ.get(STORE_WAIT_ENV, STORE_WAIT_S))
    try:
        with closing(sqlite3.connect(path, timeout=wait, isolation_level=None)) as db:
            page_size, pages = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count"))
            if path.stat().st_size < page_size * pages:
                raise ConfigError(
                    f"{where}: {path} is cut short ({path.stat().st_size:,} bytes of the {page_size * pages:,} its "
                    "header says): a damaged store (valid: the whole file, e.g. from a backup, or a new store)"
                )
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and not MLFLOW_TABLES <= tables:
                shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
                raise ConfigError(
                    f"{where}: {path} is another application's SQLite database (tables {shown}), not an MLflow "
                    "store; left untouched (valid: an MLflow store, or a new file)"
                )
            db.execute("BEGIN IMMEDIATE")  # waits up to `wait` for a writer to finish
            db.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise ConfigError(
                f"{where}: {path} has been write-locked by another process for over {wait:g} s; nothing was "
                f"started (valid: run again once it is free, or set {STORE_WAIT_ENV} to wait longer)"
            ) from None
        raise ConfigError(f"{where}: {path} cannot be read as an SQLite database ({exc})") from None
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{where}: {path} is a damaged SQLite database ({exc}) (valid: an intact store)") from None


def client_for(uri: str):
    """An MlflowClient for an existing store: MLflow would create an empty sqlite file instead of
    saying that there is none."""
    from mlflow.tracking import MlflowClient

    check_store(uri)
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise ConfigError(
            f"tracking.uri={uri}: no MLflow store at {path} "
            "(valid: the sqlite file that holds the runs, e.g. tracking.uri=sqlite:////abs/mlflow.db)"
        )
    quiet_store_logs()
    return MlflowClient(tracking_uri=uri)


def ensure_experiment(uri: str, name: str) -> str:
    """Create the store and the experiment once (callers fan out only after this returns).

    Two launches that meet a fresh sqlite store at once would both run MLflow's schema migrations
    and one would die ("duplicate column name"): the first use of a sqlite store happens under an
    exclusive flock(2) of its folder, so the second finds the tables made. A sqlite store keeps its
    artifacts beside the database file, not in the current directory. The experiment is marked as
    model training, so MLflow's UI opens it on its runs and charts (an experiment made before that
    tag existed gets it now, see mark_model_training).
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    quiet_store_logs()
    with _store_lock(uri):
        path = sqlite_path(uri)
        if path is not None and not path.exists():
            _copy_empty_store(path)
        client = MlflowClient(tracking_uri=uri)
        try:
            exp = client.get_experiment_by_name(name)
        except MlflowException as exc:
            raise not_mlflow(exc, uri) or exc from None
        if exp is not None:
            mark_model_training(client, exp)
            return exp.experiment_id
        location = None
        if uri.startswith("sqlite:///"):
            location = Path(uri[len("sqlite:///") :]).parent.joinpath("mlartifacts").as_uri()
        try:
            return client.create_experiment(
                name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND}
            )
        except MlflowException:
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
            mark_model_training(client, exp)
            return exp.experiment_id


def not_mlflow(exc: Exception, uri: str) -> ConfigError | None:
    """The one line for a server at `uri` that answers, but not as MLflow's (MLflow's exception quotes
    its whole answer, a web page, after "Response body:"); None for any other failure."""
    text = str(exc)
    head, cut, _ = text.partition(". Response body:")
    if not cut or " 404 " not in f"{head} ":
        return None
    return ConfigError(
        f"tracking.uri={redact(uri)!r} answered, but not as an MLflow tracking server "
        f"({' '.join(redact(head).split())[:160]}) (valid: the URL of `mlflow server`, e.g. http://127.0.0.1:5000)"
    )


def _copy_empty_store(path: Path) -> None:
    """A new sqlite store as a copy of an empty one kept per MLflow version in the cache: making the
    schema (MLflow's ~60 migrations) takes about 2 s of CPU, a copy milliseconds, so a machine pays
    it once, not once per store. MLflow's Default experiment (id 0) keeps its artifacts beside the
    database, like every experiment made here. Where the cache cannot be written, MLflow makes the
    store itself."""
    import mlflow

    template = cache_dir() / "mlflow-stores" / f"empty-{mlflow.__version__}.db"
    try:
        if not template.is_file():
            _make_empty_store(template)
        with replacing(path) as tmp:
            shutil.copyfile(template, tmp)
            with closing(sqlite3.connect(tmp)) as db, db:
                artifacts = path.parent.joinpath("mlartifacts", "0").as_uri()
                db.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0", (artifacts,))
    except (OSError, sqlite3.Error):
        return


def _make_empty_store(template: Path) -> None:
    from mlflow.tracking import MlflowClient

    with replacing(template) as tmp:
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments()
        _forget_engine(f"sqlite:///{tmp}")


def _forget_engine(uri: str) -> None:
    """Close the connections MLflow keeps open to a store for the life of the process (one engine per
    URI), here for a file that is renamed away."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engine = SqlAlchemyStore._engine_map.pop(uri, None)
    if engine is not None:
        engine.dispose()


def mark_model_training(client, experiment) -> None:
    """Tag an existing experiment as model training unless someone chose its kind: a missing tag,
    or one the UI only inferred (its values end in "_inferred"), is replaced."""
    kind = experiment.tags.get(EXPERIMENT_KIND_TAG, "")
    if kind == MODEL_TRAINING_KIND or (kind and not kind.endswith("_inferred")):
        return
    client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)


@contextmanager
def _store_lock(uri: str):
    """An exclusive lock on a sqlite store's folder while it is first opened (nothing elsewhere)."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    fd = os.open(path.parent if str(path.parent) else ".", os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a filesystem without locks: as before, unguarded
            pass
        yield
    finally:
        os.close(fd)
