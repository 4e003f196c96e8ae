"""The forecasting heads (`...ForPrediction`, models/prediction.py) of every causal family: the loss is the
distribution's negative log-density, `generate()` equals recomputing each step from scratch, missing values are
left out, the folder round-trips (also as remote code) and a head learns a series. The settings are config fields
checked by the config (configs saved before they were fields load with the same values), and a distribution or a
scaling is one class in a name -> class table."""

import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers

import hf_seq  # noqa: F401  (registers the families)
from hf_seq.models import prediction
from hf_seq.registry import FAMILIES, family

SAVED = Path(__file__).parent / "fixtures" / "release-0.1.0"  # folders saved by hf-seq 0.1.0

PREDICTION = "AutoModelForTimeSeriesPrediction"
FORECASTERS = [fam for fam in FAMILIES if PREDICTION in fam.models]
HEAD = dict(prediction_length=4, context_length=6, lags_sequence=[1, 2, 5], vocab_size=1, num_parallel_samples=3)
TINY = {
    "rnn-lstm": ("rnn", dict(cell_type="lstm", hidden_size=12, num_hidden_layers=2, dropout=0.0)),
    "rnn-gru": ("rnn", dict(cell_type="gru", hidden_size=12, num_hidden_layers=1, dropout=0.0)),
    "window": ("window", dict(hidden_size=12, embedding_size=8, context_size=3, dropout=0.0)),
    "conv": ("conv", dict(hidden_size=12, kernel_size=2, dilation_cycle=2, num_blocks=1, skip_channels=8, dropout=0.0)),
    "gpt": ("gpt", dict(hidden_size=12, num_hidden_layers=2, num_attention_heads=2, dropout=0.0)),
    "mamba": ("ssm", dict(ssm_type="mamba", hidden_size=12, num_hidden_layers=2, state_size=4)),
    "s4d": ("ssm", dict(ssm_type="s4d", hidden_size=12, num_hidden_layers=1, state_size=4)),
}


def make(name: str, seed: int = 0, **head):
    fam_name, kwargs = TINY[name]
    fam = family(fam_name)
    torch.manual_seed(seed)
    config = fam.config_class(**kwargs, **(HEAD | head))
    return fam.model_class(PREDICTION)(config).eval()


