"""Scaling-law fits: Kaplan-style single-variable laws and Chinchilla approaches 1, 2 and 3.

numpy/scipy, no torch; every result is a typed, frozen dataclass and nothing prints. One concept a file,
each building only on those above it:

    points.py      the data a fit reads: Points (final losses, the data's entropy floor, training
                   seconds), RunCurve (a run's loss-vs-FLOPs history), the CSV and Chinchilla
                   loaders, FitInputError and the input checks
    optimizer.py   the Huber-on-log-loss objective (LseHuber) with the known bounds (E between the
                   floor and the lowest loss, exponents > 0, alpha optionally = beta) and a BFGS
                   that runs many starts at once
    multistart.py  Hoffmann's start grid, best-of-many-starts, tolerances and whether it converged
    bootstrap.py   Estimate (value and 95% interval), resampling, warm-started bootstrap refits
    chinchilla.py  approach 3: L(N, D) = E + A/N^alpha + B/D^beta
    single.py      L(x) = E + A/x^alpha for x = N, non-embedding N, D, or C over the compute envelope
    frontier.py    the frontier table, the bootstrap laws' losses and optima, and the power laws
                   that approaches 1 and 2 fit to their optima
    approach1.py   approach 1: the lower envelope of training curves
    approach2.py   approach 2 on an iso-FLOP design only: a parabola near each budget's minimum
    verdict.py     Verdict and Reason: trusted, wide or not_determined, and why (the typed API)
    checks.py      the checks behind each verdict and their Thresholds; the run-to-run noise
    calibration.py intervals that cover: the law's error calibrated by leaving out the largest runs
    predict.py     Predictor (approach 3 fitted, checked, calibrated: fit_predictor); a prediction at
                   a target (N, D) or budget C and the frontier, each with its verdict, and the runs
                   that would determine what is not determined
    backtest.py    fit below cut points in compute, predict above: coverage by distance; held_out
    validation.py  fitted E beside a known entropy floor
    analysis.py    fit_all: every method the data allow, with verdicts, as one FitReport
    report.py      fit.md and the terminal summary (what is printed follows the verdicts)
    plots.py       the PNGs: data, bands, floor, target, held-out runs, the clipped frontier band
    export.py      export_fit: fit.json, fit.md, predictions.csv and plots
    fitfile.py     load_fit: an exported fit.json read back as the same Predictor (for the planner)
    runs.py        read_experiment: an MLflow experiment's runs as points and curves; log_fit_run

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
