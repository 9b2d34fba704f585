"""A fit and a comparison as files and text, and an exported fit read back:

report.py             fit.md and the terminal summary (what is printed follows the verdicts)
plots.py              the PNGs: data, bands, floor, target, held-out runs, the clipped frontier band
export.py             export_fit: fit.json, fit.md, predictions.csv and plots
fitfile.py            load_fit: an exported fit.json read back as the same Predictor (for the planner)
multiplier_export.py  a comparison's multiplier.json, multiplier.md and multiplier.png
backtest_plot.py      backtest.png: each held-out run's prediction and interval by distance, coverage by band
prediction_plot.py    prediction.png: `ablate predict`'s target on the law with its interval and verdict
"""
