"""The `time_series` task: series read in both layouts, split in time without leaks, trained by `hf-seq train` and
scored by the same evaluation as `hf-seq evaluate`; bad input is one line naming the key."""

import json
import math
import subprocess
import sys

import datasets
import numpy as np
import pytest

from hf_seq.data.series import series_from_rows, split_series, training_windows
from hf_seq.errors import InvalidValueError
from hf_seq.training.recipes import load_recipe

TINY_GPT = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "dropout": 0.0}
HEAD = {"prediction_length": 6, "context_length": 12, "lags_sequence": [1, 2, 12]}


def write_csv(path, n=120, series=("a", "b")):
    rows = ["when,store,sales"]
    rng = np.random.default_rng(0)
    for name in series:
        level = 100 if name == "a" else 10
        for t in reversed(range(n)):  # out of order on purpose: the timestamp column orders them
            value = level + 5 * math.sin(2 * math.pi * t / 12) + rng.normal()
            rows.append(f"2020-{t:04d},{name},{'' if t == 30 else round(value, 3)}")
    path.write_text("\n".join(rows) + "\n")
    return path


def recipe_tree(tmp_path, **data):
    return {
        "family": "gpt",
        "task": "time_series",
        "model": TINY_GPT | HEAD | {"num_parallel_samples": 20},
        "data": {"dataset": str(write_csv(tmp_path / "sales.csv")), "target_column": "sales", "id_column": "store",
                 "timestamp_column": "when", "season": 12} | data,
        "training": {"output_dir": str(tmp_path / "run"), "max_steps": 40, "batch_size": 8, "eval_every": 5,
                     "save_every": 1000, "log_with": "none", "learning_rate": 3e-3, "warmup_steps": 3},
    }  # fmt: skip


def test_long_layout_is_grouped_by_id_and_ordered_by_timestamp(tmp_path):
    rows = datasets.load_dataset("csv", data_files=str(write_csv(tmp_path / "s.csv")))["train"]
    series = series_from_rows(rows, "sales", "store", "when")
    assert [s["id"] for s in series] == ["a", "b"] and all(len(s["values"]) == 120 for s in series)
    a = series[0]["values"]
    assert math.isnan(a[30]) and np.isnan(a).sum() == 1  # the empty cell is missing, not 0
    assert abs(a[3] - (100 + 5 * math.sin(2 * math.pi * 3 / 12))) < 4  # time order, not the file's reversed order


def test_monash_layout_is_read_as_is():
    rows = datasets.Dataset.from_dict({"start": ["2000", "2001"], "target": [[1.0, 2.0, None], [4.0, 5.0, 6.0]]})
    series = series_from_rows(rows, "target", None, None)
    assert [s["id"] for s in series] == ["0", "1"]
    np.testing.assert_array_equal(series[1]["values"], [4, 5, 6])
    assert math.isnan(series[0]["values"][2])


def test_splits_are_nested_in_time_and_training_never_reads_held_out_values():
    values = np.arange(100, dtype=float)
    parts = split_series([{"id": "x", "values": values}], prediction_length=5, test_windows=2)
    np.testing.assert_array_equal(parts["test"][1]["future"], values[95:])  # the last window
    np.testing.assert_array_equal(parts["test"][0]["future"], values[90:95])
    np.testing.assert_array_equal(parts["validation"][0]["future"], values[85:90])
    np.testing.assert_array_equal(parts["test"][0]["history"], values[:90])
    windows = training_windows(parts["train"], past_length=10, prediction_length=5, context_length=8)
    seen = np.concatenate([np.array(w, dtype=float) for w in windows["past_values"] + windows["future_values"]])
    assert np.nanmax(seen) == 84  # nothing from validation (85-89) or test
    assert windows["future_values"][-1] == [80, 81, 82, 83, 84]
    assert len(windows["past_values"]) == 80  # a window ending at each of 6..85: history before 0 reads as missing
    assert np.isnan(windows["past_values"][0][:9]).all() and windows["past_values"][0][9] == 0


