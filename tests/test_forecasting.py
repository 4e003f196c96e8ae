"""hf_seq.evaluation.forecasting: the metrics against hand computations and their definitions (seasonal naive has MASE 1 in
sample), the benchmark forecasts and their intervals, AR(p) recovering a simulated AR(2), missing values, the
errors, and the embedded CO2 series shipped as package data."""

import hashlib
import math
from importlib import resources
from pathlib import Path, PurePosixPath

import numpy as np
import pytest
import torch

from hf_seq.baselines.forecasting import (
    AutoRegressive,
    naive_forecast,
    naive_forecast_scale,
    naive_samples,
    seasonal_naive_forecast,
    select_order,
)
from hf_seq.data.corpora import CO2_WEEKLY_FILE
from hf_seq.data.series import co2_weekly
from hf_seq.errors import UserError
from hf_seq.evaluation.forecasting import (
    crps_from_samples,
    interval_from_samples,
    mase,
    quantile_loss,
    smape,
    weighted_quantile_loss,
)

ROOT = Path(__file__).resolve().parents[1]
PHI = np.array([0.6, -0.3])


def simulate_ar(phi, n, seed, intercept=0.0, burn_in=500):
    rng = np.random.default_rng(seed)
    x = np.zeros(n + burn_in)
    for t in range(len(phi), len(x)):
        x[t] = intercept + x[t - len(phi) : t][::-1] @ phi + rng.standard_normal()
    return x[burn_in:]


# ------------------------------------------------------------------------------------------------ AR(p)
def test_ar2_recovers_its_coefficients_within_four_standard_errors():
    """The least-squares estimate of a stationary AR(2) is asymptotically normal with
    Var(phi_hat_i) = (1 - phi_2^2) / n for both coefficients (Box and Jenkins; Brockwell and Davis, example 8.1)."""
    n = 5000
    x = simulate_ar(PHI, n, seed=0)
    model = AutoRegressive(2).fit(x)
    standard_error = math.sqrt((1 - PHI[1] ** 2) / n)
    assert np.all(np.abs(model.coefficients - PHI) < 4 * standard_error), (model.coefficients, standard_error)
    assert abs(model.intercept) < 4 / math.sqrt(n)  # se(c_hat) ~ sigma / sqrt(n) for a zero-mean process
    assert abs(model.noise_scale - 1.0) < 4 / math.sqrt(2 * n)
    # the model's own standard errors agree with the asymptotic formula
    np.testing.assert_allclose(model.standard_errors, standard_error, rtol=0.05)
    assert model.num_rows == n - 2


def test_ar_intercept_and_mean_of_a_shifted_process():
    """x_t = 2 + 0.6 x_{t-1} - 0.3 x_{t-2} + eps has mean 2 / (1 - 0.3) = 2.857; long forecasts converge to it."""
    x = simulate_ar(PHI, 5000, seed=1, intercept=2.0)
    model = AutoRegressive(2).fit(x)
    mean = model.intercept / (1 - model.coefficients.sum())
    # the standard error of the mean of an AR process: sigma / (sqrt(n) (1 - sum phi))
    assert abs(mean - 2.0 / 0.7) < 4 / (math.sqrt(5000) * (1 - PHI.sum()))
    assert model.intercept == pytest.approx(2.0, abs=0.2)
    assert model.forecast(x, 200)[-1] == pytest.approx(mean, abs=1e-9)
    without_mean = AutoRegressive(2, include_mean=False).fit(x)
    assert without_mean.intercept == 0.0 and without_mean.forecast(x, 200)[-1] == pytest.approx(0.0, abs=1e-6)


def fixed_model(intercept, coefficients, noise_scale=1.0):
    model = AutoRegressive(len(coefficients))
    model.intercept, model.coefficients, model.noise_scale = intercept, np.array(coefficients, float), noise_scale
    return model


def test_ar_forecast_iterates_the_equation():
    model = fixed_model(1.0, [0.5, 0.2])
    history = np.array([9.0, 3.0, 4.0])
    expected, x = [], [3.0, 4.0]
    for _ in range(4):
        x.append(1.0 + 0.5 * x[-1] + 0.2 * x[-2])
        expected.append(x[-1])
    np.testing.assert_allclose(model.forecast(history, 4), expected)
    assert expected[0] == pytest.approx(1 + 2 + 0.6)  # 1 + 0.5 * 4 + 0.2 * 3
    # many series at once, each forecast from its own history
    batch = np.stack([history, history + 1])
    np.testing.assert_allclose(model.forecast(batch, 4)[0], expected)
    np.testing.assert_allclose(model.forecast(batch, 4)[1], model.forecast(history + 1, 4))
    np.testing.assert_allclose(model.forecast(torch.tensor(history, dtype=torch.bfloat16), 4), expected)


