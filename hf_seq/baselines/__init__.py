"""The models that are not networks, measured beside them on the same numbers: the interpolated Kneser-Ney
n-gram language model (`ngram`), and the benchmark forecasts and AR(p) of a series (`forecasting`)."""

from hf_seq.faces import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "ngram": ["KneserNeyLM"],
        "forecasting": [
            "AutoRegressive",
            "naive_forecast",
            "naive_forecast_scale",
            "naive_samples",
            "seasonal_naive_forecast",
            "select_order",
        ],
    },
)
