"""The forecasting lineage: the first lecture's other opening example. The classical forecasts (the naive and
seasonal-naive benchmarks, a linear auto-regressive model AR(p)) and every causal network with a forecasting head
(the fixed-window MLP, DeepAR's LSTM, WaveNet, GPT, Mamba and Mamba-2: `...ForPrediction`, models/prediction.py), on
one series (or many) with one split in time, under one budget, and scored on the same test windows by the same function.

    hf-seq lineage --task time_series [--corpus co2 | FILE --target-column COL] [--set prediction_length=12
                   season=12 context_length=36 lags=1,2,3,12] [--tune N] [--seeds K] [--budget-seconds S] [--quick]

A third table of members on the study runner (`study.py`), as the language-model and translation lineages are.
Writes `lineage.md` (a table per size: MASE, sMAPE, CRPS and NLL per value on the test windows, each network
against the seasonal-naive benchmark; the ordering against the lectures'), `lineage.json` (one record per run) and
`forecasts.png` (every member's median forecast and 80% interval on the first test window, beside the truth).

Fairness: every network reads the same lagged values (`lags`), the same `context_length` and the same per-series
scaling, has the same width, and the rest of it (its non-embedding parameters) is sized to the same target; all
train with the same optimizer, schedule and windows, and keep the evaluation with the lowest validation NLL. The
classical members are fitted on the same training part of each series. Every member's test figures come from its
sample paths through `hf_seq.evaluation.forecasting.score_samples`, which `hf-seq train` and `hf-seq evaluate` also use.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hf_seq.errors import InvalidValueError
from hf_seq.experiments import lineage, study
from hf_seq.experiments.study import Member, Options, Record, Settings, StudyData, option

QUANTILES = (0.1, 0.5, 0.9)  # the figure's 80% interval and median
PLOT_HISTORY = 3  # prediction lengths of history shown before the test window


@dataclass
class ForecastingSettings(Settings):
    """`block_size` is the positions a network reads (context + prediction); a "token" of the budgets is a value."""

    prediction_length: int = 52
    context_length: int = 104
    lags: str = "1,2,3,4,51,52,53"  # the lagged values each step reads, comma-separated
    season: int = 52  # the seasonal-naive benchmark's period, and MASE's scale
    num_parallel_samples: int = 100
    test_windows: int = 1


SETTINGS = {
    "default": ForecastingSettings(
        vocab_size=1, block_size=156, batch_size=32, width=32, target=20_000, learning_rate=3e-3, warmup_steps=20,
        eval_every=100, budget_tokens=32 * 209 * 300,  # 300 steps of 32 windows of 209 values (CO2's shape)
    ),
    "quick": ForecastingSettings(
        vocab_size=1, block_size=24, batch_size=8, width=8, target=1_500, learning_rate=3e-3, warmup_steps=2,
        eval_every=4, budget_tokens=8 * 76 * 8, prediction_length=8, context_length=16, lags="1,2,52",
        num_parallel_samples=20,
    ),
}  # fmt: skip


def lags_of(s) -> list[int]:
    try:
        lags = sorted({int(x) for x in str(s.lags).split(",")})
    except ValueError:
        lags = []
    if not lags or lags[0] < 1:
        raise InvalidValueError(f"--set lags={s.lags!r}: give positive integers separated by commas, e.g. 1,2,3,12")
    return lags


def _head(s) -> dict:
    return dict(prediction_length=s.prediction_length, context_length=s.context_length, lags_sequence=lags_of(s),
                num_parallel_samples=s.num_parallel_samples, distribution_output="student_t")  # fmt: skip


def _forecaster(language_model_config):
    """A language-model member's config with the forecasting head's keys: the same backbone reads values."""

    def config(s, size: int, dropout: float, **knobs) -> dict:
        keys = language_model_config(s, size, dropout, **knobs) | _head(s) | {"tie_word_embeddings": False}
        keys.pop("initializer_range", None)  # the LM's embedding scale; a value projection keeps the family's
        return keys

    return config


ROWS = (
    Member("naive", "naive (the last value)", None, help="the last observed value, repeated (the random walk)"),
    Member("seasonal_naive", "seasonal naive (the last season)", None,
           help="the last season, repeated: MASE's reference", short="seasonal naive"),
    Member("ar", "AR(p), least squares", None, knobs={"max_order": 60}, quick={"max_order": 8},
           help="a linear auto-regressive model, its order by AIC", short="AR(p)"),
    Member("window", "fixed-window MLP (Bengio et al. 2003)", "window", _forecaster(lineage._window), {"context": 8},
           {"context": 3}, help="the fixed-window MLP over the last steps' lags", short="window MLP"),
    Member("lstm", "LSTM (DeepAR)", "rnn", _forecaster(lineage._recurrent("lstm")), {"layers": 2}, {"layers": 1},
           help="DeepAR's LSTM (Salinas et al. 2020)", short="LSTM"),
    # 3 layers (receptive field 8: the lags bring the seasons): at 6 the layers alone passed the target width 32
    # gives (31k at one skip channel), and the sized skip width was left at 1
    Member("conv", "WaveNet, dilated causal convolutions", "conv", _forecaster(lineage._conv), {"layers": 3},
           {"layers": 2}, help="WaveNet's dilated causal convolutions", short="WaveNet"),
    Member("gpt", "GPT (Transformer decoder)", "gpt", _forecaster(lineage._gpt), {"layers": 2}, {"layers": 1},
           help="the Transformer decoder", short="GPT"),
    Member("ssm", "Mamba, selective state space", "ssm", _forecaster(lineage._ssm), help="Mamba's selective state space",
           short="Mamba"),
    Member("mamba2", "Mamba-2, state-space duality (SSD)", "ssm", _forecaster(lineage._mamba2),
           {"state": 32, "chunk": 64}, help="Mamba-2's state-space duality (Dao and Gu 2024)", short="Mamba-2",
           level_with_previous=True),
)  # fmt: skip


@dataclass
class ForecastingOptions(Options):
    target_column: str | None = option(None, "the column of the values")
    id_column: str | None = option(None, "the column naming each series of a long table (many series)")
    timestamp_column: str | None = option(None, "the column that orders each series' rows")


@dataclass
class ForecastingData(StudyData):
    splits: dict = None  # the series cut in time (hf_seq.data.series.split_series): train parts, validation, test windows
    season: int = 1


class Forecasting(study.Study):
    name, title, rows, settings = "time_series", "forecasting lineage", ROWS, SETTINGS
    options_class, report_title = ForecastingOptions, "forecasting lineage"
    about = "the forecasters of a real-valued series"
    auto_class, default_corpus = "AutoModelForTimeSeriesPrediction", "co2"
    corpus_help = "co2, the shipped weekly Mauna Loa series"
    files = "lineage.md, lineage.json and forecasts.png"
    budget_unit = "training values"
    curve_keys = ("step", "seconds", "eval_loss", "eval_mase")

    def prepare(self, s, options: ForecastingOptions, output_dir: Path) -> ForecastingData:
        """The series read and cut once; the networks' windows and the benchmarks' histories come from one split."""
        from hf_seq.data import series as series_lib
        from hf_seq.data import tasks
        from hf_seq.hub.publish import public_name
        from hf_seq.training.recipes import load_recipe

        corpus = options.corpus or self.default_corpus
        lags = lags_of(s)
        s.block_size = s.context_length + s.prediction_length
        data = dict(dataset=corpus, season=s.season, test_windows=s.test_windows)
        for key in ("target_column", "id_column", "timestamp_column"):
            if getattr(options, key):
                data[key] = getattr(options, key)
        tree = {"family": "gpt", "task": "time_series", "model": _head(s), "data": data}
        recipe = load_recipe(tree | {"training": {"output_dir": str(output_dir / "data-run"), "log_with": "none"}})
        prepared = tasks.prepare(recipe)
        splits = series_lib.split_series(series_lib.read_series(recipe.data), s.prediction_length, s.test_windows)
        window = s.context_length + max(lags) + s.prediction_length
        values = int(sum(len(part["values"]) for part in splits["train"]))
        epoch = len(prepared.train) * window  # the values one pass over the (overlapping) training windows reads
        say = print if options.progress else (lambda *a: None)
        say(f"lineage: {len(splits['train'])} series, {values:,} training values ({len(prepared.train):,} windows "
            f"of {window}), {plural(len(splits['test']), 'test window')} of {s.prediction_length}")  # fmt: skip
        names = {"validation": f"the {s.prediction_length} values before the test window", "test":
                 f"the last {s.test_windows * s.prediction_length} values of each series"}  # fmt: skip
        return ForecastingData(prepared, recipe, None, public_name(corpus), epoch, s.batch_size * window,
                               None, names, splits, s.season)  # fmt: skip

    def metric(self, data) -> str:
        return "test_mase"

    def flops(self, model, data, s) -> float:
        from hf_seq.training.compute import model_flops_per_token

        return model_flops_per_token(model, s.block_size)

    def step_batch(self, data, s, vocab_size: int) -> dict:
        import torch

        g = torch.Generator().manual_seed(0)
        past = s.context_length + max(lags_of(s))
        return {"past_values": torch.randn(s.batch_size, past, generator=g).cumsum(1),
                "future_values": torch.randn(s.batch_size, s.prediction_length, generator=g)}  # fmt: skip

    def score(self, row, run, plan, data, s) -> dict:
        """The kept weights scored once by `tasks.evaluate`, as `hf-seq evaluate` scores them, and the quantiles of
        the first test window's sample paths for the figure."""
        import torch

        from hf_seq.data import tasks

        metrics = tasks.evaluate(run.recipe, data.prepared, run.model, run.device)
        record = {f"validation_{k.removeprefix('eval_')}": v for k, v in metrics.items() if k.startswith("eval_")}
        record |= {k: v for k, v in metrics.items() if k.startswith("test_")}
        test = data.prepared.held_out["test"]
        with torch.random.fork_rng():
            torch.manual_seed(0)
            past = torch.tensor(test[0]["past_values"], device=run.device)[None]
            paths = run.model.generate(past_values=past).sequences[0].cpu().double().numpy()
        return record | {"forecast": quantile_paths(paths)}

    def fit_fixed(self, row, data, s, given, output_dir) -> dict:
        """The classical members, fitted on the training part of each series (AR(p): its order by AIC) and scored on
        the same windows from their sample paths, by the same function as the networks."""
        import time

        from hf_seq.baselines.forecasting import AutoRegressive, select_order
        from hf_seq.evaluation import forecasting

        started, season, splits = time.perf_counter(), data.season, data.splits
        order = None
        if row.name == "ar":
            train = [part["values"] for part in splits["train"]]
            order = select_order(train, s.knobs[row.name]["max_order"])
            model = AutoRegressive(order).fit(train)
        figures = {}
        for split in ("validation", "test"):
            windows = splits[split]
            samples = np.stack([self._paths(row.name, w["history"], s, model if order else None) for w in windows])
            actual = np.stack([w["future"] for w in windows])
            history = [w["history"] for w in windows]
            scored = forecasting.score_samples(samples, actual, history, season)
            figures |= {f"{split}_{k}": v for k, v in scored.items()}
            figures[f"{split}_loss"] = forecasting.gaussian_nll_from_samples(samples, actual)
            if split == "test":
                figures["forecast"] = quantile_paths(samples[0])
        title = row.title if order is None else f"AR({order}), least squares"
        params = None if order is None else order + 2  # the lags' weights, the intercept and the noise's spread
        record = Record(row.name, title, None, params, seconds=time.perf_counter() - started)
        return record.to_dict(figures)

    @staticmethod
    def _paths(name: str, history, s, model) -> np.ndarray:
        from hf_seq.baselines.forecasting import naive_samples

        horizon, samples = s.prediction_length, s.num_parallel_samples
        if name == "ar":
            return model.sample(history, horizon, samples, seed=0)
        season = s.season if name == "seasonal_naive" else 1
        return naive_samples(history, horizon, season, samples, seed=0)

    def scored_line(self, record: dict, metric: str) -> str:
        return f"test MASE {record['test_mase']:.3f}, CRPS {record['test_crps']:.4f}"

    def describe(self, data, s, records) -> dict:
        splits = data.splits
        return {
            "series": len(splits["train"]),
            "prediction_length": s.prediction_length,
            "context_length": s.context_length,
            "lags": lags_of(s),
            "season": s.season,
            "test_windows": len(splits["test"]),
            "plot_window": {
                "history": splits["test"][0]["history"][-PLOT_HISTORY * s.prediction_length :].tolist(),
                "future": splits["test"][0]["future"].tolist(),
            },  # fmt: skip
        }

    def report(self, result, data, output_dir, title) -> None:
        from hf_seq.experiments.lineage_report import plot_forecasts, write_forecasting_report

        plot_forecasts(study.largest_records(result), result["plot_window"], output_dir / "forecasts.png", title)
        write_forecasting_report(result, output_dir, self)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def quantile_paths(paths: np.ndarray) -> dict:
    """The 10%, 50% and 90% quantiles of sample paths (num_samples, horizon) at each step."""
    low, median, high = np.quantile(paths, QUANTILES, axis=0)
    return {"low": low.tolist(), "median": median.tolist(), "high": high.tolist()}


LINEAGE = Forecasting()
MEMBERS = LINEAGE.members
LECTURE_ORDER = LINEAGE.order


def run(**options) -> dict:
    """`hf-seq lineage --task time_series`: fit and score every member at every size and seed (`ForecastingOptions`
    names the options); write lineage.md, lineage.json, forecasts.png and the member folders into `output_dir`."""
    return LINEAGE.run(LINEAGE.make_options(**options))