def test_ar_samples_centre_on_the_forecast_with_the_model_spread():
    model = fixed_model(0.5, [0.6, -0.3], noise_scale=2.0)
    history = np.array([1.0, 2.0, 3.0])
    paths = model.sample(history, 3, num_samples=40000, seed=0)
    assert paths.shape == (40000, 3)
    np.testing.assert_allclose(paths.mean(axis=0), model.forecast(history, 3), atol=0.05)
    # one step ahead: sigma; two steps: sigma * sqrt(1 + phi_1^2)
    assert paths[:, 0].std() == pytest.approx(2.0, rel=0.02)
    assert paths[:, 1].std() == pytest.approx(2.0 * math.sqrt(1 + 0.36), rel=0.02)
    np.testing.assert_array_equal(paths, model.sample(history, 3, num_samples=40000, seed=0))
    assert not np.array_equal(paths, model.sample(history, 3, num_samples=40000, seed=1))
    assert model.sample(np.stack([history, history]), 3, num_samples=5).shape == (2, 5, 3)


def test_ar_fit_drops_the_windows_with_a_missing_value():
    a, b = simulate_ar(PHI, 700, seed=2), simulate_ar(PHI, 500, seed=3)
    joined = np.concatenate([a, [np.nan], b])
    pooled = AutoRegressive(2).fit([a, b])
    gapped = AutoRegressive(2).fit(joined)
    # the NaN removes exactly the windows that span the two series, so both fits see the same rows
    assert pooled.num_rows == gapped.num_rows == (700 - 2) + (500 - 2)
    np.testing.assert_allclose(pooled.coefficients, gapped.coefficients, rtol=1e-12)
    assert pooled.intercept == pytest.approx(gapped.intercept, abs=1e-12)
    np.testing.assert_allclose(
        AutoRegressive(2).fit(np.stack([a[:500], b])).coefficients, AutoRegressive(2).fit([a[:500], b]).coefficients
    )


def test_ar_forecast_fills_a_missing_history_value_by_its_one_step_prediction():
    model = fixed_model(1.0, [0.5, 0.2])
    history = np.array([2.0, 3.0, np.nan, 5.0])
    filled = history.copy()
    filled[2] = 1.0 + 0.5 * 3.0 + 0.2 * 2.0
    np.testing.assert_allclose(model.forecast(history, 3), model.forecast(filled, 3))
    # a gap among the first p values takes the first observed value, and later gaps are predicted from it
    np.testing.assert_allclose(model.forecast([np.nan, 4.0, np.nan], 2), model.forecast([4.0, 4.0, 3.8], 2))
    order3 = fixed_model(0.0, [0.5, 0.2, 0.1])
    np.testing.assert_allclose(order3.forecast([np.nan, 4.0, 6.0], 2), order3.forecast([4.0, 4.0, 6.0], 2))
    # ... and one after an observed value the last observed value before it
    np.testing.assert_allclose(order3.forecast([1.0, 3.0, np.nan, 6.0], 2), order3.forecast([1.0, 3.0, 3.0, 6.0], 2))


def test_select_order_minimises_aic_on_common_rows_and_finds_the_simulated_order():
    """AIC overfits now and then (it is not a consistent criterion), so: the order chosen is the minimiser of the
    AIC of fits on the same targets (x_t for t > max_order), it never underfits a strong AR(2), and over 20
    simulations the true order is the usual choice (AIC picks a larger order about 30% of the time: Shibata 1976)."""
    chosen = []
    for seed in range(20):
        x = simulate_ar(PHI, 2000, seed=seed)
        aics = [AutoRegressive(p).fit(x[6 - p :]).aic for p in range(1, 7)]
        chosen.append(select_order(x, max_order=6))
        assert chosen[-1] == int(np.argmin(aics)) + 1, (seed, aics)
    assert min(chosen) == 2 and chosen.count(2) >= 0.6 * len(chosen), chosen
    assert select_order(simulate_ar(np.array([0.3, 0.0, 0.0, 0.5]), 2000, seed=0), max_order=6) >= 4


