"""Real-valued series for the `time_series` task: read them, split them in time, cut them into training windows.

A corpus is one or many series. `data.dataset` is an embedded series (a name of `hf_seq.data.corpora.EMBEDDED_DATA`
marked `series`: `co2`, the weekly Mauna Loa CO2 series shipped in the package, no network), CSV / JSON / jsonl files
or a Hub dataset, in one of two layouts:

- **long**: one row per time point, the value in `data.target_column`, optionally `data.id_column` (many series,
  one id each) and `data.timestamp_column` (rows are sorted by it within a series; without it the file's order);
- **Monash** (`monash_tsf` on the Hub): one row per series with its whole `target` list (and a `start`), read as is.

Splits are nested in time, as forecasting is evaluated (Hyndman & Athanasopoulos, FPP3 §5.8): the test set is the
last `prediction_length` values of each series (`data.test_windows` of them, back to back, for rolling windows),
validation the `prediction_length` values before those, and training everything before validation. A training
example is a window of `past_length + prediction_length` values (`past_length`: the context and the longest lag)
ending anywhere in the training part; history before a series starts reads as missing (NaN), as a held-out window's
does. Missing values stay NaN throughout: the models read them through their observed mask.

The embedded series: `co2_weekly()` (through the `co2` entry of `hf_seq.data.corpora.EMBEDDED_DATA`) reads
`hf_seq/data/files/co2_weekly.csv`, the weekly mean atmospheric CO2 concentration (ppm by volume) measured by the
Scripps Institution of Oceanography at the Mauna Loa Observatory, Hawaii, from the week of 1958-03-29 to that of 2001-12-29 (Keeling and Whorf 2004, published by the Carbon Dioxide
Information Analysis Center at Oak Ridge National Laboratory). The measurements are in the public domain. The file is
`statsmodels/datasets/co2/co2.csv` from the statsmodels 0.15.0 wheel, byte for byte (two columns: `date` as YYYYMMDD
and `co2`, an empty field for a week without a value); statsmodels' own loader marks it public domain. It is kept
unchanged so that anyone can compare it with statsmodels' copy (sha256 16695fa2...2a92f).
"""

import math

import datasets
import numpy as np

from hf_seq.errors import InvalidValueError

MIN_CONTEXT_OBSERVED = 1  # a training window needs this many observed values in its context


def prediction_settings(model: dict) -> dict:
    """The forecasting settings of a recipe's model section with their defaults filled in, checked by the check the
    model's config runs (models/prediction.py), so the data is cut to the windows the model will read."""
    from hf_seq.models.prediction import PredictionSettingError, check_prediction_settings

    try:
        return check_prediction_settings(model, owner="recipe", require_length=True)
    except PredictionSettingError as error:
        raise InvalidValueError(f"recipe key 'model.{error.key}': {error.problem}") from None


def read_series(data) -> list[dict]:
    """Every series of the recipe's data section: [{"id": str, "values": float array (NaN: missing)}]."""
    from hf_seq.data.corpora import EMBEDDED_DATA, _looks_like_files, load_files, load_hub_dataset

    embedded = EMBEDDED_DATA.get(data.dataset) if isinstance(data.dataset, str) else None
    if embedded is not None:
        if not embedded.series:
            names = [name for name, entry in EMBEDDED_DATA.items() if entry.series]
            raise InvalidValueError(
                f"data.dataset: {data.dataset!r} is embedded data of another task, not a series; the embedded "
                f"series: {names}, or give files or a Hub dataset with data.target_column"
            )
        return series_from_rows(embedded.load(data), "target", "id", None)
    if _looks_like_files(data.dataset):
        rows = load_files(data.dataset)
    else:
        rows = load_hub_dataset(data.dataset, what="data.dataset")["train"]
    return series_from_rows(rows, data.target_column, data.id_column, data.timestamp_column)


def series_from_rows(rows: datasets.Dataset, target: str, id_column: str | None, timestamp: str | None) -> list[dict]:
    """The series of a table in the long layout (a number a row) or the Monash layout (a list of numbers a row)."""
    if target not in rows.column_names:
        raise InvalidValueError(
            f"data.target_column: {target!r} is not a column of the data; its columns: {rows.column_names}"
        )
    for key, column in (("data.id_column", id_column), ("data.timestamp_column", timestamp)):
        if column is not None and column not in rows.column_names:
            raise InvalidValueError(f"{key}: {column!r} is not a column of the data; its columns: {rows.column_names}")
    values = rows[target]
    if values and isinstance(values[0], list):  # Monash: one series a row
        ids = rows[id_column] if id_column else [str(i) for i in range(len(values))]
        return [{"id": str(i), "values": _numbers(v, target)} for i, v in zip(ids, values)]
    ids = rows[id_column] if id_column else ["0"] * len(values)
    order = range(len(values))
    if timestamp is not None:
        stamps = rows[timestamp]
        order = sorted(order, key=lambda i: (str(ids[i]), stamps[i]))
    grouped: dict[str, list] = {}
    for i in order:
        grouped.setdefault(str(ids[i]), []).append(values[i])
    return [{"id": key, "values": _numbers(v, target)} for key, v in grouped.items()]


def _numbers(values: list, column: str) -> np.ndarray:
    """Floats, with None and empty strings as NaN; anything else that is not a number is an error naming it."""
    out = np.empty(len(values))
    for i, value in enumerate(values):
        if value is None or value == "":
            out[i] = math.nan
            continue
        try:
            out[i] = float(value)
        except (TypeError, ValueError):
            raise InvalidValueError(
                f"data.target_column: {column!r} holds {value!r} in data row {i + 1}, not a number; the target of a "
                "time series must be numeric (missing values: an empty cell, null, NA or NaN)"
            ) from None
    return out


