"""A trained run as it was left: its folder (result.json, and the config Hydra saved in .hydra/),
its checkpoint in the state dir (STATE/<config hash>/checkpoint.pt), and its model built again
from them, for whatever reads what a run learned (`ablate sample`).

The config is the run's own, resolved as Hydra resolved it when the run started (its
`${hydra:runtime.cwd}` is the folder the run was launched from, from .hydra/hydra.yaml), so the
state dir and the data's cache are the ones it wrote. A cooldown branch's folder
(TRUNK/branches/KEY=BUDGET/) has no .hydra/ of its own: its model and data are its trunk's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ablate.config import ConfigError, RunConfig, parse_run
from ablate.run import checkpoint
from ablate.run.result import BRANCHES_DIR, RunResult, read_result

HYDRA_DIR = ".hydra"


@dataclass(frozen=True)
class SavedRun:
    folder: Path
    cfg: RunConfig  # the model's vocab_size filled in from its checkpoint when the config left it null
    result: RunResult
    state: dict  # the checkpoint: model weights, step, config hash, ...

    @property
    def step(self) -> int:
        return int(self.state["step"])


def find_run(folder: Path, state_dir: str | None = None) -> SavedRun:
    """The run in `folder` and its latest checkpoint (under `state_dir`, else the run's own state
    dir); ConfigError in one line when either is missing or they do not belong together."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(
            f"run={folder} is not a folder (valid: a run's folder with result.json, e.g. outputs/DATE/TIME)"
        )
    result = read_result(folder)
    cfg = run_config(config_folder(folder))
    directory = Path(state_dir or cfg.state_dir) / result.config_hash
    try:
        state = checkpoint.load(directory)
    except Exception as exc:  # torn zip, not a torch file, refused by weights_only, ...
        raise ConfigError(
            f"{directory / checkpoint.CHECKPOINT} does not load ({type(exc).__name__}: "
            f"{checkpoint.first_sentence(str(exc))}) (valid: the checkpoint the run wrote, or state_dir=DIR "
            "where a good copy is)"
        ) from None
    if state is None:
        raise ConfigError(
            f"run={folder} has no checkpoint in {directory} (valid: state_dir=DIR, the state dir it trained "
            "with, when it has moved)"
        )
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise ConfigError(f"{directory / checkpoint.CHECKPOINT} is not a run's checkpoint (it has no model and step)")
    found = state.get("config_hash")
    if found != result.config_hash:
        raise ConfigError(f"{directory / checkpoint.CHECKPOINT} belongs to config {found}, not {result.config_hash}")
    return SavedRun(folder, with_vocabulary(cfg, state), result, state)


def config_folder(folder: Path) -> Path:
    """The folder whose .hydra/ holds the run's config: its own, or a branch's trunk's."""
    if (folder / HYDRA_DIR).is_dir():
        return folder
    trunk = folder.parent.parent
    if folder.parent.name == BRANCHES_DIR and (trunk / HYDRA_DIR).is_dir():
        return trunk
    raise ConfigError(
        f"run={folder} has no {HYDRA_DIR}/config.yaml (valid: the folder Hydra made for the run, with {HYDRA_DIR}/)"
    )


def run_config(folder: Path) -> RunConfig:
    """The RunConfig of the run that Hydra started in `folder`, resolved as it was then: each
    `${hydra:KEY}` (Hydra's resolver, which reads the command now running) read from the run's own
    .hydra/hydra.yaml instead, as the node `${hydra.KEY}` beside it."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    saved = folder / HYDRA_DIR
    try:
        text = (saved / "config.yaml").read_text().replace("${hydra:", "${hydra.")
        cfg = OmegaConf.merge(OmegaConf.load(saved / "hydra.yaml"), OmegaConf.create(text))
        tree = {
            k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
            for k in cfg
            if k != "hydra"  # Hydra's own settings, some of which only a running app resolves
        }
    except (OSError, OmegaConfBaseException, yaml.YAMLError) as exc:
        why = " ".join(str(exc).split())  # yaml's message spans lines
        raise ConfigError(f"{saved} cannot be read as a run's config ({type(exc).__name__}: {why})") from None
    return parse_run(tree)


def with_vocabulary(cfg: RunConfig, state: dict) -> RunConfig:
    """A config whose model.vocab_size is null took it from its data (run/prepare.py): the
    checkpoint's token table says what it was."""
    if cfg.model.vocab_size is not None:
        return cfg
    rows = state["model"]["wte.weight"].shape[0]
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=rows))


def load_model(saved: SavedRun, device: str, dtype):
    """GPT(the run's model config) with the checkpoint's weights, on `device` in `dtype`, for inference."""
    from ablate.model import GPT
    from ablate.run.trainer import state_mismatch

    problem = state_mismatch(saved.cfg.model, saved.state)
    if problem:
        raise ConfigError(f"the checkpoint of run={saved.folder} {problem}")
    model = GPT(saved.cfg.model)
    model.load_state_dict(saved.state["model"])
    return model.to(device=device, dtype=dtype).eval()