# ------------------------------------------------------------------------------------------------ MASE
def test_seasonal_naive_has_mase_one_in_sample_by_construction():
    """Forecasting every in-sample point y_t by y_{t-m} makes the numerator the scale itself."""
    rng = np.random.default_rng(0)
    for season in (1, 4, 52):
        y = rng.normal(size=300).cumsum() + 10 * np.sin(np.arange(300) * 2 * np.pi / season)
        assert mase(y[:-season], y[season:], y, season) == 1.0
        assert mase(y[:-season], y[season:], y, season + 1) != pytest.approx(1.0)


def test_mase_hand_computed():
    insample = [1.0, 2.0, 4.0, 7.0]  # lag-1 differences 1, 2, 3 (mean 2); lag-2 differences 3, 5 (mean 4)
    assert mase([8.0, 8.0], [9.0, 12.0], insample, 1) == pytest.approx(2.5 / 2)
    assert mase([8.0, 8.0], [9.0, 12.0], insample, 2) == pytest.approx(2.5 / 4)
    # a season as long as the in-sample series (no seasonal difference) falls back to lag 1
    assert mase([8.0, 8.0], [9.0, 12.0], insample, 4) == pytest.approx(2.5 / 2)
    assert mase([8.0, 8.0], [9.0, 12.0], insample, 3) == pytest.approx(2.5 / 6)


def test_mase_many_series_is_the_mean_over_series():
    forecast = np.array([[8.0, 8.0], [0.0, 0.0]])
    actual = np.array([[9.0, 12.0], [1.0, 1.0]])
    per_series = mase(forecast, actual, [[1.0, 2.0, 4.0, 7.0], [0.0, 2.0]], 1, per_series=True)
    np.testing.assert_allclose(per_series, [1.25, 0.5])
    assert mase(forecast, actual, [[1.0, 2.0, 4.0, 7.0], [0.0, 2.0]], 1) == pytest.approx(0.875)
    assert mase(forecast, actual, np.array([[1.0, 2.0, 4.0, 7.0], [0.0, 2.0, 4.0, 6.0]]), 1) == pytest.approx(0.875)


def test_mase_of_a_constant_insample_series():
    assert mase([5.0, 6.0], [5.0, 5.0], [5.0, 5.0, 5.0], 1) == math.inf
    assert mase([5.0, 5.0], [5.0, 5.0], [5.0, 5.0, 5.0], 1) == 0.0


def test_mase_skips_missing_values():
    insample = [1.0, 2.0, np.nan, 4.0, 7.0]  # the observed lag-1 pairs: (1, 2) and (4, 7): scale 2
    assert mase([8.0, 8.0, 8.0], [9.0, np.nan, 12.0], insample, 1) == pytest.approx(2.5 / 2)
    # a series whose actual window is all missing is left out of the mean
    per = mase([[8.0, 8.0], [1.0, 1.0]], [[9.0, 12.0], [np.nan, np.nan]], [insample, [1.0, 2.0]], 1, per_series=True)
    assert per[0] == pytest.approx(1.25) and np.isnan(per[1])
    assert mase([[8.0, 8.0], [1.0, 1.0]], [[9.0, 12.0], [np.nan, np.nan]], [insample, [1.0, 2.0]], 1) == 1.25
    # a missing forecast where the actual value is observed is a broken model: it shows as NaN
    assert np.isnan(mase([np.nan, 8.0], [9.0, 12.0], insample, 1))


# ------------------------------------------------------------------------------------------------ sMAPE, quantile losses, CRPS
def test_smape_hand_computed():
    # terms: 200 * 1/3, 0 (0/0 counts as an exact forecast), 200 * 2/4
    assert smape([1.0, 0.0, 3.0], [2.0, 0.0, 1.0]) == pytest.approx((200 / 3 + 0 + 100) / 3)
    assert smape([1.0, 5.0, 3.0], [2.0, np.nan, 1.0]) == pytest.approx((200 / 3 + 100) / 2)
    assert smape([0.0], [4.0]) == 200.0
    np.testing.assert_allclose(smape([[1.0, 3.0], [2.0, 2.0]], [[2.0, 1.0], [2.0, 2.0]], per_series=True), [250 / 3, 0])
    assert smape([[1.0, 3.0], [2.0, 2.0]], [[2.0, 1.0], [2.0, 2.0]]) == pytest.approx(125 / 3)


def test_quantile_loss_hand_computed():
    # q = 0.1: actual 1 below the forecast 2 costs 2 * 0.9 * 1, actual 4 above it costs 2 * 0.1 * 2
    assert quantile_loss([2.0, 2.0], [1.0, 4.0], 0.1) == pytest.approx(2 * (0.9 + 0.2))
    # q = 0.5 is the absolute error
    assert quantile_loss([2.0, 2.0], [1.0, 4.0], 0.5) == pytest.approx(3.0)
    assert quantile_loss([2.0, 2.0, 7.0], [1.0, 4.0, np.nan], 0.5) == pytest.approx(3.0)


