"""`python -m ablate compare`: the arms of an ablation as compute multipliers (a Hydra app over
ablate/conf/compare.yaml).

    python -m ablate compare experiment=NAME arm=precision baseline=fp32 [target=1e18] [tracking.uri=...]
    python -m ablate compare points=FILE.csv baseline=fp32 [arm=arm]     (a CSV with an arm column)
        [arms=[bf16,fp16]] [n_boot=1000] [seed=0] [out=DIR]

Groups an experiment's finished runs by the value of a config key (`arm`: any key the runs record,
e.g. precision, model.attention, model.mup, optim.lr; a config group stands for its name), fits each
arm's law L(C) on the shared ladder, and reports the compute multiplier of every arm against the
baseline at each scale, its trend and its value at the target, each with its verdict (trusted, wide or
not_determined, and why; a not_determined multiplier is printed as the word, not a number). Arms
that share runs (the same size, tokens, data config and seed: for an experiment, its runs'
train.seed and data.* params; for a CSV, its seed or train.seed column and every other column that
is not a point's, such as a sweep's other swept keys) are compared run against run (paired); the
others by their laws alone (unpaired); each arm's line says which. E is
fitted above the data's entropy floor: entropy_floor=, else the points' own (the CSV's entropy_floor
column, the experiment's runs). Writes DIR/multiplier.json,
multiplier.md and multiplier.png (default DIR: exports/NAME-ARM/) and, with experiment=NAME, logs them
to a run tagged ablate.kind=compare. The method is in scaling/multiplier.py, the schema in config/fit.py.
"""

from __future__ import annotations

import csv
import math
import sys

from ablate.cli.common import claim_output, hydra_main
from ablate.cli.fit import StageBar
from ablate.config import CompareConfig, ConfigError, ModelConfig, parse_compare, real_name
from ablate.oneline import one_line
from ablate.provenance import hashed


def arms_from_experiment(cfg: CompareConfig):
    """({arm value: Points}, the key used, entropy floor, experiment id, what was read)."""
    from ablate.scaling import runs as fit_runs

    found = fit_runs.read_experiment(cfg.tracking.uri, cfg.experiment)
    params = fit_runs.run_params(cfg.tracking.uri, found.experiment_id, found.points.run_ids)
    rows = [params.get(r, {}) for r in found.points.run_ids]
    key = next((k for k in (cfg.arm, f"{cfg.arm}.name") if rows and all(k in p for p in rows)), None)
    if key is None:
        varying = sorted(
            k for k in set().union(*rows) if len({p.get(k) for p in rows}) > 1 and not k.startswith("derived.")
        )
        raise ConfigError(
            f"arm={cfg.arm} is not a config key the runs of {cfg.experiment} record "
            f"(valid: a key whose value differs between them: {', '.join(varying) or 'none differs'})"
        )
    # the model's name made again from its sizes, as for pairing below (_model_name)
    values = [(_model_name(p) or p[key]) if key == "model.name" else p[key] for p in rows]
    pairing = [
        # the data's result-determining keys: two checkouts' cache folders hold the same tokens
        _pairing(
            {k: v for k, v in p.items() if k.startswith("data.") and hashed(k)}, p.get("train.seed"), _size(p, key)
        )
        for p in rows
    ]
    source = (
        f"experiment {found.experiment} ({cfg.tracking.uri}): {len(values)} FINISHED training runs; "
        f"skipped {fit_runs.describe_skipped(found.skipped) or 'none'}"
    )
    floor = cfg.entropy_floor if cfg.entropy_floor is not None else found.entropy_floor
    return _group(found.points, values, pairing, cfg), key, floor, found.experiment_id, source