def series(batch=2, length=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    return 50 + torch.randn(batch, length, generator=g).cumsum(1) * 3


def student_t_log_density(y, df, loc, scale):
    """log p(y) of a Student-t, written out: lgamma((v+1)/2) - lgamma(v/2) - log(sqrt(v pi) s) - (v+1)/2 log(1+z^2/v)."""
    z = (y - loc) / scale
    return (
        torch.lgamma((df + 1) / 2)
        - torch.lgamma(df / 2)
        - 0.5 * torch.log(df * math.pi)
        - torch.log(scale)
        - (df + 1) / 2 * torch.log1p(z * z / df)
    )


@pytest.mark.parametrize("name", list(TINY))
def test_loss_is_the_negative_log_density_of_the_observed_values(name):
    model = make(name, scaling="mean")
    past, future = series(), series(length=4, seed=1)
    out = model(past_values=past, future_values=future)
    df, m, s = out.params
    assert df.shape == (2, HEAD["context_length"] + 4)  # every position from the context on
    df, m, s = (p[:, -4:] for p in out.params)  # the loss scores the future values
    density = student_t_log_density(future, df, out.loc + out.scale * m, out.scale * s)
    torch.testing.assert_close(out.loss, -density.mean())
    assert model(past_values=past).loss is None
    # mean scaling: loc 0, scale the mean |y| of the last context_length past values
    torch.testing.assert_close(out.scale, past[:, -HEAD["context_length"] :].abs().mean(1, keepdim=True))


@pytest.mark.parametrize("name", list(TINY))
def test_generate_equals_recomputing_every_step(name):
    """Each sampled value, fed back with the backbone's state, is the value a full forward pass over the past and the
    values drawn so far gives for the same random draws."""
    model = make(name)
    past = series()
    torch.manual_seed(3)
    paths = model.generate(past_values=past).sequences  # (B, S, P)
    assert paths.shape == (2, 3, 4)
    samples, horizon = HEAD["num_parallel_samples"], HEAD["prediction_length"]
    repeated, drawn = past.repeat_interleave(samples, 0), torch.empty(past.shape[0] * samples, 0)
    torch.manual_seed(3)
    with torch.no_grad():
        for _ in range(horizon):
            slot = torch.full((repeated.shape[0], 1), float("nan"))  # the position to predict, not yet known
            out = model(past_values=repeated, future_values=torch.cat([drawn, slot], 1))
            last = tuple(p[:, -1:] for p in out.params)
            value = model.distribution_head.distribution(last, out.loc, out.scale).sample()
            drawn = torch.cat([drawn, value], 1)
    torch.testing.assert_close(paths, drawn.view(2, samples, horizon), rtol=1e-5, atol=1e-4)


def test_normal_output_and_std_scaling():
    model = make("gpt", distribution_output="normal", scaling="std")
    past, future = series(), series(length=4, seed=1)
    out = model(past_values=past, future_values=future)
    m, s = (p[:, -4:] for p in out.params)
    context = past[:, -HEAD["context_length"] :]
    torch.testing.assert_close(out.loc, context.mean(1, keepdim=True))
    torch.testing.assert_close(out.scale, context.std(1, unbiased=False, keepdim=True))
    expected = torch.distributions.Normal(out.loc + out.scale * m, out.scale * s).log_prob(future)
    torch.testing.assert_close(out.loss, -expected.mean())


def test_missing_values_are_left_out_of_the_scale_the_loss_and_the_inputs():
    model = make("rnn-lstm", scaling="mean")
    past, future = series(), series(length=4, seed=1)
    holed = past.clone()
    holed[0, -2] = float("nan")
    mask = torch.ones_like(past)
    mask[0, -2] = 0
    by_nan = model(past_values=holed, future_values=future)
    changed = past.clone()
    changed[0, -2] = 1e6  # a value the mask hides: it must change nothing
    by_mask = model(past_values=changed, past_observed_mask=mask, future_values=future)
    torch.testing.assert_close(by_nan.loss, by_mask.loss)
    torch.testing.assert_close(by_nan.scale, by_mask.scale)
    observed = torch.cat([past[0, -6:-2], past[0, -1:]])
    torch.testing.assert_close(by_nan.scale[0, 0], observed.abs().mean())
    assert torch.isfinite(model.generate(past_values=holed).sequences).all()


@pytest.mark.parametrize("name", list(TINY))
def test_save_load_round_trip_is_exact(tmp_path, name):
    model = make(name)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["prediction_length"] == 4 and config["lags_sequence"] == [1, 2, 5]
    assert config["auto_map"][PREDICTION].endswith("ForPrediction")
    reloaded = transformers.AutoModelForTimeSeriesPrediction.from_pretrained(tmp_path).eval()
    assert type(reloaded) is type(model)
    past, future = series(), series(length=4, seed=1)
    assert torch.equal(
        model(past_values=past, future_values=future).loss, reloaded(past_values=past, future_values=future).loss
    )


@pytest.mark.parametrize("name", ["rnn-lstm", "window", "conv", "gpt", "mamba"])
def test_remote_code_load_where_hf_seq_is_not_installed(tmp_path, name, clean_python):
    """The folder forecasts where hf_seq cannot be imported, with the same paths for the same seed."""
    model = make(name)
    model.save_pretrained(tmp_path / "model")
    past = series()
    torch.manual_seed(0)
    torch.save({"past": past, "paths": model.generate(past_values=past).sequences}, tmp_path / "expected.pt")
    script = textwrap.dedent(
        f"""
        import torch, transformers
        torch.set_num_threads({torch.get_num_threads()})
        model = transformers.AutoModelForTimeSeriesPrediction.from_pretrained(
            {str(tmp_path / "model")!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        torch.manual_seed(0)
        assert torch.equal(model.generate(past_values=expected["past"]).sequences, expected["paths"])
        print("remote ok")
        """
    )
    assert "remote ok" in clean_python.run(script)


def test_a_head_learns_a_seasonal_series():
    """On a noisy sine of period 8, a GRU's forecasts after 150 steps beat the untrained head's NLL by a wide margin
    and its median path follows the season better than repeating the last value does."""
    torch.manual_seed(0)
    t = torch.arange(400, dtype=torch.float32)
    values = 10 + 3 * torch.sin(2 * math.pi * t / 8) + 0.1 * torch.randn(400)
    model = make("rnn-gru", prediction_length=8, context_length=16, lags_sequence=[1, 2, 8])
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    need = model.past_length
    starts = torch.randint(0, 300 - need - 8, (150, 16))

    def loss_on(batch_starts):
        windows = torch.stack([values[s : s + need + 8] for s in batch_starts.tolist()])
        return model(past_values=windows[:, :need], future_values=windows[:, need:]).loss

    with torch.no_grad():
        before = float(loss_on(starts[0]))
    for batch in starts:
        optimizer.zero_grad()
        loss_on(batch).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        after = float(loss_on(starts[-1]))
        past, actual = values[None, 380 - need : 380], values[380:388]
        median = model.generate(past_values=past, num_parallel_samples=50).sequences.median(1).values[0]
    assert after < before - 1.5, (before, after)
    naive_error = (actual - past[0, -1]).abs().mean()
    assert (median - actual).abs().mean() < 0.5 * naive_error


@pytest.mark.parametrize(
    "head, message",
    [
        (dict(prediction_length=0), "prediction_length must be a positive integer"),
        (dict(prediction_length=None), "prediction_length must be a positive integer"),
        (dict(lags_sequence=[0, 1]), "lags_sequence must be a non-empty list of positive integers"),
        (
            dict(distribution_output="gamma"),
            r"distribution_output='gamma' is not supported; allowed values: \['student_t', 'normal'\]",
        ),
        (dict(scaling="max"), "scaling='max' is not supported"),
        (dict(num_parallel_samples=0), "num_parallel_samples must be a positive integer"),
    ],
)
def test_bad_configs_name_the_key(head, message):
    with pytest.raises(ValueError, match=message):
        make("gpt", **head)


def test_a_short_past_and_a_bidirectional_backbone_are_refused():
    model = make("gpt")
    with pytest.raises(
        ValueError, match=r"past_values holds 10 values a row; this model needs at least 11 \(context_length=6"
    ):
        model(past_values=series(length=10))
    with pytest.raises(ValueError, match="bidirectional=True cannot forecast"):
        fam = family("rnn")
        fam.model_class(PREDICTION)(fam.config_class(bidirectional=True, hidden_size=8, **HEAD))


def test_trainer_trains_a_forecaster_and_reports_its_held_out_nll(tmp_path):
    import datasets
    from transformers import Trainer, TrainingArguments

    model = make("rnn-gru")
    past, future = series(batch=32, length=11), series(batch=32, length=4, seed=1)
    rows = datasets.Dataset.from_dict({"past_values": past.tolist(), "future_values": future.tolist()})
    args = TrainingArguments(tmp_path, max_steps=12, per_device_train_batch_size=8, learning_rate=1e-2,
                             report_to=[], use_cpu=True, save_strategy="no", label_names=["future_values"])  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=rows, eval_dataset=rows)
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    with torch.no_grad():
        direct = model.eval()(past_values=past, future_values=future).loss
    assert after == pytest.approx(float(direct), rel=1e-5)  # Trainer's eval_loss is the model's NLL per value
    assert after < before - 0.2, (before, after)