def test_weighted_quantile_loss_hand_computed():
    forecasts = np.array([[2.0, 2.0], [5.0, 5.0]])  # the 0.1 and 0.9 quantile forecasts
    # q = 0.1: 2.2 (above); q = 0.9: 2 * 0.1 * (4 + 1) = 1.0; sum |actual| = 5
    assert weighted_quantile_loss(forecasts, [1.0, 4.0], (0.1, 0.9)) == pytest.approx((2.2 / 5 + 1.0 / 5) / 2)
    # many series: the losses and the scales are summed over the batch before the ratio (GluonTS's aggregation)
    batch = np.stack([forecasts, forecasts * 10])
    assert weighted_quantile_loss(batch, [[1.0, 4.0], [10.0, 40.0]], (0.1, 0.9)) == pytest.approx(0.32)
    other = np.stack([forecasts, forecasts])
    expected = (
        (2.2 + quantile_loss([2.0, 2.0], [3.0, 3.0], 0.1)) / 11
        + (1.0 + quantile_loss([5.0, 5.0], [3.0, 3.0], 0.9)) / 11
    ) / 2
    assert weighted_quantile_loss(other, [[1.0, 4.0], [3.0, 3.0]], (0.1, 0.9)) == pytest.approx(expected)


def test_crps_from_samples_hand_computed():
    # two samples 0 and 10: the linear-interpolation quantiles at 0.1, 0.5, 0.9 are 1, 5, 9
    samples = np.array([[0.0], [10.0]])
    assert crps_from_samples(samples, [5.0], (0.1, 0.5, 0.9)) == pytest.approx((0.8 / 5 + 0 + 0.8 / 5) / 3)


def test_crps_is_zero_for_exact_samples_and_grows_with_their_spread():
    rng = np.random.default_rng(0)
    actual = rng.normal(10, 1, size=12)
    assert crps_from_samples(np.tile(actual, (50, 1)), actual) == 0.0
    noise = rng.standard_normal((200, 12))
    scores = [crps_from_samples(actual + spread * noise, actual) for spread in (0.1, 0.5, 1.0, 3.0)]
    assert all(a < b for a, b in zip(scores, scores[1:])), scores
    # biased samples score worse than centred ones of the same spread
    assert crps_from_samples(actual + 2 + noise, actual) > crps_from_samples(actual + noise, actual)


def test_crps_batches_and_missing_values():
    rng = np.random.default_rng(1)
    samples = rng.normal(size=(2, 100, 5)) + 3
    actual = rng.normal(size=(2, 5)) + 3
    # one series repeated in a batch scores as the series alone
    twice = np.stack([samples[0], samples[0]])
    assert crps_from_samples(twice, np.stack([actual[0], actual[0]])) == pytest.approx(
        crps_from_samples(samples[0], actual[0])
    )
    assert crps_from_samples(torch.tensor(samples), torch.tensor(actual)) == crps_from_samples(samples, actual)
    # a missing actual value drops that step
    gappy = actual[0].copy()
    gappy[2] = np.nan
    keep = [0, 1, 3, 4]
    assert crps_from_samples(samples[0], gappy) == pytest.approx(
        crps_from_samples(samples[0][:, keep], actual[0][keep])
    )


def test_interval_from_samples_covers_its_level():
    samples = np.random.default_rng(0).standard_normal((100000, 2))
    lower, upper = interval_from_samples(samples, 0.8)
    np.testing.assert_allclose(lower, -1.2816, atol=0.03)
    np.testing.assert_allclose(upper, 1.2816, atol=0.03)
    assert interval_from_samples(np.stack([samples, samples])[:, :100], 0.5)[0].shape == (2, 2)


