"""The benchmark forecasts every forecasting model is measured against (naive and seasonal naive, with their
prediction intervals and sample paths: FPP3 sections 5.2 and 5.5) and a linear auto-regressive model AR(p) fitted by
least squares (FPP3 section 9.3). The conventions of `hf_seq.evaluation.forecasting` hold here: a series is a float
array in time order, NaN marks a missing value, bad arguments raise `InvalidValueError`.

Source: Hyndman and Athanasopoulos, "Forecasting: Principles and Practice", 3rd ed. (FPP3).
"""

import math

import numpy as np

from hf_seq.errors import InvalidValueError
from hf_seq.evaluation.forecasting import _history, _positive_int, _series_list

__all__ = [
    "AutoRegressive",
    "naive_forecast",
    "naive_forecast_scale",
    "naive_samples",
    "seasonal_naive_forecast",
    "select_order",
]


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
