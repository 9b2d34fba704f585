"""ablate/api.py: a package's API loaded name by name (PEP 562), on a package made for the test."""

import subprocess
import sys

import pytest

from ablate.api import lazy_api

INIT = """from ablate.api import lazy_api
API = {"heavy": ("Thing",), "sub.deep": ("deep_value",)}
__all__, __getattr__, __dir__ = lazy_api(__name__, API, modules=("light",))
"""


@pytest.fixture
def package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "heavy.py").write_text("import json\nclass Thing:\n    pass\n")
    (pkg / "light.py").write_text("VALUE = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "deep.py").write_text("deep_value = 42\n")
    return tmp_path


def run(package, code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=package, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_name_loads_its_module_when_first_used_and_not_before(package):
    code = (
        "import sys, pkg\nprint(sorted(m for m in sys.modules if m.startswith('pkg')))\n"
        "from pkg import Thing, deep_value, light\n"
        "print(Thing.__module__, deep_value, light.VALUE, sorted(m for m in sys.modules if m.startswith('pkg')))"
    )
    before, after = run(package, code).splitlines()
    assert before == "['pkg']"
    assert after == "pkg.heavy 42 1 ['pkg', 'pkg.heavy', 'pkg.light', 'pkg.sub', 'pkg.sub.deep']"


def test_all_and_dir_list_the_api(package):
    out = run(package, "import pkg\nprint(pkg.__all__)\nprint([n for n in dir(pkg) if not n.startswith('_')])")
    assert out.splitlines() == [
        "['Thing', 'deep_value', 'light']",
        "['API', 'Thing', 'deep_value', 'lazy_api', 'light']",
    ]


def test_a_name_outside_the_api_is_one_line_naming_it_and_the_api(package):
    out = run(package, "import pkg\ntry:\n    pkg.nothing\nexcept AttributeError as e:\n    print(e)")
    assert out == "module 'pkg' has no attribute 'nothing' (its API: Thing, deep_value, light)"


def test_a_name_exported_twice_fails_at_once():
    with pytest.raises(ValueError, match="pkg exports 'x' from both a and b"):
        lazy_api("pkg", {"a": ("x",), "b": ("x",)})
