"""Reading an exported fit (scaling/reports/export.py writes fit.json) back as what the planner predicts with:
approach 3's parameters and 95% intervals, and the same Predictor that fit_all built (predict.py) --
bootstrap laws, calibration, the data's range and floor, the law's verdict, the thresholds -- so that
a plan prints the numbers and verdicts the fit would print for the same target."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ablate.config import ConfigError
from ablate.files import check_complete, read_regular
from ablate.scaling.calibration import Calibration
from ablate.scaling.checks import Thresholds
from ablate.scaling.laws.chinchilla import FORMS, Law
from ablate.scaling.predict import Predictor
from ablate.scaling.verdict import WIDE, Reason, Verdict

VALID = "valid: a fit.json written by ablate fit"


@dataclass(frozen=True)
class FitLaw:
    """Approach 3 of an exported fit, in either form (chinchilla.FORMS): point estimates, 95% intervals,
    and the predictor built from it."""

    path: str
    values: dict  # name -> value, in the law's NAMES
    ci95: dict  # name -> (lo, hi) or None
    predictor: Predictor
    tokenizer: dict | None = None  # fit.json's data.tokenizer: the vocabulary its losses are per token of

    def law(self) -> Law:
        return self.predictor.law

    @property
    def form(self) -> str:
        return self.predictor.law.FORM

    @property
    def params(self) -> str:
        """Which parameter count the law's N is: 'total' or 'non_embedding'."""
        return self.predictor.params

    @property
    def data_range(self) -> dict:
        return self.predictor.data


def load_fit(path: str) -> FitLaw:
    """Read `chinchilla_approach3` from a fit.json written by ablate fit; a file that is not one, or
    whose numbers no fit could have written (a negative exponent, a range that is not one), is
    refused in one line naming the field."""
    where = f"fit={path}"
    try:
        return _load_fit(path, where)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{where} is malformed ({type(exc).__name__}: {str(exc)[:80]}) ({VALID})") from None


def _load_fit(path: str, where: str) -> FitLaw:
    check_complete(path, "fit")  # an export stopped between its renames: its files are a mix of two fits
    try:
        doc = json.loads(read_regular(path))
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read: {exc.strerror} ({VALID})") from None
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON: {exc} ({VALID})") from None
    except RecursionError:  # arrays or objects nested past the parser's stack (200,000 deep)
        raise ConfigError(f"{where} is nested deeper than any fit.json ({VALID})") from None
    a3 = doc.get("chinchilla_approach3") if isinstance(doc, dict) else None
    if not isinstance(a3, dict):
        raise ConfigError(f"{where} has no chinchilla_approach3 ({VALID})")
    if a3.get("status") not in (None, "converged") or not a3.get("params"):
        raise ConfigError(
            f"{where}: chinchilla_approach3 is {a3.get('status')!r} with no parameters "
            "(valid: a fit whose approach 3 converged)"
        )
    form = (a3.get("variant") or {}).get("form") or "additive"
    if form not in FORMS:
        raise ConfigError(f"{where}: chinchilla_approach3.variant.form is {form!r} (valid: {', '.join(FORMS)})")
    law_class = FORMS[form]
    values, ci = _params(a3["params"], where, law_class)
    data = doc.get("data") or {}
    data_range = {
        k: (float(data[k]["min"]), float(data[k]["max"])) for k in ("N", "D", "C") if isinstance(data.get(k), dict)
    }
    if len(data_range) != 3:
        raise ConfigError(f"{where}: data.N, data.D and data.C (each min and max) are missing ({VALID})")
    for k, (lo, hi) in data_range.items():
        if not (np.isfinite([lo, hi]).all() and 0 < lo <= hi):
            raise ConfigError(f"{where}: data.{k} has min {lo:g} and max {hi:g} (valid: 0 < min <= max, finite)")
    samples = np.asarray((a3.get("bootstrap") or {}).get("samples") or np.empty((0, 5)), float).reshape(-1, 5)
    floor = data.get("entropy_floor")
    predictor = Predictor(
        law_class(*(values[k] for k in law_class.NAMES)),
        samples[np.isfinite(samples).all(1)],
        _calibration(a3, data),
        data_range,
        _verdict(a3, samples),
        Thresholds.from_dict(a3.get("thresholds")),
        None if floor is None else float(floor),
        (a3.get("variant") or {}).get("params") or data.get("params") or "total",
        data.get("flops_per_second"),
    )
    tokenizer = data.get("tokenizer")
    return FitLaw(path, values, ci, predictor, tokenizer if isinstance(tokenizer, dict) else None)


