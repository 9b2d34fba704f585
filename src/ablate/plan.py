"""`python -m ablate.plan`: price a big run before renting it (a Hydra app over conf/plan.yaml).

    python -m ablate.plan model=gpt_1p5b precision=bf16_pure hardware=h200 budget.tokens=1e11 \\
        [budget.flops=... | budget.hours=... | budget.dollars=...] [gpus=8] [data.tokens_available=...] \\
        [fit=exports/NAME/fit.json] [out=DIR]

Prints a table and writes DIR/plan.json, DIR/plan.md and DIR/config.yaml (default DIR:
plans/<model>-<hardware>/). The work is in planner.py and memory.py.
"""

from __future__ import annotations

from ablate.cli import fail, hydra_main


def task(cfg) -> dict:
    from omegaconf import OmegaConf

    from ablate import planner
    from ablate.config import ConfigError

    try:
        inputs = planner.parse_plan(OmegaConf.to_container(cfg, resolve=True))
        hw = planner.planning_hardware(inputs.hardware, inputs.precision)
        fit = planner.load_fit(inputs.plan.fit) if inputs.plan.fit else None
        mfu = planner.choose_mfu(inputs.plan, hw.name, hw.device, inputs.precision.name)
        plan = planner.make_plan(inputs, hw, mfu, fit)
    except ConfigError as exc:
        fail(str(exc))
    paths = planner.write_plan(plan, inputs.plan.out, OmegaConf.to_yaml(cfg, resolve=True))
    print(planner.render_table(plan))
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return planner.plan_dict(plan)


def main() -> None:
    hydra_main(task, config_name="plan")


if __name__ == "__main__":
    main()
