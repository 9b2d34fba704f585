"""Every example command in README.md and docs/*.md runs on a fresh checkout and does what the
page says: its exit status, the output lines it promises, the files it promises. How the pages
mark their examples (and how budgets are made tiny) is documented in docs/README.md."""

from __future__ import annotations

from pathlib import Path

import doc_examples as examples
import pytest


def parse(path: Path) -> examples.Page | examples.ExampleError:
    """A page, or what is wrong with it (reported by the tests below, not as a collection error)."""
    try:
        return examples.parse_page(path)
    except examples.ExampleError as exc:
        return exc


PARSED = {str(p.relative_to(examples.ROOT)): parse(p) for p in examples.PAGES}
PAGES = {name: page for name, page in PARSED.items() if isinstance(page, examples.Page)}


def page_param(name: str):
    marks = [pytest.mark.slow, pytest.mark.e2e]
    page = PARSED[name]
    if isinstance(page, examples.Page) and page.needs_slurm:
        marks.append(pytest.mark.slurm)
    return pytest.param(name, marks=marks, id=name)


RUNNABLE = [page_param(name) for name, page in PARSED.items() if not isinstance(page, examples.Page) or page.blocks]


def test_every_page_follows_the_conventions():
    broken = [str(page) for page in PARSED.values() if not isinstance(page, examples.Page)]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("name", RUNNABLE)
def test_every_example_on_the_page_runs(name, page_run):
    """A page with a `slurm` block is marked slurm, which brings the cluster (tests/conftest.py)."""
    page = PARSED[name]
    if isinstance(page, examples.ExampleError):
        pytest.fail(str(page))
    run = page_run(page)
    for block in page.blocks:
        run.block(block)


# --- the conventions themselves ----------------------------------------------------------------


def test_every_command_shown_is_an_example_that_runs():
    """A command outside a console block would never be run: it must not exist."""
    stray = [f"{name}:{line}: {text}" for name, page in PAGES.items() for line, text in page.stray]
    assert not stray, "commands outside ```console blocks:\n" + "\n".join(stray)


def test_the_pages_have_examples_and_the_readme_links_every_page():
    readme = (examples.ROOT / "README.md").read_text()
    index = (examples.ROOT / "docs" / "README.md").read_text()
    for path in examples.PAGES[1:]:
        if path.name != "README.md":
            assert f"docs/{path.name}" in readme or path.name == "RELIABILITY.md", path.name
            assert f"({path.name})" in index, path.name
    assert sum(len(p.blocks) for p in PAGES.values()) >= 40


def test_docs_readme_states_the_tiny_budget_the_test_uses():
    text = (examples.ROOT / "docs" / "README.md").read_text()
    shown = text.split("<!-- tiny-budget -->", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    assert shown.strip() == examples.TINY


SAMPLE = """
Some prose, then an example with a directive:

<!-- example: tiny replace="train.steps=300 => train.steps=4" append="a.b=1" exit=2 files="x/*.json" -->
```console
$ ablate model=tiny train.steps=300   # a comment
error: one line
$ ablate fit points=p.csv \\
    n_boot=5
$ ablate data=text model=nano
$ ablate model=nano train.tokens=8192
$ ablate $(cat best.args) model=micro
$ make demo    # fresh clone
```

```text
not a command
```
"""


def test_a_page_is_parsed_into_blocks_commands_and_promises():
    (block,) = examples.parse_page(Path("sample.md"), SAMPLE).blocks
    assert block.exit == 2 and block.files == ["x/*.json"] and block.flags == {"tiny"}
    assert [c.text for c in block.commands][:2] == [
        "ablate model=tiny train.steps=300   # a comment",
        "ablate fit points=p.csv n_boot=5",
    ]
    assert block.commands[0].promised == ["error: one line"] and block.commands[1].promised == []
    run = [examples.prepare(block, c) for c in block.commands]
    tiny_rest = examples.TINY.replace("train.steps=4 ", "")
    assert run[0].code == f"ablate model=tiny train.steps=4 {tiny_rest} a.b=1" and run[0].in_process
    assert run[1].code == "ablate fit points=p.csv n_boot=5 a.b=1" and run[1].in_process  # fit: no tiny
    assert "data.n_words" not in run[2].code and "train.steps=4" in run[2].code  # another data source
    assert "train.steps" not in run[3].code  # a token budget is the run's one budget
    assert run[4].code.startswith("ablate $(cat best.args) model=micro") and not run[4].in_process
    assert run[5].code == "make -n demo" and run[5].make


def test_tiny_leaves_the_step_budget_to_a_preset_that_sets_tokens():
    block = examples.Block(
        Path("sample.md"), 1, [examples.Command("ablate +sweep=scaling model=nano", [], 2)], {"tiny"}
    )
    code = examples.prepare(block, block.commands[0]).code
    assert "train.steps" not in code and "train.batch_size=4" in code  # conf/sweep/scaling.yaml: train.steps: null
    block.commands[0].text = "ablate +sweep=precision"
    assert "train.steps=4" in examples.prepare(block, block.commands[0]).code  # a step budget of its own


@pytest.mark.parametrize(
    "text, message",
    [
        ("<!-- example: tiyn -->\n```console\n$ ablate\n```\n", "unknown directive 'tiyn'"),
        ('<!-- example: replace="x => y" -->\n```console\n$ ablate\n```\n', "matches no command"),
        ("<!-- example: tiny -->\n```text\nablate\n```\n", "directive above a text block"),
        ("```console\nno command here\n```\n", "output before any"),
    ],
    ids=["unknown directive", "stale replace", "directive above a text block", "output before a command"],
)
def test_a_broken_convention_is_one_clear_message(text, message):
    with pytest.raises(examples.ExampleError, match=message):
        examples.parse_page(Path("sample.md"), text)


def test_stray_commands_are_found_in_other_blocks_and_indented_code():
    page = examples.parse_page(Path("sample.md"), "```sh\nablate model=tiny\n```\n\n    make demo\n")
    assert [text for _, text in page.stray] == ["ablate model=tiny", "make demo"]


def test_promised_lines_match_with_blanks_collapsed():
    output = "  E        1.817   1.77 to 1.87\nwrote a, b\n"
    assert examples.promised_missing(["E 1.817", "wrote a"], output) == []
    assert examples.promised_missing(["E 1.818"], output) == ["E 1.818"]
