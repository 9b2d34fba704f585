"""Scaling-law fits: Kaplan-style single-variable laws and Chinchilla approaches 1, 2 and 3.

Pure numpy/scipy; every result is a typed, frozen dataclass and nothing prints. One concept a file,
each building only on those above it:

    points.py      the data a fit reads: Points (final losses), RunCurve (a run's loss-vs-FLOPs
                   history), the CSV and Chinchilla loaders, FitInputError and the input checks
    optimizer.py   the Huber-on-log-loss objective (LseHuber) and a BFGS that runs many starts at once
    multistart.py  Hoffmann's start grid, best-of-many-starts, tolerances and the convergence verdict
    bootstrap.py   Estimate (value and 95% interval), resampling, warm-started bootstrap refits
    chinchilla.py  approach 3: L(N, D) = E + A/N^alpha + B/D^beta
    single.py      L(x) = E + A/x^alpha for x = N, non-embedding N, D, or C over the compute envelope
    frontier.py    the compute-optimal frontier N_opt(C), D_opt(C): from approach 3, and the power
                   laws that approaches 1 and 2 fit to their optima
    approach1.py   approach 1: the lower envelope of training curves
    approach2.py   approach 2: a parabola per iso-FLOP budget
    predict.py     loss at a target (N, D) or budget C, with the extrapolation warning
    validation.py  held-out largest-compute points; fitted E beside a known entropy floor
    report.py      fit_all: every method the data allow, as one FitReport

References
- Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (L(N), L(D), L(C) power laws).
- Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (Chinchilla): approach 1
  (envelope of training curves), approach 2 (iso-FLOP parabolas), approach 3 (parametric
  L(N, D) = E + A/N^alpha + B/D^beta fitted by Huber loss on log L, their eq. (2) and appendix D.2).
- Besiroglu et al. 2024 (Epoch AI), "Chinchilla Scaling: A replication attempt" (the 240 points,
  the bootstrap, the reference values reproduced by the tests).

Conventions: N parameters, D training tokens, C training FLOPs (6ND unless given), L loss in nats.
"""
