"""Forecasting metrics: MASE, sMAPE, the weighted quantile loss that GluonTS reports as CRPS, and the scoring of
sample paths that `hf-seq train`, `hf-seq evaluate` and the lineage share. The benchmark forecasts they are measured
against (naive, seasonal naive, AR(p)) are in `hf_seq.baselines.forecasting`, the embedded CO2 series in
`hf_seq.data.series`.

Conventions, shared by every function here:

- A series is a 1-D array of floats in time order; NaN marks a missing value. Many series of one length are a 2-D
  array `(batch, time)`. Torch tensors are accepted wherever arrays are (they are read as float64 numpy arrays).
- A forecast window has shape `(horizon,)` or `(batch, horizon)`; sample paths put the samples before the time axis,
  `(num_samples, horizon)` or `(batch, num_samples, horizon)`, the layout of transformers' `generate()` for time
  series and of GluonTS's SampleForecast.
- A missing actual value is skipped by every metric: it adds neither to a numerator nor to a count or a scale. A
  missing forecast value where the actual is observed is not skipped: it makes the metric NaN, so a model that
  produced NaN shows in the table instead of disappearing from it.
- A ratio whose denominator (a scale) is 0 is `inf` when its numerator is positive and 0 when the numerator is 0
  too (a perfect forecast of a constant series): one constant series does not abort the evaluation of the others.
- Bad arguments raise `InvalidValueError` (a `ValueError`) naming the parameter, the value and what is allowed.

Sources: Hyndman and Koehler (2006), "Another look at measures of forecast accuracy" (MASE); Makridakis, Spiliotis
and Assimakopoulos (2020), "The M4 Competition" (sMAPE, and MASE averaged over series); Gneiting and Raftery (2007)
and GluonTS's `Evaluator` (the quantile loss and its weighted mean as an approximation of CRPS); Hyndman and
Athanasopoulos, "Forecasting: Principles and Practice", 3rd ed. (FPP3), sections 5.2 and 5.5 (the benchmark methods
and their prediction intervals) and 9.3 (auto-regressive models).
"""

import math
from collections.abc import Sequence

import numpy as np

from hf_seq.errors import InvalidValueError

DEFAULT_QUANTILES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

__all__ = [
    "DEFAULT_QUANTILES",
    "crps_from_samples",
    "gaussian_nll_from_samples",
    "interval_from_samples",
    "mase",
    "quantile_loss",
    "score_samples",
    "smape",
    "weighted_quantile_loss",
]


# ------------------------------------------------------------------------------------------------ argument checks
def _float_array(values, name: str) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor, possibly on an accelerator or requiring grad
        values = values.detach().cpu().double().numpy()  # double(): numpy has no bfloat16
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise InvalidValueError(
            f"{name} must be numbers (NaN for a missing value), got {type(values).__name__} that is not: {error}"
        ) from error


