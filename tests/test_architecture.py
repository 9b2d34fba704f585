"""The package layout as a rule: imports run one way through the layers, no module imports in a
cycle, planning and fitting work without torch, and every child process starts through one entry
point (ablate/child.py). Each package's __init__ lists its modules and states its API (`__all__`),
and other packages import only that. The tests' own layout too: tests/<package>/
mirrors src/ablate/, shared set-up is in fixtures, and no file under tests/ imports another test file."""

import ast
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from ablate.child import TARGET

SRC = Path(__file__).resolve().parents[1] / "src" / "ablate"
TESTS = Path(__file__).resolve().parent

# Lowest first. A module may import its own package and any package of a lower rank.
LAYERS = [
    {"ablate"},  # config/ (and the presets, conf/), child, errors, files, faults, host, provenance
    {"model", "data"},
    {"perf"},
    {"tracking"},
    {"run", "scaling"},
    {"plan"},
    {"sweep"},
    {"search"},
    {"cli"},
]
RANK = {pkg: rank for rank, pkgs in enumerate(LAYERS) for pkg in pkgs}
# Subpackages that belong to the bottom layer: the schemas, and the presets they are composed from.
BOTTOM = {"config", "conf"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}
# Packages with an API of their own: the layers, and config/ (the schemas) in the bottom layer.
API_PACKAGES = sorted(p.name for p in SRC.iterdir() if (p / "__init__.py").exists() and p.name != "conf")


