"""A package's API, loaded when a name is first used (PEP 562: a module's `__getattr__` and `__dir__`).

Each package's `__init__` names what other packages may import from it, module by module:

    __all__, __getattr__, __dir__ = lazy_api(__name__, {"points": ("Points", "RunCurve")}, modules=("runs",))

`from ablate.scaling import Points` imports ablate/scaling/points.py then, and only then, so that
importing one module of a package loads none of its siblings (nor torch, MLflow, Optuna or
matplotlib with them). A module in `modules` is exported as itself, a namespace (`from ablate.model
import accounting`)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any


def lazy_api(
    package: str, names: Mapping[str, Sequence[str]], modules: Sequence[str] = ()
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`__all__`, `__getattr__` and `__dir__` for `package`: `names` maps each of its modules (dotted,
    relative to it) to the names it exports; `modules` are exported as themselves."""
    where = _where(package, names, modules)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r} (its API: {', '.join(where)})")
        module, attr = where[name]
        loaded: ModuleType = importlib.import_module(f"{package}.{module}")
        return loaded if attr is None else getattr(loaded, attr)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return list(where), __getattr__, __dir__


def _where(
    package: str, names: Mapping[str, Sequence[str]], modules: Sequence[str]
) -> dict[str, tuple[str, str | None]]:
    """name -> (its module, its attribute there, or None for the module itself); a name exported twice fails."""
    entries = [(n, m, n) for m, ns in names.items() for n in ns] + [(m.rpartition(".")[2], m, None) for m in modules]
    where: dict[str, tuple[str, str | None]] = {}
    for name, module, attr in entries:
        if name in where:
            raise ValueError(f"{package} exports {name!r} from both {where[name][0]} and {module}")
        where[name] = (module, attr)
    return where
