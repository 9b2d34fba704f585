"""Scaling-law fits: Kaplan-style single-variable laws and Chinchilla approaches 1, 2 and 3.

numpy/scipy, no torch; every result is a typed, frozen dataclass and nothing prints. One concept a file,
each building only on those above it:

    points.py      the data a fit reads: Points (final losses, the data's entropy floor, training
                   seconds), RunCurve (a run's loss-vs-FLOPs history), the CSV and Chinchilla
                   loaders, FitInputError and the input checks
    fitting/       the machinery every law shares: the Huber-on-log-loss objective and its BFGS
                   (optimizer.py), best of many starts (multistart.py), the bootstrap and its
                   Estimate (bootstrap.py)
    laws/          the laws: approach 3 (chinchilla.py) and the joint form (joint.py), the
                   single-variable laws (single.py), the frontier (frontier.py), approaches 1 and 2
    verdict.py     Verdict and Reason: trusted, wide or not_determined, and why (the typed API)
    checks.py      the checks behind each verdict and their Thresholds; the run-to-run noise
    calibration.py intervals that cover: the law's error calibrated by leaving out the largest runs
    predict.py     Predictor (approach 3 fitted, checked, calibrated: fit_predictor); a prediction at
                   a target (N, D) or budget C and the frontier, each with its verdict, and the runs
                   that would determine what is not determined
    backtest.py    fit below cut points in compute, predict above: coverage by distance; held_out
    validation.py  fitted E beside a known entropy floor
    offlaw.py      approach 3 refitted without the runs furthest off the law, as a suggestion
    otherform.py   approach 3 in its other form, as a suggestion when the runs break the law
    analysis.py    fit_all: every method the data allow, with verdicts, as one FitReport
    multiplier_paired.py  paired compute multipliers: arms compared run against run
    multiplier.py  compare: each arm's compute multiplier against a baseline, at each scale
    runs.py        read_experiment: an MLflow experiment's runs as points and curves; log_fit_run
    reports/       fit.md and the terminal summary (report.py), the PNGs (plots.py), export_fit
                   (export.py), load_fit (fitfile.py: an exported fit.json read back as the same
                   Predictor, for the planner), a comparison's files (multiplier_export.py)

References
- Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (L(N), L(D), L(C) power laws).
- Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (Chinchilla): approach 1
  (envelope of training curves), approach 2 (iso-FLOP parabolas), approach 3 (parametric
  L(N, D) = E + A/N^alpha + B/D^beta fitted by Huber loss on log L, their eq. (2) and appendix D.2).
- Besiroglu et al. 2024 (Epoch AI), "Chinchilla Scaling: A replication attempt" (the 240 points,
  the bootstrap, the reference values reproduced by the tests).
- Muennighoff et al. 2023, "Scaling Data-Constrained Language Models" (a fit with alpha = beta).

Conventions: N parameters, D training tokens, C training FLOPs (6ND unless given), L loss in nats.
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "points": ("CSV_OPTIONAL", "CSV_REQUIRED", "FitInputError", "Points", "RunCurve", "load_points_csv"),
        "fitting.bootstrap": ("Estimate",),
        "laws.chinchilla": ("e_bounds",),
        "verdict": ("Reason", "Verdict"),
        "checks": ("Thresholds", "design_reasons"),
        "predict": ("FitOptions", "Prediction", "Predictor", "SuggestedRun", "TOKENS_PER_PARAM_RULE"),
        "backtest": ("Backtest",),
        "analysis": ("APPROACH3", "FitReport", "fit_all"),
        "multiplier_paired": ("mean_interval", "run_keys"),
        "multiplier": ("MultiplierReport", "compare_arms"),
        "runs": ("log_fit_run", "read_experiment"),
        "reports.report": ("backtest_markdown",),
        "reports.export": ("export_fit",),
        "reports.fitfile": ("FitLaw", "load_fit"),
        "reports.multiplier_export": ("export_multiplier",),
        "reports.backtest_plot": ("render_backtest",),
        "reports.prediction_plot": ("render_prediction",),
    },
    modules=("predict", "backtest", "runs", "reports.report", "reports.multiplier_export"),
)
