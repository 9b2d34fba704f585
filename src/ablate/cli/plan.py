"""`ablate plan`: price a big run before renting it (a Hydra app over conf/plan.yaml).

    ablate plan model=gpt_1p5b precision=bf16_pure hardware=h200 budget.tokens=1e11 \\
        [budget.flops=... | budget.hours=... | budget.dollars=...] [gpus=8] [data.tokens_available=...] \\
        [fit=exports/NAME/fit.json] [out=DIR]

Prints a table and writes DIR/plan.json, DIR/plan.md and DIR/config.yaml (default DIR:
plans/<model>-<hardware>/). The work is in plan/.
"""

from __future__ import annotations

from ablate.cli.common import claim_output, hydra_main
from ablate.config import parse_plan, preset_folders
from ablate.oneline import one_line
from ablate.plan import choose_mfu, make_plan, planning_hardware, render
from ablate.scaling import load_fit

SUMMARY = "Price a big run before renting it: FLOPs, memory per GPU, hours, cost, predicted loss, and what binds."
EXAMPLE = "ablate plan model=gpt_1p5b precision=bf16_pure hardware=h200 budget.tokens=1e11"


def task(cfg) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    with one_line():
        inputs = parse_plan(OmegaConf.to_container(cfg, resolve=True), preset_folders(HydraConfig.get()))
        claim_output(inputs.plan.out, "out")
        hw = planning_hardware(inputs.hardware, inputs.precision)
        fit = load_fit(inputs.plan.fit) if inputs.plan.fit else None
        mfu = choose_mfu(inputs.plan, hw.name, hw.device, inputs.precision.name)
        plan = make_plan(inputs, hw, mfu, fit)
        paths = render.write_plan(plan, inputs.plan.out, OmegaConf.to_yaml(cfg, resolve=True), fit)
    print(render.render_table(plan))
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return render.plan_dict(plan)


def main(argv: list[str] | None = None) -> None:
    hydra_main(task, config_name="plan", name="plan", summary=SUMMARY, example=EXAMPLE, argv=argv)


if __name__ == "__main__":
    main()
