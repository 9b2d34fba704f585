"""The examples of README.md and docs/*.md as data: which commands a page shows, what output it
promises, and how the test runs each one. The conventions are documented in docs/README.md
("How these pages are tested"); this module is their only implementation.

A support module, not a test file: tests/docs/test_examples.py and tests/docs/conftest.py import it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ablate.cli.main import COMMANDS
from ablate.config import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# The tiny budget of `<!-- example: tiny -->`; docs/README.md shows the same line (a test checks).
TINY = (
    "train.steps=4 train.batch_size=4 train.eval_interval=2 train.eval_batches=1 "
    "data.n_words=500 data.train_tokens=200000 data.val_tokens=20000"
)
BUDGET_KEYS = ("train.steps", "train.tokens", "train.flops")
COMMAND_NAMES = set(COMMANDS)  # the front door's table: a command added there is known here
# The commands that train (tiny gives them its budget); `study` trains only with --run.
TRAINING = {"train", "submit", "study"}
# Commands of the Hydra apps: run in the warm process when they use no shell syntax.
IN_PROCESS = {name for name, (_, _, style) in COMMANDS.items() if style.startswith("hydra")}

FLAGS = {"tiny", "gpu", "slurm"}
KEYS = {"append", "replace", "exit", "files", "server", "timeout"}
# How a line that is meant to be run starts: outside a console block it is an error.
COMMAND_START = re.compile(r"^(\$ |ablate(\s|$)|python3? -m ablate|make \w|mlflow \w|optuna-dashboard|\.venv/bin/)")
DIRECTIVE = re.compile(r"^<!--\s*example:(.*)-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)\s*$")


class ExampleError(ValueError):
    """A page breaks the conventions of docs/README.md; the message names the page and line."""


@dataclass
class Command:
    text: str  # as the page shows it, continuation lines joined
    promised: list[str]  # output lines the page shows under it
    line: int


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence
    commands: list[Command]
    flags: set[str] = field(default_factory=set)
    append: str = ""
    replace: list[tuple[str, str]] = field(default_factory=list)
    exit: int = 0
    files: list[str] = field(default_factory=list)
    server: str | None = None
    timeout: float = 300.0

    @property
    def where(self) -> str:
        name = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{name}:{self.line}"


@dataclass
class Page:
    path: Path
    blocks: list[Block]  # console blocks, in page order
    stray: list[tuple[int, str]]  # command-like lines outside console blocks

    @property
    def needs_slurm(self) -> bool:
        return any("slurm" in b.flags for b in self.blocks)


def parse_page(path: Path, text: str | None = None) -> Page:
    lines = (path.read_text() if text is None else text).splitlines()
    blocks, stray = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].startswith(("    ", "\t")) and COMMAND_START.match(lines[i].strip()):
                stray.append((i + 1, lines[i].strip()))
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        directive = _directive_before(lines, start)
        if lang != "console":
            stray += [(start + 2 + k, ln.strip()) for k, ln in enumerate(body) if COMMAND_START.match(ln.strip())]
            if directive is not None:
                raise ExampleError(f"{path.name}:{start + 1}: an example directive above a {lang or 'plain'} block")
            continue
        block = Block(path, start + 1, _commands(body, start + 2))
        if directive is not None:
            _apply_directive(block, directive)
        if not block.commands:
            raise ExampleError(f"{block.where}: a console block without a `$ ` command")
        blocks.append(block)
    return Page(path, blocks, stray)


def _directive_before(lines: list[str], fence_index: int) -> str | None:
    j = fence_index - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    m = DIRECTIVE.match(lines[j]) if j >= 0 else None
    return m.group(1) if m else None


def _commands(body: list[str], first_line: int) -> list[Command]:
    commands: list[Command] = []
    k = 0
    while k < len(body):
        line = body[k]
        if line.startswith("$ "):
            text, start = line[2:], k
            while text.endswith("\\") and k + 1 < len(body):
                k += 1
                text = text[:-1].rstrip() + " " + body[k].strip()
            commands.append(Command(text.strip(), [], first_line + start))
        elif line.strip():
            if not commands:
                raise ExampleError(f"line {first_line + k}: output before any `$ ` command")
            commands[-1].promised.append(line.strip())
        k += 1
    return commands


def _apply_directive(block: Block, body: str) -> None:
    try:
        words = shlex.split(body)
    except ValueError as exc:
        raise ExampleError(f"{block.where}: directive does not parse: {exc}") from None
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            if key not in FLAGS:
                raise ExampleError(f"{block.where}: unknown directive {key!r} (valid: {sorted(FLAGS | KEYS)})")
            block.flags.add(key)
        elif key not in KEYS:
            raise ExampleError(f"{block.where}: unknown directive {key!r} (valid: {sorted(FLAGS | KEYS)})")
        elif key == "replace":
            old, arrow, new = value.partition(" => ")
            if not arrow or not old:
                raise ExampleError(f"{block.where}: replace={value!r} is not 'OLD => NEW'")
            block.replace.append((old, new))
        elif key == "append":
            block.append = (block.append + " " + value).strip()
        elif key == "exit":
            block.exit = int(value)
        elif key == "timeout":
            block.timeout = float(value)
        elif key == "files":
            block.files += value.split()
        elif key == "server":
            block.server = value
    for old, _ in block.replace:
        if not any(old in c.text for c in block.commands):
            raise ExampleError(f"{block.where}: replace {old!r} matches no command of the block")


# --- turning a command as shown into the command that runs ------------------------------------


def split_comment(text: str) -> str:
    """The command without a trailing shell comment (a `#` after a blank, outside quotes)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text.rstrip()