# ------------------------------------------------------------------------------------------------ benchmark forecasts
def test_naive_repeats_the_last_observed_value():
    np.testing.assert_array_equal(naive_forecast([1.0, 2.0, 3.0], 3), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(naive_forecast([1.0, 2.0, np.nan, np.nan], 2), [2.0, 2.0])
    np.testing.assert_array_equal(naive_forecast([[1.0, 2.0], [5.0, np.nan]], 2), [[2.0, 2.0], [5.0, 5.0]])


def test_seasonal_naive_repeats_the_last_season():
    history = [1.0, 2.0, 3.0, 10.0, 20.0, 30.0]
    np.testing.assert_array_equal(seasonal_naive_forecast(history, 7, 3), [10, 20, 30, 10, 20, 30, 10])
    # a missing value takes the same phase one season earlier; a phase never observed, the last observed value
    np.testing.assert_array_equal(seasonal_naive_forecast([1.0, 2.0, 3.0, 10.0, np.nan, 30.0], 3, 3), [10, 2, 30])
    np.testing.assert_array_equal(seasonal_naive_forecast([1.0, np.nan, 3.0, 10.0, np.nan, 30.0], 3, 3), [10, 30, 30])
    np.testing.assert_array_equal(seasonal_naive_forecast(history, 4, 1), naive_forecast(history, 4))


def test_naive_forecast_scale_is_fpp3s_benchmark_formula():
    history = [1.0, 2.0, 4.0, 7.0]  # residuals 1, 2, 3
    sigma = math.sqrt((1 + 4 + 9) / 3)
    np.testing.assert_allclose(naive_forecast_scale(history, 4), sigma * np.sqrt([1, 2, 3, 4]))
    # seasonal: residuals 3, 5; the spread grows once per season, sqrt(floor((h-1)/m) + 1)
    sigma = math.sqrt((9 + 25) / 2)
    np.testing.assert_allclose(naive_forecast_scale(history, 5, season=2), sigma * np.sqrt([1, 1, 2, 2, 3]))
    # a residual with a missing value is skipped
    np.testing.assert_allclose(naive_forecast_scale([1.0, 2.0, np.nan, 4.0, 7.0], 1), math.sqrt((1 + 9) / 2))


def test_naive_samples_have_the_benchmark_marginals_and_random_walk_paths():
    history = np.arange(20.0) % 4 + np.arange(20.0)  # residuals of lag 2: 2 + (t % 4 - (t-2) % 4) in {4, 0}
    paths = naive_samples(history, 6, season=2, num_samples=40000, seed=0)
    assert paths.shape == (40000, 6)
    np.testing.assert_allclose(paths.mean(axis=0), seasonal_naive_forecast(history, 6, 2), atol=0.05)
    np.testing.assert_allclose(paths.std(axis=0), naive_forecast_scale(history, 6, 2), rtol=0.02)
    # each step adds an independent step to the value one season earlier
    increments = paths[:, 2:] - paths[:, :-2]
    np.testing.assert_allclose(increments.std(axis=0), naive_forecast_scale(history, 1, 2)[0], rtol=0.02)
    assert abs(np.corrcoef(increments[:, 0], paths[:, 0])[0, 1]) < 0.02
    np.testing.assert_array_equal(paths, naive_samples(history, 6, season=2, num_samples=40000, seed=0))
    assert naive_samples(np.stack([history, history]), 3, num_samples=7).shape == (2, 7, 3)
    # every member gets CRPS the same way
    assert crps_from_samples(naive_samples(history, 6, 2), history[-6:] + 1) > 0


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: naive_forecast([1.0, 2.0], 0), r"horizon must be a positive integer, got 0"),
        (lambda: seasonal_naive_forecast([1.0, 2.0], 3, 0), r"season must be a positive integer, got 0"),
        (lambda: seasonal_naive_forecast([1.0, 2.0], 3, 5), r"history has 2 points.*season=5"),
        (lambda: naive_samples([1.0, 2.0], 2, num_samples=0), r"num_samples must be a positive integer, got 0"),
        (lambda: naive_samples([1.0], 2), r"history needs two observed values season=1"),
        (lambda: naive_forecast([np.nan, np.nan], 2), r"history has no observed value"),
        (lambda: naive_forecast([[1.0], [np.nan]], 2), r"history\[1\] has no observed value"),
        (lambda: AutoRegressive(0), r"order must be a positive integer, got 0"),
        (lambda: AutoRegressive(True), r"order must be a positive integer, got True"),
        (lambda: AutoRegressive(3).fit(np.arange(6.0)), r"3 window\(s\) of order\+1=4.*at least 5"),
        (lambda: AutoRegressive(1).fit([np.nan] * 5), r"series has no observed value"),
        (
            lambda: AutoRegressive(1).fit(np.arange(10.0)).forecast([1.0], 0),
            r"horizon must be a positive integer, got 0",
        ),
        (lambda: AutoRegressive(3).fit(np.arange(10.0)).forecast([1.0, 2.0], 2), r"history has 2 points, an AR\(3\)"),
        (lambda: select_order(np.arange(5.0), 0), r"max_order must be a positive integer, got 0"),
        (lambda: mase([1.0], [1.0], [1.0, 2.0], 0), r"season must be a positive integer, got 0"),
        (lambda: mase([1.0], [1.0], [1.0], 1), r"insample has 1 point"),
        (lambda: mase([1.0], [np.nan], [1.0, 2.0], 1), r"actual has no observed value"),
        (lambda: mase([1.0, 2.0], [1.0], [1.0, 2.0], 1), r"forecast and actual must have one shape"),
        (
            lambda: mase([[1.0], [1.0]], [[1.0], [1.0]], [1.0, 2.0], 1),
            r"insample holds 1 series, forecast and actual 2",
        ),
        (lambda: AutoRegressive(1).fit(np.zeros((2, 2, 5))), r"series must be \(time,\), \(batch, time\)"),
        (lambda: smape([1.0, 2.0], [[1.0, 2.0]]), r"got \(2,\) and \(1, 2\)"),
        (lambda: quantile_loss([1.0], [1.0], 1.5), r"strictly between 0 and 1, got \(1.5,\)"),
        (lambda: crps_from_samples(np.zeros((3, 4)), np.zeros(5)), r"samples must be \(num_samples, horizon\)"),
        (lambda: interval_from_samples(np.zeros((3, 4)), 80), r"level must be strictly between 0 and 1, got 80"),
    ],
)
def test_bad_input_is_refused_with_a_message_naming_it(call, message):
    with pytest.raises(ValueError, match=message) as raised:
        call()
    assert isinstance(raised.value, UserError)  # `hf-seq` prints it as one `hf-seq: error:` line