# ------------------------------------------------------------------------------------------------ the settings
@pytest.mark.parametrize("fam", FORECASTERS, ids=lambda fam: fam.name)
def test_every_forecasting_config_declares_the_settings_as_fields_with_the_shared_defaults(fam):
    fields = {f.name for f in dataclasses.fields(fam.config_class)}
    assert set(prediction.PREDICTION_DEFAULTS) <= fields
    config = fam.config_class()  # a language model's config: no prediction_length, nothing to default context to
    assert {key: getattr(config, key) for key in prediction.PREDICTION_DEFAULTS} == prediction.PREDICTION_DEFAULTS
    config = fam.config_class(prediction_length=4, lags_sequence=(3, 1, 3))
    assert (config.context_length, config.lags_sequence) == (4, [1, 3])
    assert config.to_dict()["prediction_length"] == 4


@pytest.mark.parametrize("fam", FORECASTERS, ids=lambda fam: fam.name)
@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(distribution_output="gamma"), r"distribution_output='gamma' is not supported; allowed values: \['student_t', 'normal'\]\."),
        (dict(scaling="max"), r"scaling='max' is not supported; allowed values: \['mean', 'std', 'none'\]\."),
        (dict(prediction_length=4, context_length=0), r"context_length must be a positive integer, got 0\."),
        (dict(lags_sequence=[]), r"lags_sequence must be a non-empty list of positive integers, got \[\]\."),
        (dict(num_parallel_samples=-1), r"num_parallel_samples must be a positive integer, got -1\."),
    ],
)  # fmt: skip
def test_the_config_refuses_a_bad_setting_naming_the_key_the_value_and_what_is_allowed(fam, settings, message):
    with pytest.raises(prediction.PredictionSettingError, match=f"^{fam.config}: {message}$") as raised:
        fam.config_class(**settings)
    assert raised.value.key in settings