def test_hf_seq_train_and_evaluate_agree_on_a_csv_of_two_series(tmp_path):
    from hf_seq.training.pretraining import run
    from hf_seq.training.runs import evaluate_folder

    result = run(load_recipe(recipe_tree(tmp_path)), progress=False)
    summary = result.summary
    for key in ("eval_loss", "eval_mase", "eval_smape", "eval_crps", "test_loss", "test_mase", "test_crps"):
        assert math.isfinite(summary[key]), key
    assert summary["test_examples"] == 2 and summary["test_points"] == 12
    # it learns: the held-out NLL per value falls between the first evaluation and the last
    first, last = result.evaluations[0]["eval_loss"], result.evaluations[-1]["eval_loss"]
    assert last < first - 0.3, (first, last)
    again = evaluate_folder(tmp_path / "run")
    for key in ("test_loss", "test_mase", "test_smape", "test_crps"):
        assert again[key] == pytest.approx(summary[key], rel=1e-6), key
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["prediction_length"] == 6 and saved["architectures"] == ["GPTForPrediction"]
    card = (tmp_path / "run" / "README.md").read_text()
    assert "NLL per value" in card and "A forecaster on the hf-seq `gpt` family's backbone" in card
    assert "training values" in card and "AutoTokenizer" not in card and "tokenizer:" not in card
    assert "| `prediction_length` | `6` |" in card and "AutoModelForTimeSeriesPrediction" in card


@pytest.mark.parametrize(
    "change, message",
    [
        ({"data": {"target_column": "store"}}, "data.target_column: 'store' holds 'a' in data row 1, not a number"),
        ({"data": {"target_column": "price"}}, "data.target_column: 'price' is not a column of the data"),
        (
            {"model": {"prediction_length": 0}},
            r"recipe key 'model.prediction_length': prediction_length must be a "
            r"positive integer \(the number of values to forecast\), got 0\.$",
        ),
        (
            {"model": {"distribution_output": "gamma"}},
            r"recipe key 'model.distribution_output': distribution_output='gamma' is not supported; allowed values: "
            r"\['student_t', 'normal'\]\.$",
        ),
        (
            {"model": {"lags_sequence": [0]}},
            r"recipe key 'model.lags_sequence': lags_sequence must be a non-empty list",
        ),
        ({"model": {"prediction_length": 60}}, "series 'a' has 120 values; with model.prediction_length=60"),
        (
            {"data": {"dataset": "stdlib"}},
            r"data.dataset: 'stdlib' is embedded data of another task, not a series; the embedded series: \['co2'\]",
        ),
        ({"data": {"test_windows": 0}}, "data.test_windows': must be a positive integer, got 0"),
        ({"data": {"season": 0}}, "recipe key 'data.season': must be a positive integer, got 0"),
        (
            {"model": {"prediction_length": 39}},
            r"give 6 windows of 39 values to forecast, fewer than one batch "
            r"\(training.batch_size=8\)",
        ),
    ],
)
def test_bad_input_names_the_key(tmp_path, change, message):
    from hf_seq.data.tasks import prepare

    tree = recipe_tree(tmp_path)
    for section, keys in change.items():
        tree[section] |= keys
    with pytest.raises(InvalidValueError, match=message):
        prepare(load_recipe(tree))


def test_all_missing_series_is_refused():
    with pytest.raises(InvalidValueError, match="series 'x' has no observed value"):
        split_series([{"id": "x", "values": np.full(50, np.nan)}], prediction_length=5)


def test_the_command_reports_a_bad_target_in_one_line(tmp_path):
    import yaml

    tree = recipe_tree(tmp_path)
    tree["data"]["target_column"] = "store"
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(tree))
    done = subprocess.run([sys.executable, "-m", "hf_seq.cli", "train", str(tmp_path / "r.yaml")],
                          capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("hf-seq: error: data.target_column: 'store' holds 'a'")
    assert "Traceback" not in done.stderr


def test_a_language_model_recipe_refuses_the_forecasting_settings(tmp_path):
    """The settings are fields of the family's config, but only the time_series task reads them."""
    tree = {"family": "gpt", "task": "causal_lm", "model": TINY_GPT | {"prediction_length": 6},
            "training": {"output_dir": str(tmp_path / "run"), "log_with": "none"}}  # fmt: skip
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['model.prediction_length'\] for GPTConfig"):
        load_recipe(tree)
    del tree["model"]["prediction_length"]
    assert load_recipe(tree).model == TINY_GPT