def _positive_int(value, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidValueError(f"{where}: {name} must be a positive integer, got {value!r}.")
    return int(value)


def _history(history, where: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """`history` as `(batch, time)` and the leading shape to give results back in (`()` for one series)."""
    array = _float_array(history, "history")
    if array.ndim not in (1, 2) or array.shape[-1] == 0:
        raise InvalidValueError(
            f"{where}: history must be one series (time,) or many (batch, time) with at least one point, "
            f"got shape {array.shape}."
        )
    observed = ~np.isnan(array.reshape(-1, array.shape[-1]))
    if not observed.any(axis=1).all():
        row = int(np.flatnonzero(~observed.any(axis=1))[0])
        which = "history" if array.ndim == 1 else f"history[{row}]"
        raise InvalidValueError(f"{where}: {which} has no observed value (all {array.shape[-1]} are NaN).")
    return array.reshape(-1, array.shape[-1]), array.shape[:-1]


def _series_list(series, where: str, name: str = "series") -> list[np.ndarray]:
    """One series `(time,)`, many of one length `(batch, time)`, or a sequence of 1-D series of any lengths."""
    if isinstance(series, Sequence) and len(series) and np.ndim(series[0]) == 1:
        return [_float_array(s, name).reshape(-1) for s in series]
    array = _float_array(series, name)
    if array.ndim not in (1, 2):
        raise InvalidValueError(
            f"{where}: {name} must be (time,), (batch, time) or a list of 1-D series, got shape {array.shape}."
        )
    return [array] if array.ndim == 1 else list(array)


def _levels(quantiles, where: str) -> np.ndarray:
    levels = _float_array(quantiles, "quantiles").reshape(-1)
    if levels.size == 0 or not np.all((levels > 0) & (levels < 1)):
        raise InvalidValueError(
            f"{where}: quantiles must be levels strictly between 0 and 1, got {tuple(levels.tolist())}."
        )
    return levels


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, with x / 0 = inf for x > 0 and 0 / 0 = 0 (see the module's conventions)."""
    numerator, denominator = np.asarray(numerator, np.float64), np.asarray(denominator, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = numerator / denominator
    return np.where((denominator == 0) & (numerator == 0), 0.0, ratio)


# ------------------------------------------------------------------------------------------------ metrics
def _forecast_and_actual(forecast, actual, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Both as `(batch, horizon)`; a NaN actual is missing and is skipped by the caller."""
    forecast, actual = _float_array(forecast, "forecast"), _float_array(actual, "actual")
    if forecast.shape != actual.shape or actual.ndim not in (1, 2) or actual.shape[-1] == 0:
        raise InvalidValueError(
            f"{where}: forecast and actual must have one shape, (horizon,) or (batch, horizon) with horizon >= 1, "
            f"got {forecast.shape} and {actual.shape}."
        )
    return forecast.reshape(-1, actual.shape[-1]), actual.reshape(-1, actual.shape[-1])


def _mean_over_series(per_series: np.ndarray, observed_counts: np.ndarray, where: str, per_series_out: bool):
    if not observed_counts.any():
        raise InvalidValueError(f"{where}: actual has no observed value (all are NaN); there is nothing to score.")
    if per_series_out:
        return per_series
    return float(per_series[observed_counts > 0].mean())


def _observed_mean(values: np.ndarray, observed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean of `values` over the observed entries of each row (NaN for a row without any), and their counts."""
    counts = observed.sum(axis=1)
    sums = np.where(observed, values, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), counts


def _seasonal_scale(series: np.ndarray, season: int, name: str) -> float:
    lag = season if series.size > season else 1
    if series.size < 2:
        raise InvalidValueError(
            f"mase: {name} has {series.size} point(s); the in-sample scale needs at least 2 (season={season}, "
            f"falling back to lag 1 when the series has at most season points)."
        )
    differences = np.abs(series[lag:] - series[:-lag])
    differences = differences[~np.isnan(differences)]
    if differences.size == 0:
        raise InvalidValueError(
            f"mase: {name} has no two observed values {lag} step(s) apart, so its seasonal-naive scale is undefined."
        )
    return float(differences.mean())


def mase(forecast, actual, insample, season: int, *, per_series: bool = False) -> float | np.ndarray:
    """Mean absolute scaled error (Hyndman and Koehler 2006), averaged over series as in the M4 competition.

    For one series with in-sample values y_1..y_n, forecasts F_t and actual values A_t over the horizon:

        MASE = mean_t |A_t - F_t|  /  ( 1/(n-m) * sum_{t=m+1..n} |y_t - y_{t-m}| )

    The denominator is the in-sample mean absolute error of the seasonal-naive forecast with lag m = `season`
    (m = 1: the naive forecast): MASE < 1 means smaller errors than that benchmark made in sample. When the in-sample series has at most
    `season` points there is no seasonal difference and m falls back to 1. Missing values: a NaN actual is skipped
    in the mean, a difference y_t - y_{t-m} with a NaN in it is skipped in the scale. A scale of 0 (a constant
    in-sample series) gives inf, or 0 when the forecast is exact too.

    forecast, actual: `(horizon,)` for one series or `(batch, horizon)` for many. insample: the series before the
    forecast window, `(time,)` for one series, `(batch, time)` or a sequence of `batch` 1-D arrays (lengths may
    differ). Returns the mean of the per-series MASE over the series that have an observed actual value, or with
    `per_series=True` the array of per-series values (NaN for a series whose actual window is all missing).
    """
    season = _positive_int(season, "season", "mase")
    forecast, actual = _forecast_and_actual(forecast, actual, "mase")
    series = _series_list(insample, "mase", name="insample")
    if len(series) != len(actual):
        raise InvalidValueError(f"mase: insample holds {len(series)} series, forecast and actual {len(actual)}.")
    observed = ~np.isnan(actual)
    errors, counts = _observed_mean(np.abs(forecast - actual), observed)
    names = ["insample"] if len(series) == 1 else [f"insample[{i}]" for i in range(len(series))]
    scales = np.array([_seasonal_scale(s, season, name) for s, name in zip(series, names)])
    values = np.where(counts > 0, _ratio(errors, scales), np.nan)
    return _mean_over_series(values, counts, "mase", per_series)


def smape(forecast, actual, *, per_series: bool = False) -> float | np.ndarray:
    """Symmetric mean absolute percentage error as defined for the M4 competition (Makridakis et al. 2020), in %:

        sMAPE = 200/h * sum_t |A_t - F_t| / (|A_t| + |F_t|)

    A term with A_t = F_t = 0 counts as 0 (an exact forecast), a NaN actual is skipped. It lies in [0, 200].
    forecast, actual: `(horizon,)` or `(batch, horizon)`. Returns the mean of the per-series sMAPE over the series
    with an observed actual value, or with `per_series=True` the per-series values (NaN where all are missing).
    """
    forecast, actual = _forecast_and_actual(forecast, actual, "smape")
    terms = 200.0 * _ratio(np.abs(actual - forecast), np.abs(actual) + np.abs(forecast))
    values, counts = _observed_mean(terms, ~np.isnan(actual))
    return _mean_over_series(values, counts, "smape", per_series)


def quantile_loss(forecast, actual, quantile: float) -> float:
    """The quantile (pinball) loss of a q-quantile forecast, summed over the observed points, as GluonTS defines it:

        QL_q = 2 * sum_t | (A_t - F_t) * (1{A_t <= F_t} - q) |

    that is 2q(A - F) where the forecast is below the actual value and 2(1-q)(F - A) where it is above; for q = 0.5
    it is the absolute error. The factor 2 makes the mean over q in (0, 1) equal CRPS (Gneiting and Raftery 2007:
    CRPS(F, a) = 2 * integral_0^1 QL_q dq for one point). Any equal shapes; NaN actual values are skipped.
    """
    levels = _levels([quantile], "quantile_loss")
    forecast, actual = _float_array(forecast, "forecast"), _float_array(actual, "actual")
    if forecast.shape != actual.shape:
        raise InvalidValueError(
            f"quantile_loss: forecast and actual must have one shape, got {forecast.shape} and {actual.shape}."
        )
    observed = ~np.isnan(actual)
    below = (actual <= forecast).astype(np.float64)
    terms = np.abs((actual - forecast) * (below - levels[0]))
    return float(2.0 * np.where(observed, terms, 0.0).sum())


def weighted_quantile_loss(quantile_forecasts, actual, quantiles=DEFAULT_QUANTILES) -> float:
    """The mean weighted quantile loss over the levels, GluonTS's `mean_wQuantileLoss`:

        wQL_q = QL_q / sum_t |A_t|          (QL_q: `quantile_loss`, summed over every series and time step)
        mean wQL = 1/|Q| * sum_{q in Q} wQL_q

    Sums run over all series of a batch together (GluonTS aggregates the whole test set this way), skipping NaN
    actual values. With the deciles as Q this is the usual approximation of CRPS scaled by sum |A| (the "CRPS" of
    GluonTS's and the Monash archive's tables). A zero sum |A_t| gives inf, or 0 for exact quantiles.

    quantile_forecasts: `(len(quantiles), horizon)` for one series or `(batch, len(quantiles), horizon)`, the
    quantile axis just before time (where the samples are in `crps_from_samples`). actual: `(horizon,)` or
    `(batch, horizon)`.
    """
    levels = _levels(quantiles, "weighted_quantile_loss")
    forecasts, actual = _float_array(quantile_forecasts, "quantile_forecasts"), _float_array(actual, "actual")
    expected = actual.shape[:-1] + (levels.size,) + actual.shape[-1:]
    if actual.ndim not in (1, 2) or actual.shape[-1] == 0 or forecasts.shape != expected:
        raise InvalidValueError(
            f"weighted_quantile_loss: quantile_forecasts must have shape {expected} for actual of shape "
            f"{actual.shape} and {levels.size} quantiles, got {forecasts.shape}."
        )
    observed = ~np.isnan(actual)
    if not observed.any():
        raise InvalidValueError(
            "weighted_quantile_loss: actual has no observed value (all are NaN); there is nothing to score."
        )
    scale = np.where(observed, np.abs(actual), 0.0).sum()
    losses = [quantile_loss(forecasts[..., i, :], actual, q) for i, q in enumerate(levels)]
    return float(np.mean(_ratio(np.array(losses), scale)))


def _samples(samples, actual, where: str) -> tuple[np.ndarray, np.ndarray]:
    samples, actual = _float_array(samples, "samples"), _float_array(actual, "actual")
    if (
        samples.ndim != actual.ndim + 1
        or actual.ndim not in (1, 2)
        or samples.shape[-1] != actual.shape[-1]
        or (samples.shape[:-2] != actual.shape[:-1])
        or samples.shape[-2] == 0
    ):
        raise InvalidValueError(
            f"{where}: samples must be (num_samples, horizon) for actual (horizon,), or (batch, num_samples, "
            f"horizon) for actual (batch, horizon), with num_samples >= 1; got {samples.shape} and {actual.shape}."
        )
    return samples, actual


def crps_from_samples(samples, actual, quantiles=DEFAULT_QUANTILES) -> float:
    """CRPS estimated from sample paths, as GluonTS and the Monash archive report it: the mean weighted quantile
    loss (`weighted_quantile_loss`) of the empirical quantiles of the samples at the levels `quantiles` (the
    deciles 0.1..0.9 by default):

        F_{q,t} = the q-quantile of the samples at time t (np.quantile, linear interpolation)
        CRPS ~= 1/|Q| * sum_q  2 * sum_t |(A_t - F_{q,t}) (1{A_t <= F_{q,t}} - q)|  /  sum_t |A_t|

    It is 0 when every sample equals the actual value and grows with the spread and the bias of the samples.
    samples: `(num_samples, horizon)` with actual `(horizon,)`, or `(batch, num_samples, horizon)` with actual
    `(batch, horizon)` (the layout of `generate()`'s sequences). NaN actual values are skipped.
    """
    levels = _levels(quantiles, "crps_from_samples")
    samples, actual = _samples(samples, actual, "crps_from_samples")
    forecasts = np.moveaxis(np.quantile(samples, levels, axis=-2), 0, -2)  # (..., Q, horizon)
    return weighted_quantile_loss(forecasts, actual, levels)


def score_samples(samples, actual, insample, season: int) -> dict:
    """The figures every forecaster of hf-seq is compared on, from its sample paths (the networks' `generate()`, the
    benchmarks' `naive_samples`, `AutoRegressive.sample`): `mase` and `smape` of the paths' median (the point
    forecast) and `crps` (`crps_from_samples`). samples `(batch, num_samples, horizon)`, actual `(batch, horizon)`,
    insample: each series before its window (MASE's scale, lag `season`). `hf-seq train`, `hf-seq evaluate` and the
    forecasting lineage all score through this function."""
    samples = _float_array(samples, "samples")
    median = np.median(samples, axis=-2)
    return {
        "mase": mase(median, actual, insample, season),
        "smape": smape(median, actual),
        "crps": crps_from_samples(samples, actual),
    }


def gaussian_nll_from_samples(samples, actual) -> float:
    """The mean negative log-likelihood per observed value (nats) of a normal distribution with the samples' mean and
    standard deviation at each step: the classical benchmarks' predictive distributions are normal (FPP3 5.5, 9.3),
    so this is their NLL up to the sampling error of the two moments. samples `(batch, num_samples, horizon)`,
    actual `(batch, horizon)`; NaN actual values are skipped."""
    samples, actual = _samples(samples, actual, "gaussian_nll_from_samples")
    mean, std = samples.mean(axis=-2), np.maximum(samples.std(axis=-2), 1e-9)
    observed = ~np.isnan(actual)
    z = (actual[observed] - mean[observed]) / std[observed]
    return float(np.mean(0.5 * z * z + np.log(std[observed]) + 0.5 * math.log(2 * math.pi)))


def interval_from_samples(samples, level: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
    """The central prediction interval that covers `level` of the samples at each step: the (1 - level)/2 and
    (1 + level)/2 empirical quantiles (np.quantile) over the sample axis, e.g. the 10% and 90% quantiles for the 80%
    interval. samples: `(num_samples, horizon)` or `(batch, num_samples, horizon)`; returns (lower, upper), each
    `(horizon,)` or `(batch, horizon)`."""
    if not 0 < level < 1:
        raise InvalidValueError(f"interval_from_samples: level must be strictly between 0 and 1, got {level!r}.")
    samples = _float_array(samples, "samples")
    if samples.ndim not in (2, 3) or samples.shape[-2] == 0:
        raise InvalidValueError(
            f"interval_from_samples: samples must be (num_samples, horizon) or (batch, num_samples, horizon), "
            f"got shape {samples.shape}."
        )
    lower, upper = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2], axis=-2)
    return lower, upper