def ablate_args(code: str) -> list[str] | None:
    """The arguments of an `ablate` / `python -m ablate` command, or None for anything else."""
    try:
        words = shlex.split(code)
    except ValueError:
        return None
    if words[:1] == ["ablate"]:
        return words[1:]
    if len(words) >= 3 and words[0] in ("python", "python3") and words[1:3] == ["-m", "ablate"]:
        return words[3:]
    return None


def command_name(args: list[str]) -> str:
    return args[0] if args and args[0] in COMMAND_NAMES else "train"


def trains(args: list[str]) -> bool:
    name = command_name(args)
    return name in TRAINING and (name != "study" or "--run" in args)


def preset_budget(args: list[str], conf: Path = CONF_DIR) -> bool:
    """Whether a `+sweep=NAME` preset replaces the step budget by a token or FLOP budget."""
    import yaml

    for a in args:
        if a.startswith("+sweep="):
            path = conf / "sweep" / f"{a.split('=', 1)[1]}.yaml"
            tree = yaml.safe_load(path.read_text()) if path.is_file() else {}
            if "steps" in (tree.get("train") or {}) and tree["train"]["steps"] is None:
                return True
    return False


def tiny_overrides(args: list[str]) -> list[str]:
    """The tiny budget's overrides that this command does not set itself (docs/README.md)."""
    given = {a.split("=", 1)[0].lstrip("+~") for a in args if "=" in a and not a.startswith("-")}
    other_source = any(a.startswith("data=") and a != "data=synthetic" for a in args)
    extra = []
    for item in TINY.split():
        key = item.split("=", 1)[0]
        if key in given:
            continue
        if key == "train.steps" and (given & set(BUDGET_KEYS) or preset_budget(args)):
            continue
        if key.startswith("data.") and other_source:
            continue
        extra.append(item)
    return extra


def has_shell_syntax(code: str) -> bool:
    """Anything bash would treat specially: substitutions, pipes, redirections, lists."""
    lexer = shlex.shlex(code, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return True
    return "$" in code or "`" in code or any(t and set(t) <= set("();<>|&") for t in tokens)


@dataclass
class Prepared:
    code: str  # the bash command line that runs
    args: list[str] | None  # ablate's arguments when it is an ablate command
    in_process: bool
    make: bool


def prepare(block: Block, command: Command, port: int | None = None, cuda: bool = False) -> Prepared:
    """The command as the test runs it: replacements, {port}, tiny, append, and --cfg for gpu."""
    text = command.text
    for old, new in block.replace:
        text = text.replace(old, new)
    code = split_comment(text)
    args = ablate_args(code)
    extra: list[str] = []
    if args is not None:
        if "tiny" in block.flags and trains(args):
            extra += tiny_overrides(args)
        extra += shlex.split(block.append)
        if "gpu" in block.flags and not cuda:
            extra += ["--cfg", "job", "--resolve"]
    if extra:
        code = code + " " + shlex.join(extra)
    if port is not None:
        code = code.replace("{port}", str(port))
    args = ablate_args(code)
    make = code.split()[:1] == ["make"]
    if make:
        code = "make -n " + code.split(None, 1)[1]
    in_process = args is not None and command_name(args) in IN_PROCESS and not has_shell_syntax(code)
    return Prepared(code, args, in_process, make)


def promised_missing(promised: list[str], output: str) -> list[str]:
    """The promised lines that do not appear in the output (runs of blanks count as one)."""
    lines = [" ".join(ln.split()) for ln in output.splitlines()]
    return [p for p in promised if not any(" ".join(p.split()) in ln for ln in lines)]
