"""The model-free half of forecasting: the metrics (MASE, sMAPE, the weighted quantile loss that GluonTS reports as
CRPS), the benchmark forecasts every model is measured against (naive, seasonal naive, with their prediction
intervals), a linear auto-regressive model AR(p) fitted by least squares, and the embedded default series.

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

The embedded series: `co2_weekly()` reads `hf_seq/data_files/co2_weekly.csv`, the weekly mean atmospheric CO2
concentration (ppm by volume) measured by the Scripps Institution of Oceanography at the Mauna Loa Observatory,
Hawaii, from the week of 1958-03-29 to that of 2001-12-29 (Keeling and Whorf 2004, published by the Carbon Dioxide
Information Analysis Center at Oak Ridge National Laboratory). The measurements are in the public domain. The file is
`statsmodels/datasets/co2/co2.csv` from the statsmodels 0.15.0 wheel, byte for byte (two columns: `date` as YYYYMMDD
and `co2`, an empty field for a week without a value); statsmodels' own loader marks it public domain. It is kept
unchanged so that anyone can compare it with statsmodels' copy (sha256 16695fa2...2a92f).
"""

import csv
import io
import math
from collections.abc import Sequence
from importlib import resources

import numpy as np

from hf_seq.errors import InvalidValueError

DEFAULT_QUANTILES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

