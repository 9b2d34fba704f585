"""`ablate backtest`: how often a fit's printed 95% interval holds the truth when it extrapolates (a Hydra
app over ablate/conf/backtest.yaml).

    ablate backtest points=FILE.csv [cuts=[0.25,0.375,0.5,0.625,0.75]] [n_boot=200] [out=DIR]
    ablate backtest experiment=NAME [tracking.uri=sqlite:////abs/mlflow.db]
        [entropy_floor=...] [params=total|non_embedding] [tie_exponents=false] [form=additive|joint] [noise=...]

For each cut point (a fraction of the runs' log-compute span) the whole fit -- approach 3, its
bootstrap, its verdict and the calibration of its intervals -- sees only the runs below the cut and
predicts every run above it. Prints the table by distance past the largest fitted run (decades of
compute): held-out runs, how many fell inside their interval, the median error and interval width,
the verdicts; writes DIR/backtest.json, DIR/backtest.md and DIR/backtest.png (each held-out run's
prediction and interval against the loss it reached, by distance, and the coverage by distance;
scaling/reports/backtest_plot.py) (default DIR: exports/NAME/backtest).
The work is in scaling/backtest.py, the schema in config/fit.py; the points are read as `ablate fit`
reads them (cli/fit.py).
"""

from __future__ import annotations

import json
import sys
import time

from ablate.cli.common import claim_output, hydra_main
from ablate.cli.fit import StageBar, load_inputs
from ablate.config import parse_backtest
from ablate.files import write_files
from ablate.oneline import one_line

SUMMARY = "How often a fit's printed 95% interval holds runs past the data it saw: fit below a cut, predict above."
EXAMPLE = "ablate backtest points=tests/fixtures/chinchilla.csv"


def task(cfg) -> dict:
    from omegaconf import OmegaConf

    from ablate.scaling import FitOptions, backtest, backtest_markdown, render_backtest

    with one_line():
        bc = parse_backtest(OmegaConf.to_container(cfg, resolve=True))
        claim_output(bc.out_dir, "out")  # before minutes of fitting, not after
        inputs = load_inputs(bc)
        started = time.perf_counter()
        cuts = tuple(float(c) for c in bc.cuts)
        options = FitOptions.from_config(bc)
        result = backtest.backtest(inputs.points, options, cuts, progress=StageBar("backtest", "cut"))
        title = f"Backtest of {bc.experiment or bc.points}: {len(inputs.points)} runs, cuts {bc.cuts}"
        md = backtest_markdown(result, title)
        doc = {"source": inputs.source, "cuts": bc.cuts, "n_boot": bc.n_boot, **result.to_dict()}
        files = write_files(
            {
                bc.out_dir / "backtest.json": (json.dumps(doc, indent=2) + "\n").encode(),
                bc.out_dir / "backtest.md": md.encode(),
                bc.out_dir / "backtest.png": render_backtest(result),
            }
        )
    print(inputs.source, file=sys.stderr)
    print(md)
    print(f"backtest took {time.perf_counter() - started:.0f} s; wrote {', '.join(str(f) for f in files)}")
    return {"out": str(bc.out_dir), "coverage": result.coverage, "printed_coverage": result.printed_coverage}


def main(argv: list[str] | None = None) -> None:
    hydra_main(task, config_name="backtest", name="backtest", summary=SUMMARY, example=EXAMPLE, argv=argv)


if __name__ == "__main__":
    main()
