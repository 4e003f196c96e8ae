"""`hf-seq lineage --task time_series`: the classical forecasts and every network with a forecasting head on one
split, scored by the one function `hf-seq evaluate` uses too."""

import dataclasses
import json
import math

import numpy as np
import pytest

from hf_seq.experiments import lineage_forecasting
from hf_seq.experiments.study import Record


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("forecasting")
    return out, lineage_forecasting.run(quick=True, output_dir=out, progress=False)


def test_quick_run_scores_every_member_on_the_same_windows(quick):
    out, result = quick
    names = [r["name"] for r in result["members"]]
    assert names == list(lineage_forecasting.MEMBERS)
    for record in result["members"]:
        for key in ("test_mase", "test_smape", "test_crps", "test_loss", "validation_mase"):
            assert math.isfinite(record[key]), (record["name"], key)
        assert len(record["forecast"]["median"]) == result["prediction_length"] == 8
    assert json.loads((out / "lineage.json").read_text())["metric"] == "test_mase"
    report = (out / "lineage.md").read_text()
    assert report.startswith("# The forecasting lineage: naive, seasonal naive, AR(p), window MLP, LSTM, WaveNet, GPT, "
                             "Mamba, Mamba-2\n")  # fmt: skip
    assert "## The classics against the networks" in report and "![Forecasts" in report
    # one record type for the classical forecasters and the networks
    shared = {f.name for f in dataclasses.fields(Record)} | {"tokens_per_second", "target", "seed"}
    assert all(shared <= set(record) for record in result["members"])
    assert (out / "forecasts.png").stat().st_size > 10_000


def test_the_benchmarks_are_the_forecasting_module_s(quick):
    """The seasonal-naive member's figures are `naive_samples` scored by `score_samples` on the last window."""
    from hf_seq.baselines.forecasting import naive_samples
    from hf_seq.data.series import co2_weekly, split_series
    from hf_seq.evaluation.forecasting import score_samples

    _, values = co2_weekly()
    test = split_series([{"id": "co2", "values": values}], prediction_length=8)["test"][0]
    record = next(r for r in quick[1]["members"] if r["name"] == "seasonal_naive")
    samples = naive_samples(test["history"], 8, 52, num_samples=20, seed=0)
    expected = score_samples(samples[None], test["future"][None], [test["history"]], 52)
    assert record["test_mase"] == pytest.approx(expected["mase"], rel=1e-12)
    assert record["test_crps"] == pytest.approx(expected["crps"], rel=1e-12)
    np.testing.assert_allclose(record["forecast"]["median"], np.quantile(samples, 0.5, axis=0))


def test_a_network_member_s_figures_are_hf_seq_evaluate_s(quick):
    from hf_seq.training.runs import evaluate_folder

    out, result = quick
    record = next(r for r in result["members"] if r["name"] == "lstm")
    again = evaluate_folder(out / "lstm")
    for key in ("test_mase", "test_crps", "test_loss"):
        assert again[key] == pytest.approx(record[key], rel=1e-6), key


def test_bad_lags_and_a_non_numeric_column_are_one_line(tmp_path):
    from hf_seq.errors import InvalidValueError

    with pytest.raises(InvalidValueError, match=r"--set lags='1,x': give positive integers"):
        lineage_forecasting.run(quick=True, output_dir=tmp_path / "a", progress=False, set=("lags=1,x",))
    csv = tmp_path / "s.csv"
    csv.write_text("day,value\n" + "".join(f"{i},v{i}\n" for i in range(200)))
    with pytest.raises(InvalidValueError, match="data.target_column: 'value' holds 'v0' in data row 1, not a number"):
        lineage_forecasting.run(quick=True, output_dir=tmp_path / "b", progress=False, corpus=str(csv),
                                target_column="value")  # fmt: skip


def test_a_member_too_large_for_the_target_goes_shallower_or_is_named(capsys):
    """WaveNet at 6 layers of width 32 passes the 20k target at one skip channel: it is planned with fewer layers,
    matched; at one layer of width 128 it cannot be, and the plan says so, naming what to lower."""
    import types
    from pathlib import Path

    from hf_seq.experiments.study import Options, StudyRun

    study = lineage_forecasting.LINEAGE
    data = types.SimpleNamespace(vocab_size=1, tokens_per_step=100, train_tokens=10_000)

    def plan(*overrides):
        s = study.settings_for(False, overrides)
        return StudyRun(study, s, data, {"tokens": 10**6}, Options(), Path("."), print).plan(study.row("conv"), 20_000)

    deep, fits = plan("conv.layers=6"), plan("conv.layers=3")
    assert deep.knobs["layers"] < 6 and abs(deep.non_embedding - 20_000) < 0.25 * 20_000
    assert fits.knobs == {} and abs(fits.non_embedding - 20_000) < 0.25 * 20_000
    assert "warning" not in capsys.readouterr().out
    wide = plan("conv.layers=1", "width=128")
    said = capsys.readouterr().out
    assert wide.non_embedding > 3 * 20_000
    assert "(one layer)" in said and "above the target 20,000" in said and "lower width with --set" in said, said


def test_the_command_sizes_forecasters_by_a_seconds_budget(tmp_path):
    """`--budget-seconds` sizes the networks by a search inside the budget (--sizes auto) and the command prints the
    ranking."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "hf_seq.cli", "lineage", "--task", "time_series", "--quick", "--budget-seconds",
               "6", "--members", "seasonal_naive,window", "--output-dir", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "window rung 2: kept" in done.stdout
    assert any(line.split()[:2] == ["auto", "window:"] for line in done.stdout.splitlines()), done.stdout[-800:]
    result = json.loads((tmp_path / "lineage.json").read_text())
    window = next(r for r in result["members"] if r["name"] == "window")
    assert result["sizes"] == ["auto"] and window["search"]["chosen"] == str(window["non_embedding_params"])


def test_many_series_of_a_long_table_by_id_and_timestamp(tmp_path):
    """--id-column and --timestamp-column split a long table into its series; --set takes several settings at once."""
    import subprocess
    import sys

    rows = ["when,store,sales"] + [f"{t:03d},{s},{10 * (s == 'b') + math.sin(t)}" for s in "ab" for t in range(120)]
    (tmp_path / "sales.csv").write_text("\n".join(reversed(rows[1:])) and "\n".join([rows[0], *reversed(rows[1:])]))
    command = [sys.executable, "-m", "hf_seq.cli", "lineage", "--task", "time_series", "--quick", "--corpus",
               str(tmp_path / "sales.csv"), "--target-column", "sales", "--id-column", "store", "--timestamp-column",
               "when", "--set", "prediction_length=6", "context_length=12", "lags=1,2,6", "season=6", "--members",
               "seasonal_naive", "--output-dir", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "lineage.json").read_text())
    assert result["series"] == 2 and result["test_windows"] == 2 and result["prediction_length"] == 6
    assert result["plot_window"]["future"] == [
        pytest.approx(math.sin(t)) for t in range(114, 120)
    ]  # series a, in time order