def api_table(package: str) -> dict[str, tuple[str, str | None] | None]:
    """A package's API as its __init__ states it: name -> (the module, relative, it comes from, and
    its attribute there or None for the module itself); None where the __init__ imports the name
    itself (config/). Read from the source: `lazy_api(__name__, {module: names}, modules=(...))`, else
    `__all__`."""
    tree = ast.parse((SRC / package / "__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_api":
            names = ast.literal_eval(node.args[1])
            modules = next((ast.literal_eval(k.value) for k in node.keywords if k.arg == "modules"), ())
            table = {name: (module, name) for module, ns in names.items() for name in ns}
            return table | {m.rpartition(".")[2]: (m, None) for m in modules}
    listed = next(n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "__all__")
    return dict.fromkeys(ast.literal_eval(listed))


API = {pkg: api_table(pkg) for pkg in API_PACKAGES}


def api_package(module: str) -> str | None:
    """The package whose API a module belongs to: ablate.scaling.laws.single -> scaling, ablate.config.run
    -> config; None for the modules at the top (files.py, child.py, ...)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "ablate" and parts[1] in API else None


def package(module: str) -> str:
    """The layer package of a module: ablate.run.train -> run; ablate.files, ablate.config.run -> ablate;
    __main__ is the CLI."""
    parts = module.split(".")
    if module == "ablate.__main__":
        return "cli"
    return parts[1] if len(parts) > 1 and (SRC / parts[1]).is_dir() and parts[1] not in BOTTOM else "ablate"


def resolve(name: str) -> str:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported ablate module, at module level?) for every import outside `if TYPE_CHECKING:`, and
    for every module named in a string (`importlib.import_module("ablate.cli.train")`, a list of
    modules to preload, `python -m ablate.x`): an import by name, made when the code runs."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    top = {id(node) for node in tree.body}
    for block in tree.body:  # imports under a module-level try/if still run at import time
        if isinstance(block, (ast.If, ast.Try)) and id(block) not in type_only:
            top |= {id(node) for node in ast.walk(block)}
    found = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ablate":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.append((full if full in MODULES else through_api(node.module, alias.name), id(node) in top))
        elif isinstance(node, ast.Import):
            found += [(resolve(a.name), id(node) in top) for a in node.names if a.name.split(".")[0] == "ablate"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _names_a_module(node.value):
            found.append((node.value.partition(":")[0], False))
    return found


def through_api(module: str, name: str) -> str:
    """The module a name imported from `module` comes from: for a package's API (`from ablate.scaling
    import Points`), the module its __init__ loads it from (ablate.scaling.points)."""
    package = api_package(module)
    entry = API[package].get(name) if package and module == f"ablate.{package}" else None
    return f"{module}.{entry[0]}" if entry else resolve(module)


def _names_a_module(text: str) -> bool:
    """A module's name, or a child's target in it ("ablate.run.watchdog:main", ablate/child.py)."""
    return text.startswith("ablate.") and text.partition(":")[0] in MODULES


GRAPH = {m: imports(p) for m, p in MODULES.items()}


def test_every_package_has_a_layer():
    packages = {package(m) for m in MODULES}
    assert packages <= set(RANK), f"packages without a layer: {sorted(packages - set(RANK))}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    mine = package(module)
    upward = [target for target, _ in GRAPH[module] if package(target) != mine and RANK[package(target)] >= RANK[mine]]
    assert not upward, f"{module} ({mine}, layer {RANK[mine]}) imports {upward}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    cycles, done, path = [], set(), []

    def visit(node: str) -> None:
        if node in path:
            cycles.append(path[path.index(node) :] + [node])
            return
        if node in done:
            return
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            visit(nxt)
        path.pop()
        done.add(node)

    for node in sorted(edges):
        visit(node)
    return cycles


def test_no_module_level_import_cycle():
    edges = {m: {t for t, top in targets if top and t != m} for m, targets in GRAPH.items()}
    assert _cycles(edges) == []


def test_no_import_cycle_even_through_function_level_imports():
    edges = {m: {t for t, _ in targets if t != m} for m, targets in GRAPH.items()}
    assert _cycles(edges) == []


def test_the_checker_finds_an_upward_import_and_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    assert RANK[package("ablate.cli.train")] > RANK[package("ablate.run.train")] > RANK[package("ablate.config.run")]


def test_the_checker_sees_imports_by_name(tmp_path):
    """A module imported by its name in a string is an import like any other: a layer that has a
    worker preload the command line's modules imports upward."""
    (tmp_path / "m.py").write_text(
        "import importlib\nPRELOAD = ('numpy', 'ablate.cli.train')\n"
        "def f():\n    importlib.import_module('ablate.run.train')\n    return ['-m', 'ablate.tracking.agent']\n"
        "TAG = 'ablate.nothing'\nCHILD = spawn('ablate.run.watchdog:main', {})\n"
    )
    assert imports(tmp_path / "m.py") == [
        ("ablate.cli.train", False),
        ("ablate.run.watchdog", False),
        ("ablate.run.train", False),
        ("ablate.tracking.agent", False),
    ]


# -- the processes ---------------------------------------------------------------------------------

CHILD_ENTRY = "ablate.child"


def child_starts(path: Path) -> list[str]:
    """Ways a module starts a process of the project other than ablate/child.py: `python -m` with a
    module of ablate (`python -m ablate` is the command line itself, a user's path), and
    multiprocessing, torch's included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.List, ast.Tuple)):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found += [f"-m {b}" for a, b in pairwise(words) if a == "-m" and str(b).startswith("ablate.")]
        elif isinstance(node, ast.Attribute) and node.attr == "multiprocessing":
            found.append(ast.unparse(node))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            found += [n for n in names if n and "multiprocessing" in n.split(".")]
    return found


def test_the_checker_finds_a_child_started_its_own_way(tmp_path):
    (tmp_path / "m.py").write_text(
        "import torch.multiprocessing as mp\nfrom multiprocessing import Process\n"
        "def f():\n    torch.multiprocessing.get_context('spawn')\n"
        "    run([sys.executable, '-m', 'ablate.run.watchdog', uri])\n    run([python, '-m', 'ablate', *args])\n"
    )
    assert sorted(child_starts(tmp_path / "m.py")) == [
        "-m ablate.run.watchdog",
        "multiprocessing",
        "torch.multiprocessing",
        "torch.multiprocessing",
    ]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != CHILD_ENTRY))
def test_every_child_starts_through_the_one_entry_point(module):
    """Every process the project starts runs ablate/child.py with one request (docs/architecture.md,
    "The process tree"), so that each is seen, named and tied to its parent in one place."""
    assert child_starts(MODULES[module]) == [], f"{module} starts a child its own way"


def child_targets(path: Path) -> list[str]:
    """The children's targets a module names ("ablate.run.watchdog:main")."""
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and TARGET.fullmatch(node.value)
    ]


def _top_level_functions(module: str) -> set[str]:
    return {n.name for n in ast.parse(MODULES[module].read_text()).body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_child_target_names_a_function_that_exists(module):
    """A target is resolved only when its child starts: one that names a moved module or a renamed
    function would fail in the child alone, so it is resolved here."""
    missing = [
        t
        for t in child_targets(MODULES[module])
        if t.partition(":")[2] not in _top_level_functions(resolve(t.partition(":")[0]))
    ]
    assert missing == []


def test_planning_and_fitting_do_not_load_torch():
    """The planner prices an H200 run and the fitter fits a CSV on a machine without torch: importing
    their modules (and the commands over them) must not import it."""
    names = sorted(m for m in MODULES if package(m) in ("plan", "scaling")) + [
        "ablate.cli.plan",
        "ablate.cli.fit",
        "ablate.cli.backtest",
    ]
    code = "\n".join(
        [
            "import importlib, sys",
            f"for m in {names!r}: importlib.import_module(m)",
            "print(sorted(k for k in sys.modules if k.split('.')[0] == 'torch'))",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- the tests' own layout -------------------------------------------------------------------------


def test_imports_of_a_test_file(tmp_path):
    """What the rule below catches: conftest, a test module by any path, a relative one; not support."""
    (tmp_path / "test_x.py").write_text(
        "import conftest\nfrom test_train import run\nimport tests.run.test_train as t\nfrom . import test_y\n"
        "from .test_z import q\nimport support\nfrom support import ROOT\nfrom ablate.run import train\n"
    )
    assert imported_test_modules(tmp_path / "test_x.py") == [
        "conftest",
        "test_train",
        "tests.run.test_train",
        ".test_y",
        ".test_z",
    ]


def imported_test_modules(path: Path) -> list[str]:
    """The conftest and test_* modules a file imports, anywhere in it (functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names = [base] if node.module else [f"{base}{a.name}" for a in node.names]
        else:
            continue
        found += [n for n in names if any(p == "conftest" or p.startswith("test_") for p in n.lstrip(".").split("."))]
    return found


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_file_imports_conftest_or_another_test_file(path):
    """Shared set-up is a fixture (tests/conftest.py, tests/<package>/conftest.py), constants are in
    tests/support.py; a test file imported by another runs its tests twice and hides what it shares."""
    assert imported_test_modules(path) == [], f"{path.relative_to(TESTS)} imports {imported_test_modules(path)}"


def test_test_file_names_are_unique():
    """pytest's default (prepend) import mode imports each test file by its base name."""
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_tests_mirror_the_packages():
    """tests/<folder>/ is a package of src/ablate/, or the docs' examples (docs/), or committed inputs (fixtures/)."""
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert sorted(folders - packages - {"docs", "fixtures"}) == []


def test_only_the_conftest_puts_tests_in_xdist_groups():
    """pytest-xdist joins the names of every xdist_group an item carries into one new group: a
    group set in a test file would take a `slurm` test out of the group the others share. Tests say
    what they need with markers (slurm, load, alone); tests/conftest.py turns them into groups."""
    setting = [
        p.relative_to(TESTS)
        for p in TESTS.rglob("*.py")
        if p != TESTS / "conftest.py" and "xdist_group" in p.read_text()
    ]
    assert [str(p) for p in setting if p.name != "test_architecture.py"] == []


PY_FILES = sorted(SRC.parent.rglob("*.py"))  # src/ablate and src/hydra_plugins


@pytest.mark.parametrize("path", PY_FILES, ids=lambda p: str(p.relative_to(SRC.parent)))
def test_every_import_of_ablate_names_something_that_exists(path):
    """`from ablate.x import y` anywhere in src/, inside functions too: a lazy import that names a moved
    module fails only when its command runs, so it is resolved here."""
    import importlib

    missing = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ablate":
            try:
                imported = importlib.import_module(node.module)
            except ModuleNotFoundError:
                missing.append(node.module)
                continue
            missing += [
                f"{node.module}.{a.name}"
                for a in node.names
                if not hasattr(imported, a.name) and f"{node.module}.{a.name}" not in MODULES
            ]
    assert missing == []


def _third_party_at_module_level(path: Path) -> set[str]:
    """Top-level names of the packages outside ablate and the standard library a module imports when it is imported."""
    tree = ast.parse(path.read_text())
    top = set()
    for block in tree.body:
        nodes = ast.walk(block) if isinstance(block, (ast.If, ast.Try)) else [block]
        for node in nodes:
            if isinstance(node, ast.Import):
                top |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                top.add(node.module.split(".")[0])
    return {name for name in top if name not in sys.stdlib_module_names and name not in ("ablate", "__future__")}


def _loads_a_dependency(module: str, seen: set[str] | None = None) -> bool:
    """Whether importing an ablate module imports a package outside the standard library, through
    its module-level imports."""
    seen = set() if seen is None else seen
    if module in seen:
        return False
    seen.add(module)
    if _third_party_at_module_level(MODULES[module]):
        return True
    parents = [".".join(module.split(".")[:i]) for i in range(2, module.count(".") + 1)]
    targets = [t for t, top in GRAPH[module] if top] + [p for p in parents if p in MODULES]
    return any(_loads_a_dependency(t, seen) for t in targets)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_inside_functions_only_keep_a_dependency_lazy(module):
    """An import inside a function is there to keep a dependency (torch, MLflow, matplotlib, ...) from
    loading with the module; the standard library and ablate modules that load no dependency are
    imported at the top, where a reader sees them."""
    tree = ast.parse(MODULES[module].read_text())
    top = {
        id(n)
        for block in tree.body
        for n in ast.walk(block)
        if not isinstance(block, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    needless = []
    for node in ast.walk(tree):
        if id(node) in top or not isinstance(node, (ast.Import, ast.ImportFrom)) or getattr(node, "level", 0):
            continue
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        for name in names:
            if name.split(".")[0] in sys.stdlib_module_names:
                needless.append(name)
            elif name.split(".")[0] == "ablate":
                target = resolve(name)
                if isinstance(node, ast.ImportFrom):
                    full = [through_api(name, a.name) for a in node.names]
                    full = [f for f in full if f in MODULES and f != target] or [
                        f"{name}.{a.name}" for a in node.names if f"{name}.{a.name}" in MODULES
                    ]
                    if full and not any(_loads_a_dependency(f) for f in full):
                        needless.append(name)
                        continue
                    if full:
                        continue
                if not _loads_a_dependency(target):
                    needless.append(name)
    assert needless == [], f"{module} imports inside functions what loads no dependency: {needless}"


# -- the packages' APIs ----------------------------------------------------------------------------

PACKAGE_DIRS = sorted(p.parent for p in SRC.rglob("__init__.py") if p.parent.name != "conf")


@pytest.mark.parametrize("folder", PACKAGE_DIRS, ids=lambda p: str(p.relative_to(SRC.parent)))
def test_every_module_is_listed_in_its_package(folder):
    """A package's __init__ says what each of its modules (and subpackages) is for: a module it does
    not list is one a reader of the package cannot find."""
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    entries = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
    entries += [f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").exists()]
    assert [e for e in entries if e not in doc] == []


def api_violations(path: Path, importer: str) -> list[str]:
    """The imports of another package's modules that go around its API: `from ablate.P.m import x`, or
    `from ablate.P import x` with x not in P's API, from a module outside P."""
    mine = api_package(importer) if importer != "ablate.__main__" else "cli"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            named = [(node.module, a.name) for a in node.names]
        else:
            continue
        for module, name in named:
            package = api_package(module)
            if package is None or package == mine:
                continue
            if module != f"ablate.{package}" or name is None or name not in API[package]:
                found.append(f"{module}:{name}" if name else module)
    return found


def test_the_checker_finds_an_import_around_an_api(tmp_path):
    (tmp_path / "m.py").write_text(
        "from ablate.scaling.points import Points\nfrom ablate.scaling import Points, fit_approach3\n"
        "import ablate.run.train\nfrom ablate.config import ConfigError\nfrom ablate.plan.make import make_plan\n"
        "from ablate.files import write_json\n"
    )
    assert api_violations(tmp_path / "m.py", "ablate.plan.loss") == [
        "ablate.scaling.points:Points",
        "ablate.scaling:fit_approach3",
        "ablate.run.train",
    ]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_other_packages_are_imported_through_their_api(module):
    """A package's modules are its own to move and split (scaling/ became fitting/, laws/, reports/
    without a caller noticing); other packages import the names its __init__ exports."""
    assert api_violations(MODULES[module], module) == [], f"{module} imports around an API"


PLUGIN_FILES = sorted((SRC.parent / "hydra_plugins").rglob("*.py"))


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: str(p.relative_to(SRC.parent)))
def test_the_hydra_plugins_import_the_project_through_its_apis(path):
    """The plugins are entry points Hydra finds by their package's name: what they call in the
    project is what its packages export, not the modules the packages are split into."""
    assert api_violations(path, "hydra_plugins") == []


@pytest.mark.parametrize("package", API_PACKAGES)
def test_every_name_of_an_api_is_what_its_module_defines(package):
    """Each exported name loads, and is the object of the module it is said to come from: a name that
    is also a submodule's would become the submodule once that is imported (`import ablate.run.prepare`
    sets the package's attribute `prepare`), so such a module is exported as itself."""
    import importlib

    api = importlib.import_module(f"ablate.{package}")
    assert sorted(api.__all__) == sorted(API[package])
    entries = {name: entry for name, entry in API[package].items() if entry}
    shadowed = [name for name, (_, attr) in entries.items() if attr and f"ablate.{package}.{name}" in MODULES]
    assert shadowed == []
    modules = {name: importlib.import_module(f"ablate.{package}.{module}") for name, (module, _) in entries.items()}
    wrong = [
        name
        for name, (_, attr) in entries.items()
        if getattr(api, name) is not (getattr(modules[name], attr) if attr else modules[name])
    ]
    assert wrong == []


@pytest.mark.parametrize("package", sorted(set(API_PACKAGES) - {"config"}))
def test_an_init_imports_nothing_but_its_api(package):
    """Importing a package loads none of its modules: each is loaded when one of its names is first
    used (ablate/api.py), so that importing plan/ or scaling/ never loads torch through a sibling."""
    tree = ast.parse((SRC / package / "__init__.py").read_text())
    imported = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imported == ["from ablate.api import lazy_api"]


def test_the_layer_figure_names_every_package_and_bottom_module():
    """docs/architecture.md's figure of the layers, drawn from the code: every package of LAYERS and
    every module and subpackage of the bottom layer (api.py was once left out)."""
    doc = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    figure = next(block for block in doc.split("```text")[1:] if block.lstrip().startswith("cli/"))
    figure = figure.split("```")[0]
    named = set(re.findall(r"[\w]+(?:\.py|/)", figure))
    bottom = {p.name for p in SRC.glob("*.py") if p.stem not in ("__init__", "__main__")}
    bottom |= {f"{p}/" for p in BOTTOM}
    packages = {f"{p}/" for layer in LAYERS[1:] for p in layer}
    assert bottom | packages <= named, sorted((bottom | packages) - named)
