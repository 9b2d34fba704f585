"""Credentials in URIs, redacted wherever they would be recorded or printed.

A tracking URI may carry a password (`tracking.uri=http://user:secret@host:5000`,
`postgresql://user:secret@db/mlflow`). MLflow needs it to connect; nothing else does. Every record
this project writes (files.write_json: result.json, summaries, spool records), the config files of a
run (its `.hydra/` folder, logged to MLflow as its config artifact), the params it logs, the errors
it reports and every line it prints (streams.SteadyStream, which MLflow's own "View run at" line
goes through) keep the user name and show the password as ***.
"""

from __future__ import annotations

import re

# scheme://user:password@ (RFC 3986 userinfo); the password is what is hidden
USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:'\"]*):(?P<secret>[^\s/@'\"]+)@")
HIDDEN = "***"


def redact(text: str) -> str:
    """`text` with the password of every URI in it replaced by ***."""
    if "://" not in text:
        return text
    return USERINFO.sub(lambda m: f"{m.group('head')}:{HIDDEN}@", text)


def redact_tree(obj):
    """A JSON-like value (dicts, lists, strings) with every string redacted."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_tree(v) for v in obj]
    return obj