def arms_from_csv(cfg: CompareConfig):
    from ablate.scaling import FitInputError, Points

    points = Points.from_csv(cfg.points)
    with open(cfg.points, newline="") as fh:
        reader = csv.DictReader(fh)
        if cfg.arm not in (reader.fieldnames or []):
            raise FitInputError(
                f"{cfg.points}: no column {cfg.arm!r} (valid: arm=<a column>: {', '.join(reader.fieldnames or [])})"
            )
        rows = list(reader)
    values = [row[cfg.arm] for row in rows]
    pairing = [_csv_pairing(row, cfg.arm) for row in rows]
    floor = cfg.entropy_floor if cfg.entropy_floor is not None else points.entropy_floor
    return _group(points, values, pairing, cfg), cfg.arm, floor, None, f"points: {cfg.points}"


SEED_COLUMNS = ("seed", "train.seed")
# the budget: the tokens column measures it
BUDGET_COLUMNS = ("train.tokens", "train.steps", "train.flops", "train.tokens_per_param")
# what a run measured beyond a point's figures (sweep/summary.points_csv): a run that did not record
# it (an empty cell) is the same run as one that did
MEASURED_COLUMNS = ("bpb",)


def _csv_pairing(row: dict, arm: str) -> tuple:
    """A CSV row's (config, seed, size) beyond its params and tokens: its seed column, every column that
    is not a point's (a sweep's other swept keys, its data config), the arm's, the label and the budget
    aside, and its model column as its size."""
    from ablate.scaling import CSV_OPTIONAL, CSV_REQUIRED

    skip = {*CSV_REQUIRED, *CSV_OPTIONAL, *MEASURED_COLUMNS, "label", arm, *SEED_COLUMNS, *BUDGET_COLUMNS}
    seed = next((row[c] for c in SEED_COLUMNS if row.get(c)), None)
    size = row.get("model") if arm != "model" else None  # a sweep's model column names the run's size
    return _pairing({k: v for k, v in row.items() if k not in skip}, seed, size)


def _pairing(config: dict, seed, size=None) -> tuple:
    return (
        tuple(sorted((k, str(v)) for k, v in config.items())),
        None if seed in (None, "") else str(seed),
        size or None,
    )


def _size(params: dict, arm: str):
    """The run's model by name, which names its size whatever an architecture arm does to its
    parameter count; None where the arm is the model itself (its arms are the sizes). Where the arm is
    one of the sizes (arm=model.n_embd), the name of the rest: runs that differ in it alone are one
    model instance in each arm."""
    if arm in ("model", "model.name", "model.preset"):
        return None
    return _model_name(params, arm) or params.get("model.name")


def _model_name(params: dict, arm: str | None = None) -> str | None:
    """The run's model name made again from its recorded preset and sizes (ModelConfig.named), the
    arm's key left out; so a run recorded before names told sizes (tiny trained at n_embd=128 and
    recorded as tiny) is not taken for tiny. None where its preset is not found."""
    preset = params.get("model.preset") or params.get("model.name")
    if preset is None:
        return None
    keys = tuple(k for k in ModelConfig.NAMED_BY if f"model.{k}" in params and f"model.{k}" != arm)
    sizes = ModelConfig(name=preset, **{k: _number(params[f"model.{k}"]) for k in keys})
    return real_name("model", sizes, keys)


def _number(param: str):
    """An MLflow param (a string) as the config held it: 12, or None."""
    if param == "None":
        return None
    try:
        return int(param)
    except ValueError:
        return param


def _group(points, values: list[str], pairing: list[tuple], cfg: CompareConfig) -> tuple[dict, dict]:
    """({arm: its points}, {arm: its runs' pairing keys (multiplier_paired.run_keys)})."""
    import numpy as np

    from ablate.scaling import run_keys

    order = list(dict.fromkeys(values))
    wanted = cfg.arms or order
    missing = [a for a in [*wanted, cfg.baseline] if a not in order]
    if missing:
        raise ConfigError(f"{cfg.arm}={missing[0]} has no finished runs (valid: {', '.join(order)})")
    arr = np.asarray(values, dtype=object)
    names = [cfg.baseline, *[a for a in wanted if a != cfg.baseline]]
    groups, keys = {}, {}
    for a in names:
        idx = np.flatnonzero(arr == a)
        groups[a] = points.subset(idx)
        keys[a] = run_keys(
            groups[a], [pairing[i][0] for i in idx], [pairing[i][1] for i in idx], [pairing[i][2] for i in idx]
        )
    return groups, keys


