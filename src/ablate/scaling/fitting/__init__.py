"""The fitting machinery every law shares (Hoffmann et al. 2022, eq. 3-4 and appendix D.2):

optimizer.py   the Huber-on-log-loss objective (LseHuber) with the known bounds (E between the
               floor and the lowest loss, exponents > 0, alpha optionally = beta) and a BFGS
               that runs many starts at once
multistart.py  Hoffmann's start grid, best-of-many-starts, tolerances and whether it converged
bootstrap.py   Estimate (value and 95% interval), resampling, warm-started bootstrap refits
"""