def split_series(series: list[dict], prediction_length: int, test_windows: int = 1) -> dict[str, list[dict]]:
    """Each series cut in time: {"train": the values before validation, "validation": [(history, future)],
    "test": [(history, future)] x test_windows}; each held-out part is `prediction_length` values."""
    if not series:
        raise InvalidValueError("data.dataset: no series were read")
    held = prediction_length * (1 + test_windows)
    splits = {"train": [], "validation": [], "test": []}
    for s in series:
        values = s["values"]
        if len(values) < held + prediction_length:
            raise InvalidValueError(
                f"data: series {s['id']!r} has {len(values)} values; with model.prediction_length={prediction_length} "
                f"and data.test_windows={test_windows} it needs more than {held + prediction_length} (a training part, "
                "one validation and the test windows of prediction_length values each)"
            )
        if np.isnan(values).all():
            raise InvalidValueError(f"data.target_column: series {s['id']!r} has no observed value (all missing)")
        end = len(values) - held
        splits["train"].append({"id": s["id"], "values": values[:end]})
        splits["validation"].append(
            {"id": s["id"], "history": values[:end], "future": values[end : end + prediction_length]}
        )
        for k in range(test_windows):
            start = end + prediction_length * (k + 1)
            window = {"history": values[:start], "future": values[start : start + prediction_length]}
            splits["test"].append({"id": s["id"]} | window)
    return splits


def _last(values: np.ndarray, length: int) -> np.ndarray:
    """The last `length` values, NaN-padded in front when the series is shorter."""
    if len(values) >= length:
        return values[len(values) - length :]
    return np.concatenate([np.full(length - len(values), math.nan), values])


def training_windows(train: list[dict], past_length: int, prediction_length: int, context_length: int) -> dict:
    """Every window of past_length + prediction_length values whose future lies inside a series' training part and
    whose context holds an observed value: {"past_values": [...], "future_values": [...]} columns."""
    past, future = [], []
    for s in train:
        values = s["values"]
        for end in range(prediction_length + 1, len(values) + 1):
            window = _last(values[:end], past_length + prediction_length)
            context = window[past_length - context_length : past_length]
            if np.count_nonzero(~np.isnan(context)) < MIN_CONTEXT_OBSERVED or np.isnan(window[past_length:]).all():
                continue
            past.append(window[:past_length].tolist())
            future.append(window[past_length:].tolist())
    if not past:
        raise InvalidValueError(
            f"data: the training part of the series yields no window of {past_length} past and {prediction_length} "
            "future values with an observed value in its context: give longer series or a shorter "
            "model.context_length / model.prediction_length"
        )
    return {"past_values": past, "future_values": future}


def held_out_rows(windows: list[dict], past_length: int) -> dict:
    """A held-out split's examples: the `past_length` values before each window, the window, and the whole history
    (MASE's in-sample scale)."""
    return {
        "past_values": [_last(w["history"], past_length).tolist() for w in windows],
        "future_values": [w["future"].tolist() for w in windows],
        "history": [w["history"].tolist() for w in windows],
        "series_id": [w["id"] for w in windows],
    }


def prepare_series(recipe) -> tuple[dict[str, datasets.Dataset], dict]:
    """The recipe's series as encoded splits ({"train", "validation", "test"} Datasets) and notes for the report."""
    keys = prediction_settings(recipe.model)
    horizon, context = keys["prediction_length"], keys["context_length"]
    past_length = context + max(keys["lags_sequence"])
    d = recipe.data
    for key in ("test_windows", "season"):
        value = getattr(d, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidValueError(f"recipe key 'data.{key}': must be a positive integer, got {value!r}")
    series = read_series(d)
    parts = split_series(series, horizon, d.test_windows)
    train = datasets.Dataset.from_dict(training_windows(parts["train"], past_length, horizon, context))
    if len(train) < recipe.training.batch_size:
        raise InvalidValueError(
            f"data: the series' training parts (before validation and the test windows) give {len(train)} windows of "
            f"{horizon} values to forecast, fewer than one batch (training.batch_size={recipe.training.batch_size}): "
            "give longer series, or a smaller model.prediction_length, data.test_windows or training.batch_size"
        )
    if d.max_examples is not None:
        train = train.select(range(min(d.max_examples, len(train))))
    encoded = {"train": train}
    for split in ("validation", "test"):
        encoded[split] = datasets.Dataset.from_dict(held_out_rows(parts[split], past_length))
    notes = {"series": len(series), "series_values": int(sum(len(s["values"]) for s in series))}
    return encoded, notes


# ------------------------------------------------------------------------------------------------ embedded data
def co2_weekly() -> tuple[list[str], np.ndarray]:
    """The weekly Mauna Loa CO2 series shipped in the package (its source and licence above), read through its entry
    of the embedded-data table (`hf_seq.data.corpora.EMBEDDED_DATA`): 2,284 consecutive weeks (each dated by its
    Saturday) from 1958-03-29 to 2001-12-29, in ppm by volume.

    Returns (dates, values): the dates as ISO strings ("1958-03-29", ...) and the values as a float64 array with
    NaN for the 59 weeks without a measurement. Its yearly season is about 52 weeks.
    """
    from hf_seq.data.corpora import CO2, EMBEDDED_DATA

    (row,) = EMBEDDED_DATA[CO2].load(None)
    return row["timestamp"], np.array(row["target"], dtype=np.float64)