def offset_line(c) -> str | None:
    """What the runs say run against run, when the arms were paired: the mean log-loss offset over
    model instances with its Student's t interval (scaling/multiplier_paired.py), what it amounts to
    when the interval excludes 0, and on how many of the pairs the arm's loss was lower."""
    f = c.paired
    if f is None or f.offset.ci95 is None:
        return None
    lo, hi = f.offset.ci95
    d = f.runs.d
    counts = f"lower in {int((d < 0).sum())} of {len(d)} paired runs"
    offset = f"log loss {f.offset.value:+.2g} (95% {lo:+.2g} to {hi:+.2g})"
    if lo > 0 or hi < 0:
        change = math.expm1(f.offset.value)
        said = f"{abs(change):.1%} {'lower' if change < 0 else 'higher'} loss"
    else:
        said = "no difference resolved (the interval holds 0)"
    return f"{c.arm} vs {c.baseline}, run against run: {offset}: {said}; {counts}"


def console_text(report, multipliers: str) -> str:
    """The headline first: each paired arm's offset where the runs resolve it; then the compute
    multipliers across scale, which keep their own verdicts (not_determined where the laws cannot
    carry the offset across scales)."""
    offsets = [line for line in (offset_line(c) for c in report.comparisons) if line]
    if not offsets:
        return multipliers
    return "\n".join([*offsets, "compute multipliers, across scale:", multipliers])


def task(cfg) -> dict:
    from omegaconf import OmegaConf

    from ablate.scaling import compare_arms, export_multiplier, multiplier_export

    with one_line():
        cc = parse_compare(OmegaConf.to_container(cfg, resolve=True))
        claim_output(cc.out_dir, "out")
        read = arms_from_experiment if cc.experiment else arms_from_csv
        (groups, keys), key, floor, experiment_id, source = read(cc)
        report = compare_arms(
            groups,
            cc.baseline,
            keys=keys,
            key=key,
            target_C=cc.target,
            n_boot=cc.n_boot,
            seed=cc.seed,
            entropy_floor=floor,
            shared=cc.shared,
            progress=StageBar("compare", "step"),
        )
        files = export_multiplier(report, cc.out_dir)
    print(source, file=sys.stderr)
    print(console_text(report, multiplier_export.summary_text(report)))
    print(f"wrote {', '.join(str(f) for f in files)}")
    if experiment_id is not None:
        from ablate.scaling import log_fit_run

        params = {
            "experiment": cc.experiment,
            "arm": key,
            "baseline": cc.baseline,
            "n_boot": cc.n_boot,
            "seed": cc.seed,
            "entropy_floor": report.entropy_floor,
        }
        metrics = {
            f"multiplier/{c.arm}/{i}": a.multiplier.value
            for c in report.comparisons
            for i, a in enumerate(c.scales)
            if a.shown is not None and a.multiplier.value < float("inf")
        }
        run_id = log_fit_run(
            cc.tracking.uri,
            experiment_id,
            files,
            {**params, "target": cc.target},
            metrics,
            True,
            "",
            report.verdict.level,
            kind="compare",
        )
        print(f"MLflow: run {run_id} (tag ablate.kind=compare, ablate.fit_verdict={report.verdict.level})")
    return {"out": str(cc.out_dir), "verdict": report.verdict.level}


def main(argv: list[str] | None = None) -> None:
    hydra_main(task, config_name="compare", argv=argv)


if __name__ == "__main__":
    main()