# The laws' exponents (alpha, beta; alpha_N, alpha_D): at most 7 keeps N^alpha finite in float64 for
# every N a prediction may ask about (up to 1e40: 1e280 < 1.8e308).
EXPONENTS = ("alpha", "beta")
MAX_EXPONENT = 7.0
# Below this an exponent is no power law: 1/alpha (the compute-optimal split's exponents) overflows
# near 1e-300, and N^alpha is 1 to fifteen digits for every N a plan asks about.
MIN_EXPONENT = 1e-3
# A loss in nats per token: at most ln(vocabulary), 12.5 for 262,144 tokens; 50 leaves any tokenizer room.
MAX_E = 50.0
# A and B: a fit's coefficients of N^-alpha and D^-beta, from ~1e2 (Chinchilla) to ~1e5 for
# small exponents; past 1e12 a law predicts losses no run has seen.
MAX_COEFFICIENT = 1e12
# N_c and D_c: the joint law's scales, a parameter count and a token count (Kaplan et al. 2020 fitted
# 8.8e13 and 5.4e13; experiments/text_ladder_long 4.0e14), used in logs (laws/joint.py), so bounded as
# the N and D a prediction may ask about.
MAX_SCALE = 1e40
LIMITS = {"E": MAX_E, "N_c": MAX_SCALE, "D_c": MAX_SCALE}


def _params(params: dict, where: str, law_class) -> tuple[dict, dict]:
    values, ci = {}, {}
    for name in law_class.NAMES:
        entry = params.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), (int, float)):
            raise ConfigError(
                f"{where}: chinchilla_approach3.params.{name} is missing (valid: "
                f'{{"value": v, "ci95": [lo, hi]}} for each of {", ".join(law_class.NAMES)})'
            )
        values[name] = float(entry["value"])
        low = 0.0 if name == "E" else np.nextafter(0.0, 1.0)
        if not (np.isfinite(values[name]) and values[name] >= low):
            bound = ">= 0" if name == "E" else "> 0"
            raise ConfigError(
                f"{where}: chinchilla_approach3.params.{name} is {values[name]:g}, which no fit of "
                f"{law_class.FORMULA} gives (valid: finite and {bound})"
            )
        if name.startswith(EXPONENTS) and values[name] < MIN_EXPONENT:
            raise ConfigError(
                f"{where}: chinchilla_approach3.params.{name} is {values[name]:g}, no power law "
                f"(valid: {MIN_EXPONENT:g} <= {name} <= {MAX_EXPONENT:g}; Chinchilla's exponents are 0.34 and 0.28)"
            )
        limit = LIMITS.get(name, None if name.startswith(EXPONENTS) else MAX_COEFFICIENT)
        if limit is not None and values[name] > limit:
            raise ConfigError(
                f"{where}: chinchilla_approach3.params.{name} is {values[name]:g}, past any loss a fit gives "
                f"(valid: {name} <= {limit:g})"
            )
        if name.startswith(EXPONENTS) and values[name] > MAX_EXPONENT:
            raise ConfigError(
                f"{where}: chinchilla_approach3.params.{name} is {values[name]:g}: N or D to that power overflows "
                f"a float (valid: 0 < {name} <= {MAX_EXPONENT:g}; Chinchilla's exponents are 0.34 and 0.28)"
            )
        interval = entry.get("ci95")
        ci[name] = tuple(float(v) for v in interval) if isinstance(interval, list) and len(interval) == 2 else None
    return values, ci


def _calibration(a3: dict, data: dict) -> Calibration:
    """The file's calibration; a fit.json of an earlier version has none: its intervals get one run's
    scatter (from the fit's RMS residual) and no calibrated reach, so every extrapolation is refused."""
    cal = a3.get("calibration")
    if isinstance(cal, dict) and "run_sigma" in cal:
        return Calibration.from_dict(cal)
    rms = ((a3.get("diagnostics") or {}).get("rms_log_residual")) or 0.0
    return Calibration(float(rms), None, None)


def _verdict(a3: dict, samples: np.ndarray) -> Verdict:
    """The law's verdict as fit.json records it, and what the file itself lacks."""
    law = Verdict.from_dict(a3) if "verdict" in a3 else Verdict.of([])
    missing = []
    if "verdict" not in a3:
        missing.append(Reason("law", WIDE, "fit.json was written by an earlier version: no verdict or calibration"))
    if samples.shape[0] == 0:
        missing.append(
            Reason("bootstrap", WIDE, "fit.json has no bootstrap samples: intervals leave out the fit's uncertainty")
        )
    return Verdict.worst(law, Verdict.of(missing))