def test_forecasting_before_fitting_says_so():
    with pytest.raises(RuntimeError, match="call fit"):
        AutoRegressive(2).forecast([1.0, 2.0, 3.0], 2)


# ------------------------------------------------------------------------------------------------ the embedded series
def test_co2_weekly_is_the_statsmodels_series():
    dates, values = co2_weekly()
    assert len(dates) == len(values) == 2284
    assert (dates[0], dates[-1]) == ("1958-03-29", "2001-12-29")
    assert values.dtype == np.float64 and values[0] == 316.1 and values[-1] == 371.5
    # weeks without a measurement (the file's empty fields, e.g. 1958-05-10) are NaN
    assert np.isnan(values).sum() == 59 and np.isnan(values[dates.index("1958-05-10")])
    assert np.all((values[~np.isnan(values)] > 300) & (values[~np.isnan(values)] < 400))
    days = np.diff(np.array(dates, dtype="datetime64[D]")).astype(int)
    assert set(days.tolist()) == {7}


def test_co2_weekly_file_is_statsmodels_copy_unchanged_and_shipped_in_the_wheel():
    data = resources.files("hf_seq.data").joinpath(*CO2_WEEKLY_FILE).read_bytes()
    # the sha256 of statsmodels/datasets/co2/co2.csv in the statsmodels 0.15.0 wheel
    assert hashlib.sha256(data).hexdigest() == "16695fa2786e53414e5a6b54767a3fdf5de99cfbc68617f69d1362d92776a92f"
    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["hf_seq"]
    assert any(PurePosixPath("data", *CO2_WEEKLY_FILE).match(pattern) for pattern in patterns), patterns


def test_co2_is_one_entry_of_the_embedded_table_read_by_the_series_reader_the_cards_and_the_hub_metadata():
    from hf_seq.data.corpora import CO2, DATA_DESCRIPTIONS, EMBEDDED, EMBEDDED_DATA
    from hf_seq.data.series import read_series
    from hf_seq.hub.cards import describe_training_data
    from hf_seq.hub.publish import hub_dataset_ids
    from hf_seq.training.recipes import DataRecipe

    entry = EMBEDDED_DATA[CO2]
    assert entry.series and not EMBEDDED_DATA["stdlib"].series
    (series,) = read_series(DataRecipe(dataset=CO2))
    _, values = co2_weekly()
    assert series["id"] == CO2
    np.testing.assert_array_equal(series["values"], values)  # NaN where co2_weekly has NaN, the rest equal
    assert EMBEDDED[CO2] is entry.load and DATA_DESCRIPTIONS[CO2] == entry.description
    recipe = {"task": "time_series", "data": {"dataset": CO2}}
    assert describe_training_data(recipe, CO2) == entry.description
    assert hub_dataset_ids(CO2) == []  # built in, not a Hub dataset