def test_the_settings_check_reads_a_dict_and_its_error_carries_the_key():
    settings = prediction.check_prediction_settings(
        {"prediction_length": 3, "lags_sequence": [4, 1, 4], "hidden_size": 8}, owner="recipe"
    )
    filled = {"prediction_length": 3, "context_length": 3, "lags_sequence": [1, 4]}  # context: prediction_length
    assert settings == prediction.PREDICTION_DEFAULTS | filled
    with pytest.raises(prediction.PredictionSettingError) as raised:
        prediction.check_prediction_settings({"prediction_length": 3, "num_parallel_samples": 0}, owner="recipe")
    assert raised.value.key == "num_parallel_samples"
    assert raised.value.problem == "num_parallel_samples must be a positive integer, got 0."
    assert str(raised.value) == "recipe: num_parallel_samples must be a positive integer, got 0."
    # unset: fine for a config that is not a forecaster's, refused where a forecast is made
    assert prediction.check_prediction_settings({}, owner="recipe")["prediction_length"] is None
    with pytest.raises(prediction.PredictionSettingError, match=r"got None \(a forecasting head needs it in the"):
        prediction.check_prediction_settings({}, owner="recipe", require_length=True)


def test_a_forecaster_saved_by_0_1_0_loads_with_the_same_settings_and_the_same_loss(tmp_path):
    """0.1.0 set the settings on the config when the head was built, so its config.json holds them as plain keys.
    Its own code (the remote code of a folder it saved) builds and saves a forecaster; this version loads it with the
    same settings, scores the same loss bit for bit, and saves the same settings again."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["hf_seq"] = None  # 0.1.0's code only: the folder's own files
        import torch, transformers
        for name in ("lstm", "gpt", "mamba"):
            config = transformers.AutoConfig.from_pretrained({str(SAVED)!r} + "/" + name, trust_remote_code=True)
            config.update(dict(prediction_length=4, lags_sequence=[5, 1, 2], scaling="mean", num_parallel_samples=3))
            torch.manual_seed(0)
            model = transformers.AutoModelForTimeSeriesPrediction.from_config(config, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            model.save_pretrained(name)
            past, future = 50 + torch.randn(2, 11).cumsum(1), 50 + torch.randn(2, 4).cumsum(1)
            with torch.no_grad():
                loss = model(past_values=past, future_values=future).loss
            torch.save({{"past": past, "future": future, "loss": loss}}, name + "/expected.pt")
        print("saved ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert "saved ok" in done.stdout, done.stdout + done.stderr
    for name in ("lstm", "gpt", "mamba"):
        saved = json.loads((tmp_path / name / "config.json").read_text())
        settings = {key: saved[key] for key in prediction.PREDICTION_DEFAULTS}
        assert settings == {"prediction_length": 4, "context_length": 4, "lags_sequence": [1, 2, 5], "scaling": "mean",
                            "distribution_output": "student_t", "num_parallel_samples": 3}  # fmt: skip
        model = transformers.AutoModelForTimeSeriesPrediction.from_pretrained(tmp_path / name).eval()
        assert type(model).__module__.startswith("hf_seq.models."), name
        assert {key: getattr(model.config, key) for key in settings} == settings
        expected = torch.load(tmp_path / name / "expected.pt")
        with torch.no_grad():
            loss = model(past_values=expected["past"], future_values=expected["future"]).loss
        assert torch.equal(loss, expected["loss"]), name
        model.save_pretrained(tmp_path / f"{name}-again")
        again = json.loads((tmp_path / f"{name}-again" / "config.json").read_text())
        assert {key: again[key] for key in settings} == settings


def test_a_language_model_config_saved_by_0_1_0_loads_with_the_default_settings():
    config = transformers.AutoConfig.from_pretrained(SAVED / "lstm")
    assert "prediction_length" not in json.loads((SAVED / "lstm" / "config.json").read_text())
    assert {key: getattr(config, key) for key in prediction.PREDICTION_DEFAULTS} == prediction.PREDICTION_DEFAULTS


# ------------------------------------------------------------------------------------------------ the tables
class LaplaceOutput(prediction.DistributionOutput):
    """z ~ Laplace(m, b) with b = positive(raw); y = loc + scale z ~ Laplace(loc + scale m, scale b)."""

    args = ("loc", "scale")

    def domain_map(self, raw):
        m, b = raw
        return m, prediction.positive(b)

    def distribution(self, params, loc, scale):
        m, b = params
        return torch.distributions.Laplace(loc + scale * m, scale * b)


class AbsMaxScaler(prediction.Scaler):
    """loc = 0, scale = the largest observed |y|."""

    def forward(self, values, observed):
        return torch.zeros_like(values[:, :1]), (values.abs() * observed).amax(1, keepdim=True)


def test_a_third_distribution_is_one_class_and_one_table_row(monkeypatch):
    monkeypatch.setitem(prediction.DISTRIBUTIONS, "laplace", LaplaceOutput)
    model = make("gpt", distribution_output="laplace")
    assert model.distribution_head.proj.out_features == 2
    past, future = series(), series(length=4, seed=1)
    out = model(past_values=past, future_values=future)
    m, b = (p[:, -4:] for p in out.params)
    centre, spread = out.loc + out.scale * m, out.scale * b
    # a Laplace's log density, written out: -log(2 b) - |y - m| / b
    torch.testing.assert_close(out.loss, (torch.log(2 * spread) + (future - centre).abs() / spread).mean())
    assert model.generate(past_values=past).sequences.shape == (2, 3, 4)
    with pytest.raises(ValueError, match=r"distribution_output='gamma' is not supported; allowed values: "
                       r"\['student_t', 'normal', 'laplace'\]"):  # fmt: skip
        make("gpt", distribution_output="gamma")


def test_a_new_scaling_is_one_class_and_one_table_row(monkeypatch):
    monkeypatch.setitem(prediction.SCALERS, "absmax", AbsMaxScaler)
    model = make("rnn-gru", scaling="absmax")
    past = series()
    out = model(past_values=past, future_values=series(length=4, seed=1))
    torch.testing.assert_close(out.scale, past[:, -HEAD["context_length"] :].abs().amax(1, keepdim=True))
    assert torch.equal(out.loc, torch.zeros(2, 1))


def test_the_scalers_compute_their_equations_and_hold_no_weights():
    values = torch.tensor([[1.0, -3.0, 5.0, 100.0], [2.0, 2.0, 2.0, 2.0]])
    observed = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # row 2: nothing observed -> (0, 1)
    expected = {
        "mean": ([0.0, 0.0], [3.0, 1.0]),  # mean |y| of 1, -3, 5
        "std": ([1.0, 0.0], [math.sqrt(32 / 3), 1.0]),  # deviations 0, -4, 4, over n
        "none": ([0.0, 0.0], [1.0, 1.0]),
    }
    assert list(prediction.SCALERS) == list(expected)
    for name, (loc, scale) in expected.items():
        scaler = prediction.SCALERS[name]()
        assert not list(scaler.parameters()) and not list(scaler.buffers())
        got_loc, got_scale = scaler(values, observed)
        torch.testing.assert_close(got_loc, torch.tensor(loc)[:, None])
        torch.testing.assert_close(got_scale, torch.tensor(scale)[:, None])