__all__ = [
    "DEFAULT_QUANTILES",
    "AutoRegressive",
    "co2_weekly",
    "crps_from_samples",
    "gaussian_nll_from_samples",
    "interval_from_samples",
    "mase",
    "naive_forecast",
    "naive_forecast_scale",
    "naive_samples",
    "quantile_loss",
    "score_samples",
    "seasonal_naive_forecast",
    "select_order",
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


# ------------------------------------------------------------------------------------------------ benchmark forecasts
def _last_observed(rows: np.ndarray) -> np.ndarray:
    last = rows.shape[1] - 1 - np.argmax(~np.isnan(rows[:, ::-1]), axis=1)
    return rows[np.arange(len(rows)), last]


def naive_forecast(history, horizon: int) -> np.ndarray:
    """The naive forecast (FPP3 section 5.2): every future value equals the last observed one,

        y_hat_{T+h} = y_T,    h = 1..horizon,

    where a missing (NaN) y_T is replaced by the last observed value before it. history: `(time,)` or
    `(batch, time)`; returns `(horizon,)` or `(batch, horizon)`."""
    horizon = _positive_int(horizon, "horizon", "naive_forecast")
    rows, lead = _history(history, "naive_forecast")
    return np.repeat(_last_observed(rows)[:, None], horizon, axis=1).reshape(lead + (horizon,))


def _last_season(rows: np.ndarray, season: int, where: str) -> np.ndarray:
    """`(batch, season)`: for each position of the last season, the latest observed value at that phase (a whole
    number of seasons earlier), or the last observed value of the series when that phase was never observed."""
    if rows.shape[1] < season:
        raise InvalidValueError(
            f"{where}: history has {rows.shape[1]} points, the seasonal-naive forecast needs at least season={season}."
        )
    time = rows.shape[1]
    values = np.empty((len(rows), season))
    fallback = _last_observed(rows)
    for phase in range(season):
        at_phase = rows[:, time - season + phase :: -season]  # the latest first
        observed = ~np.isnan(at_phase)
        latest = at_phase[np.arange(len(rows)), np.argmax(observed, axis=1)]
        values[:, phase] = np.where(observed.any(axis=1), latest, fallback)
    return values


def seasonal_naive_forecast(history, horizon: int, season: int) -> np.ndarray:
    """The seasonal-naive forecast (FPP3 section 5.2): each future value equals the value one season earlier,

        y_hat_{T+h} = y_{T+h-m(k+1)},    k = floor((h-1)/m),  m = season,

    i.e. the last observed season repeated. A missing value there is replaced by the latest observed value at the
    same phase of an earlier season, and by the last observed value where that phase was never observed. season=1 is
    the naive forecast. history: `(time,)` or `(batch, time)` with at least `season` points; returns `(horizon,)`
    or `(batch, horizon)`."""
    horizon = _positive_int(horizon, "horizon", "seasonal_naive_forecast")
    season = _positive_int(season, "season", "seasonal_naive_forecast")
    rows, lead = _history(history, "seasonal_naive_forecast")
    last_season = _last_season(rows, season, "seasonal_naive_forecast")
    return last_season[:, np.arange(horizon) % season].reshape(lead + (horizon,))


def _naive_residual_scale(rows: np.ndarray, season: int, where: str) -> np.ndarray:
    """sigma_hat per series: the root mean square of the in-sample residuals e_t = y_t - y_{t-m}."""
    residuals = rows[:, season:] - rows[:, :-season] if rows.shape[1] > season else np.empty((len(rows), 0))
    observed = ~np.isnan(residuals)
    if not observed.any(axis=1).all():
        raise InvalidValueError(
            f"{where}: history needs two observed values season={season} step(s) apart to estimate the residual "
            f"scale; a series of {rows.shape[1]} points has none."
        )
    return np.sqrt(np.where(observed, residuals**2, 0.0).sum(axis=1) / observed.sum(axis=1))


def naive_forecast_scale(history, horizon: int, season: int = 1) -> np.ndarray:
    """The standard deviation of the (seasonal) naive forecast at each step, FPP3 section 5.5's benchmark formula:

        sigma_h = sigma_hat * sqrt(k + 1),    k = floor((h-1)/m),  m = season
        sigma_hat = sqrt( 1/M * sum_t e_t^2 ),  e_t = y_t - y_{t-m}  (the M in-sample residuals that are observed)

    For the naive forecast (m = 1) sigma_h = sigma_hat * sqrt(h): a random walk's spread. The residuals have no
    fitted parameter, so sigma_hat is their root mean square (FPP3's sigma_hat with K = 0). history: `(time,)` or
    `(batch, time)` with at least two observed values `season` apart; returns `(horizon,)` or `(batch, horizon)`."""
    horizon = _positive_int(horizon, "horizon", "naive_forecast_scale")
    season = _positive_int(season, "season", "naive_forecast_scale")
    rows, lead = _history(history, "naive_forecast_scale")
    sigma = _naive_residual_scale(rows, season, "naive_forecast_scale")
    steps = np.sqrt(np.arange(horizon) // season + 1.0)
    return (sigma[:, None] * steps).reshape(lead + (horizon,))


def naive_samples(history, horizon: int, season: int = 1, num_samples: int = 100, seed: int = 0) -> np.ndarray:
    """Sample paths of the (seasonal) naive method as a (seasonal) random walk with Gaussian steps:

        x_{T+h} = x_{T+h-m} + sigma_hat * eps_{T+h},   eps ~ N(0, 1) i.i.d.,   x_t = y_t for t <= T,

    which starts from `seasonal_naive_forecast` (m = season; m = 1: `naive_forecast`) and whose marginal at step h
    is N(y_hat_{T+h}, sigma_h^2) with sigma_h from `naive_forecast_scale`: FPP3 section 5.5's benchmark prediction
    intervals, as paths, so CRPS and intervals are computed for these baselines exactly as for a network's samples.
    Returns `(num_samples, horizon)` for one series or `(batch, num_samples, horizon)`; `seed` fixes the draw."""
    horizon = _positive_int(horizon, "horizon", "naive_samples")
    season = _positive_int(season, "season", "naive_samples")
    num_samples = _positive_int(num_samples, "num_samples", "naive_samples")
    rows, lead = _history(history, "naive_samples")
    point = _last_season(rows, season, "naive_samples")[:, np.arange(horizon) % season]  # (batch, horizon)
    sigma = _naive_residual_scale(rows, season, "naive_samples")
    steps = np.random.default_rng(seed).standard_normal((len(rows), num_samples, horizon))
    for h in range(season, horizon):  # each step adds to the path one season back: a seasonal random walk
        steps[:, :, h] += steps[:, :, h - season]
    paths = point[:, None, :] + sigma[:, None, None] * steps
    return paths.reshape(lead + (num_samples, horizon))


# ------------------------------------------------------------------------------------------------ AR(p)
def _lagged_design(series: list[np.ndarray], order: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the regression x_t ~ (x_{t-1}, ..., x_{t-order}) from every window of order+1 consecutive values
    in which all are observed: lags `(rows, order)`, lag 1 first, and targets `(rows,)`."""
    lags, targets = [], []
    for values in series:
        if values.size <= order:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(values, order + 1)  # (T - order, order + 1), oldest first
        windows = windows[~np.isnan(windows).any(axis=1)]
        lags.append(windows[:, -2::-1])
        targets.append(windows[:, -1])
    if not lags:
        return np.empty((0, order)), np.empty(0)
    return np.concatenate(lags), np.concatenate(targets)


class AutoRegressive:
    """A linear auto-regressive model of order p, AR(p) (FPP3 section 9.3; Box and Jenkins 1970):

        x_t = c + phi_1 x_{t-1} + ... + phi_p x_{t-p} + eps_t,    eps_t ~ N(0, sigma^2) i.i.d.

    `fit(series)` estimates c (`intercept`; fixed at 0 with `include_mean=False`), phi_1..phi_p (`coefficients`) by
    ordinary least squares on the lagged design matrix, the conditional least-squares estimate:

        [c, phi] = argmin sum_t (x_t - c - sum_i phi_i x_{t-i})^2    over t = p+1..n,

    with one row per window of p+1 consecutive observed values (a window with a missing value is dropped, so gaps
    cost rows, not bias). `noise_scale` is sigma_hat = sqrt(RSS / (n_rows - k)) with k = p (+1 with the intercept);
    `standard_errors` are those of phi_hat from sigma_hat^2 (X^T X)^-1 (asymptotically sqrt((1 - phi_2^2)/n) for
    both coefficients of an AR(2)); `aic` = n_rows log(RSS / n_rows) + 2 (k + 1). The process has mean
    c / (1 - sum_i phi_i) when it is stationary.

    `forecast(history, horizon)` iterates the equation without noise (each forecast feeds the next step);
    `sample(history, horizon, num_samples, seed)` iterates it with Gaussian innovations sigma_hat * eps, giving
    sample paths whose spread grows with the horizon as the model implies.
    """

    def __init__(self, order: int, include_mean: bool = True):
        self.order = _positive_int(order, "order", "AutoRegressive")
        self.include_mean = bool(include_mean)
        self.coefficients: np.ndarray | None = None
        self.intercept = 0.0
        self.noise_scale: float | None = None
        self.standard_errors: np.ndarray | None = None
        self.aic: float | None = None
        self.num_rows = 0

    def __repr__(self) -> str:
        if self.coefficients is None:
            return f"AutoRegressive(order={self.order}, include_mean={self.include_mean}, not fitted)"
        phi = ", ".join(f"{value:.4g}" for value in self.coefficients[:6]) + (", ..." if self.order > 6 else "")
        return f"AutoRegressive(order={self.order}, intercept={self.intercept:.4g}, coefficients=[{phi}], noise_scale={self.noise_scale:.4g})"

    def _fit_design(self, lags: np.ndarray, targets: np.ndarray) -> "AutoRegressive":
        design = np.concatenate([np.ones((len(lags), 1)), lags], axis=1) if self.include_mean else lags
        solution, _, _, _ = np.linalg.lstsq(design, targets, rcond=None)
        residuals = targets - design @ solution
        rss = float(residuals @ residuals)
        rows, k = design.shape
        self.intercept = float(solution[0]) if self.include_mean else 0.0
        self.coefficients = solution[-self.order :].copy()
        self.noise_scale = math.sqrt(rss / (rows - k))
        covariance = self.noise_scale**2 * np.linalg.pinv(design.T @ design)
        self.standard_errors = np.sqrt(np.diag(covariance)[-self.order :])
        self.aic = rows * math.log(rss / rows) + 2 * (k + 1) if rss > 0 else -math.inf
        self.num_rows = rows
        return self

    def _parameter_count(self) -> int:
        return self.order + int(self.include_mean)

    def fit(self, series) -> "AutoRegressive":
        """Fit by least squares on one series `(time,)`, or pooled over many: `(batch, time)` or a list of 1-D
        series of any lengths (one set of coefficients for all, as the Monash archive's pooled regression does).
        NaN values are missing. Needs more windows of order+1 consecutive observed values than parameters. Returns
        self."""
        series = _series_list(series, "AutoRegressive.fit")
        if all(np.isnan(s).all() for s in series):
            raise InvalidValueError("AutoRegressive.fit: series has no observed value (all are NaN).")
        lags, targets = _lagged_design(series, self.order)
        k = self._parameter_count()
        if len(targets) <= k:
            points = sum(int((~np.isnan(s)).sum()) for s in series)
            raise InvalidValueError(
                f"AutoRegressive.fit: series gives {len(targets)} window(s) of order+1={self.order + 1} consecutive "
                f"observed values ({points} observed points); an AR({self.order}) with {k} parameter(s) needs at "
                f"least {k + 1}, e.g. a series of {self.order + k + 1} points without gaps."
            )
        return self._fit_design(lags, targets)

    def _filled_history(self, history, where: str) -> tuple[np.ndarray, tuple[int, ...]]:
        """history `(batch, time)` with every missing value filled: from position p on, by the model's one-step
        prediction from the p (filled) values before it; among the first p values, by the last observed value
        before it, or the first observed one for a leading gap."""
        if self.coefficients is None:
            raise RuntimeError(f"{where}: call fit(series) first.")
        rows, lead = _history(history, where)
        if rows.shape[1] < self.order:
            raise InvalidValueError(
                f"{where}: history has {rows.shape[1]} points, an AR({self.order}) needs at least {self.order}."
            )
        rows = rows.copy()
        for row in rows:
            observed = np.flatnonzero(~np.isnan(row))
            for t in np.flatnonzero(np.isnan(row)):
                if t >= self.order:
                    row[t] = self.intercept + row[t - self.order : t][::-1] @ self.coefficients
                else:
                    before = observed[observed < t]
                    row[t] = row[before[-1]] if before.size else row[observed[0]]
        return rows, lead

    def _iterate(self, start: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Run x_t = c + sum_i phi_i x_{t-i} + noise_t forward from the last p values `start` (..., p), oldest
        first, for noise `(..., horizon)`."""
        window = start.copy()
        out = np.empty(noise.shape)
        for h in range(noise.shape[-1]):
            out[..., h] = self.intercept + window[..., ::-1] @ self.coefficients + noise[..., h]
            window = np.concatenate([window[..., 1:], out[..., h : h + 1]], axis=-1)
        return out

    def forecast(self, history, horizon: int) -> np.ndarray:
        """The iterated point forecast x_hat_{T+h} = c + sum_i phi_i x_hat_{T+h-i} (x_hat_t = x_t for t <= T), the
        conditional mean of the model. history: `(time,)` or `(batch, time)` with at least p points (missing values
        filled as `_filled_history` says); returns `(horizon,)` or `(batch, horizon)`."""
        horizon = _positive_int(horizon, "horizon", "AutoRegressive.forecast")
        rows, lead = self._filled_history(history, "AutoRegressive.forecast")
        out = self._iterate(rows[:, -self.order :], np.zeros((len(rows), horizon)))
        return out.reshape(lead + (horizon,))

    def sample(self, history, horizon: int, num_samples: int = 100, seed: int = 0) -> np.ndarray:
        """Sample paths x_{T+h} = c + sum_i phi_i x_{T+h-i} + sigma_hat eps_{T+h}, eps ~ N(0, 1) i.i.d., each path
        feeding its own values back. Returns `(num_samples, horizon)` for one series or `(batch, num_samples,
        horizon)`; `seed` fixes the draw."""
        horizon = _positive_int(horizon, "horizon", "AutoRegressive.sample")
        num_samples = _positive_int(num_samples, "num_samples", "AutoRegressive.sample")
        rows, lead = self._filled_history(history, "AutoRegressive.sample")
        noise = self.noise_scale * np.random.default_rng(seed).standard_normal((len(rows), num_samples, horizon))
        start = np.repeat(rows[:, None, -self.order :], num_samples, axis=1)
        return self._iterate(start, noise).reshape(lead + (num_samples, horizon))


def select_order(series, max_order: int, include_mean: bool = True) -> int:
    """The AR order p in 1..max_order with the smallest AIC (Akaike 1974) of its least-squares fit,

        AIC(p) = n log(RSS_p / n) + 2 (p + include_mean + 1),

    every order fitted on the same n rows (the windows of max_order+1 consecutive observed values) so that the AICs
    compare the same data. series as for `AutoRegressive.fit`. Returns the order; fit `AutoRegressive(order)` on
    the whole series afterwards to use every row."""
    max_order = _positive_int(max_order, "max_order", "select_order")
    series_list = _series_list(series, "select_order")
    if all(np.isnan(s).all() for s in series_list):
        raise InvalidValueError("select_order: series has no observed value (all are NaN).")
    lags, targets = _lagged_design(series_list, max_order)
    if len(targets) <= max_order + int(include_mean):
        raise InvalidValueError(
            f"select_order: series gives {len(targets)} window(s) of max_order+1={max_order + 1} consecutive observed "
            f"values; comparing orders up to {max_order} needs at least {max_order + int(include_mean) + 1}."
        )
    aics = [AutoRegressive(p, include_mean)._fit_design(lags[:, :p], targets).aic for p in range(1, max_order + 1)]
    return int(np.argmin(aics)) + 1


# ------------------------------------------------------------------------------------------------ embedded data
CO2_WEEKLY_FILE = ("data_files", "co2_weekly.csv")


def co2_weekly() -> tuple[list[str], np.ndarray]:
    """The weekly Mauna Loa CO2 series shipped in the package (see the module docstring for its source and licence):
    2,284 consecutive weeks (each dated by its Saturday) from 1958-03-29 to 2001-12-29, in ppm by volume.

    Returns (dates, values): the dates as ISO strings ("1958-03-29", ...) and the values as a float64 array with
    NaN for the 59 weeks without a measurement. Its yearly season is about 52 weeks.
    """
    text = resources.files("hf_seq").joinpath(*CO2_WEEKLY_FILE).read_text(encoding="utf-8")
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    if header != ["date", "co2"]:
        raise RuntimeError(f"{'/'.join(CO2_WEEKLY_FILE)}: expected the header date,co2, got {header}.")
    dates, values = [], []
    for date, value in reader:
        dates.append(f"{date[:4]}-{date[4:6]}-{date[6:]}")
        values.append(float(value) if value else math.nan)
    return dates, np.array(values, dtype=np.float64)
