"""One door to Hydra, as a rule of the source (src/ablate and src/hydra_plugins): Hydra's internals
are imported by one module (ablate/hydra_app.py), a ConfigError is caught in one place, which makes
it the user's one line (ablate/oneline.py, one_line), and the Hydra plugins, which the app itself starts, never import
the command line back."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PY_FILES = sorted(SRC.rglob("*.py"))
DOOR = SRC / "ablate" / "hydra_app.py"
ONE_LINE = SRC / "ablate" / "oneline.py"


def _rel(path: Path) -> str:
    return str(path.relative_to(SRC))


def test_only_the_app_touches_hydras_internals():
    """`hydra._internal` anywhere in a module's text: an import, a module named in a string (a
    worker's preload list), a comment that leans on it."""
    touching = [_rel(p) for p in PY_FILES if "hydra._internal" in p.read_text()]
    assert touching == [_rel(DOOR)]


def _caught(handler: ast.ExceptHandler) -> set[str]:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type] if handler.type else []
    return {ast.unparse(k).rpartition(".")[2] for k in kinds}


def _config_error_handlers(path: Path) -> list[ast.ExceptHandler]:
    tree = ast.parse(path.read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and "ConfigError" in _caught(n)]


def test_a_config_error_is_caught_in_one_place():
    """`except ConfigError` is oneline.one_line's alone, which says it. Context travels with the error
    instead of a handler that catches it to add some (sweep/plan.py's of_job names the job on any
    error raised while planning it); a narrower kind (UnsupportedError: skip the job) may be caught."""
    handlers = [f"{_rel(p)}:{h.lineno}" for p in PY_FILES for h in _config_error_handlers(p)]
    assert handlers == [f"{_rel(ONE_LINE)}:{h.lineno}" for h in _config_error_handlers(ONE_LINE)]
    assert len(handlers) == 1


def test_the_checker_finds_a_handler_however_it_names_the_error(tmp_path):
    (tmp_path / "m.py").write_text(
        "try:\n    f()\nexcept ConfigError as exc:\n    fail(str(exc))\n"
        "try:\n    f()\nexcept (OSError, errors.ConfigError) as exc:\n"
        "    raise ConfigError(f'job 3: {exc}') from None\n"
        "try:\n    f()\nexcept UnsupportedError:\n    pass\n"
    )
    assert [h.lineno for h in _config_error_handlers(tmp_path / "m.py")] == [3, 7]


def _imported_modules(path: Path) -> list[str]:
    """Every module a file imports (inside functions too), and every `ablate.` module it names in a string."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("ablate."):
            found.append(node.value.partition(":")[0])
    return found


@pytest.mark.parametrize("path", sorted((SRC / "hydra_plugins").rglob("*.py")), ids=_rel)
def test_no_plugin_imports_the_command_line(path):
    """The plugins raise ConfigError and the app that built them says it; calling back into
    ablate.cli would make the command line a layer below its own plugins."""
    assert [m for m in _imported_modules(path) if m == "ablate.cli" or m.startswith("ablate.cli.")] == []
