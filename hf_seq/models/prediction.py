r"""Forecasting with any causal family: real values in place of tokens, a distribution in place of the softmax.

The head reads a series the way DeepAR does (Salinas et al. 2020): at each step t the backbone's input is a
projection of the lagged values, never the value it predicts, and its output parametrises the distribution of
$y_t$; the loss is that distribution's negative log-likelihood. The names of the keys and arguments are
transformers' time-series names (TimeSeriesTransformer, Informer):

$$
\begin{aligned}
(\mu, \sigma) &= \text{scale of the last } C \text{ observed past values}
    \qquad \text{mean: } (0, \overline{|y|}),\ \text{std: } (\bar y, s_y) \\
x_t &= W\,[\,(y_{t-l} - \mu)/\sigma,\ o_{t-l} \ \text{for}\ l \in \text{lags};\ \log \sigma\,] + b
    \qquad o \text{ is 1 where a value was observed} \\
h_t &= \text{backbone}(x_{\le t}) \\
y_t &\sim \mu + \sigma \cdot \text{Student-}t(\nu_t, m_t, s_t), \quad
    (\nu_t, m_t, s_t) = (2 + \text{softplus}, \text{id}, \text{softplus})(V h_t + c) \\
\mathcal{L} &= -\tfrac{1}{\#\{t > T: o_t = 1\}} \textstyle\sum_{t > T:\, o_t = 1} \log p(y_t \mid y_{<t})
    \qquad T \text{: the last past value}
\end{aligned}
$$

The backbone reads the last `context_length` past values and the future ones (teacher forcing); the loss scores the
future values (TimeSeriesTransformer's convention), so a training loss and a held-out NLL per value are one number;
a window stride of 1 over the training series makes every value a target. `generate()` draws `num_parallel_samples`
paths of `prediction_length` values, each value fed back as the next step's lag, the backbone's state (or key/value
cache) carried between steps. Missing values (NaN, or 0 in `past_observed_mask`) are read as 0 with their flag at 0
and left out of the scale and the loss.

Settings (fields of each forecasting family's config, checked there by `check_prediction_fields`; defaults in
`PREDICTION_DEFAULTS`): `prediction_length` (None: the config is not a forecaster's; the head needs it),
`context_length` (default `prediction_length`), `lags_sequence` (default 1-7), `scaling` (a name of `SCALERS`),
`distribution_output` (a name of `DISTRIBUTIONS`), `num_parallel_samples` (100). A new distribution or scaling is
one small class and one row of its table.

`scaling` defaults to "std" (standardise by the context's mean and deviation), not DeepAR's "mean" (divide by the
mean |y|): a series far from 0 compared with its swings (CO2 at 315-370 ppm, moving a few ppm a year) reads as
values near 1 under mean scaling, and the same LSTM (the `lstm-co2` recipe, 300 steps) forecast its test year with
MASE 1.18 that way against 0.22 standardised (measured on 2 CPU cores, 2026-11-28).

This module is imported by the configs (for the settings check and the two tables), so it imports only torch and
transformers' output classes at the top; the modeling helpers load when a model generates.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributions import Distribution, Normal, StudentT
from transformers.modeling_outputs import SampleTSPredictionOutput
from transformers.utils import ModelOutput

MINIMUM_SCALE = 1e-5  # a constant context (all zeros) still gets a usable scale
MINIMUM_SPREAD = 1e-6  # a predicted scale parameter stays above 0


# ------------------------------------------------------------------------------------------------ distributions
class DistributionOutput:
    """How the head's raw outputs parametrise the next value's distribution. `args` names the parameters in the
    order the head's projection emits them (its width is `len(args)`); `domain_map` takes each raw output into its
    parameter's domain (the parameters of the scaled value z = (y - loc) / scale); `distribution` is y's
    distribution in the series' units, y = loc + scale * z."""

    args: tuple[str, ...] = ()

    def domain_map(self, raw: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def distribution(self, params: tuple[torch.Tensor, ...], loc, scale) -> Distribution:
        raise NotImplementedError


def positive(raw: torch.Tensor) -> torch.Tensor:
    """softplus(raw) + MINIMUM_SPREAD: a scale parameter, > 0 whatever the raw output."""
    return nn.functional.softplus(raw) + MINIMUM_SPREAD


class StudentTOutput(DistributionOutput):
    r"""z ~ Student-t(ν, m, s) with ν = 2 + softplus(a) (so the variance is finite), m = b, s = positive(c); then
    y = loc + scale z ~ Student-t(ν, loc + scale m, scale s). DeepAR's choice: heavy tails forgive an outlier."""

    args = ("df", "loc", "scale")

    def domain_map(self, raw):
        df, m, s = raw
        return 2.0 + nn.functional.softplus(df), m, positive(s)

    def distribution(self, params, loc, scale):
        df, m, s = params
        return StudentT(df, loc + scale * m, scale * s)


class NormalOutput(DistributionOutput):
    """z ~ Normal(m, s) with m = a, s = positive(b); then y = loc + scale z ~ Normal(loc + scale m, scale s)."""

    args = ("loc", "scale")

    def domain_map(self, raw):
        m, s = raw
        return m, positive(s)

    def distribution(self, params, loc, scale):
        m, s = params
        return Normal(loc + scale * m, scale * s)


# `distribution_output` -> its class
DISTRIBUTIONS: dict[str, type[DistributionOutput]] = {"student_t": StudentTOutput, "normal": NormalOutput}


# ------------------------------------------------------------------------------------------------ scalers
class Scaler(nn.Module):
    """(values, observed), each (B, L) -> (loc, scale), each (B, 1): how each row is scaled, from its observed values
    (observed: 1 where a value was seen); the model reads (y - loc) / scale. A row with nothing observed gets (0, 1).
    No parameters: a scaler adds nothing to the state dict."""

    def forward(self, values: torch.Tensor, observed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class MeanScaler(Scaler):
    r"""DeepAR's: loc = 0, scale = the mean |y| of the observed values, at least MINIMUM_SCALE."""

    def forward(self, values, observed):
        count = observed.sum(1, keepdim=True)
        scale = (values.abs() * observed).sum(1, keepdim=True) / count.clamp(min=1)
        return torch.zeros_like(count), torch.where(count > 0, scale.clamp(min=MINIMUM_SCALE), torch.ones_like(count))


class StdScaler(Scaler):
    r"""Standardisation: loc = the mean $\bar y$ of the observed values, scale = their standard deviation
    $s_y = \sqrt{\tfrac1n \sum (y - \bar y)^2}$ (over n, not n - 1), at least MINIMUM_SCALE."""

    def forward(self, values, observed):
        count = observed.sum(1, keepdim=True)
        seen = count.clamp(min=1)
        loc = (values * observed).sum(1, keepdim=True) / seen
        variance = (((values - loc) * observed) ** 2).sum(1, keepdim=True) / seen
        return loc, torch.where(count > 0, variance.sqrt().clamp(min=MINIMUM_SCALE), torch.ones_like(count))


class IdentityScaler(Scaler):
    """loc = 0, scale = 1: the values as they are."""

    def forward(self, values, observed):
        ones = observed.new_ones(observed.shape[0], 1)
        return torch.zeros_like(ones), ones


# `scaling` -> its class
SCALERS: dict[str, type[Scaler]] = {"mean": MeanScaler, "std": StdScaler, "none": IdentityScaler}


# ------------------------------------------------------------------------------------------------ the settings
PREDICTION_DEFAULTS = {
    "prediction_length": None,
    "context_length": None,  # None: prediction_length
    "lags_sequence": [1, 2, 3, 4, 5, 6, 7],
    "scaling": "std",
    "distribution_output": "student_t",
    "num_parallel_samples": 100,
}


class PredictionSettingError(ValueError):
    """A forecasting setting that is not allowed. `key` names it; `problem` says its value and what is allowed; the
    message is `problem` after the name of what holds the settings (a config class, a recipe)."""

    def __init__(self, owner: str, key: str, problem: str):
        super().__init__(f"{owner}: {problem}")
        self.key, self.problem = key, problem


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_prediction_settings(settings: dict, owner: str, require_length: bool = False) -> dict:
    """The forecasting settings in `settings` (the keys of PREDICTION_DEFAULTS; other keys are ignored), checked, with
    the defaults of the absent ones filled in, `context_length` defaulting to `prediction_length` and the lags sorted
    without repeats. `prediction_length` may be None (a config that is not a forecaster's) unless `require_length`.
    Raises PredictionSettingError naming the first key that is not allowed."""
    values = {key: settings.get(key, default) for key, default in PREDICTION_DEFAULTS.items()}
    length = values["prediction_length"]
    if length is not None or require_length:
        if not _positive_int(length):
            unset = " (a forecasting head needs it in the config)" if length is None else ""
            raise PredictionSettingError(owner, "prediction_length", "prediction_length must be a positive integer "
                                         f"(the number of values to forecast), got {length!r}{unset}.")  # fmt: skip
        if values["context_length"] is None:
            values["context_length"] = length
    context = values["context_length"]
    if context is not None and not _positive_int(context):
        raise PredictionSettingError(
            owner, "context_length", f"context_length must be a positive integer, got {context!r}."
        )
    lags = values["lags_sequence"]
    if not isinstance(lags, (list, tuple)) or not lags or not all(_positive_int(lag) for lag in lags):
        raise PredictionSettingError(
            owner, "lags_sequence", f"lags_sequence must be a non-empty list of positive integers, got {lags!r}."
        )
    values["lags_sequence"] = sorted(set(lags))
    for key, table in (("scaling", SCALERS), ("distribution_output", DISTRIBUTIONS)):
        if not isinstance(values[key], str) or values[key] not in table:
            raise PredictionSettingError(
                owner, key, f"{key}={values[key]!r} is not supported; allowed values: {list(table)}."
            )
    samples = values["num_parallel_samples"]
    if not _positive_int(samples):
        raise PredictionSettingError(
            owner, "num_parallel_samples", f"num_parallel_samples must be a positive integer, got {samples!r}."
        )
    return values


def check_prediction_fields(config, require_length: bool = False) -> None:
    """Check a config's forecasting fields and write back their filled-in values: every family with a ForPrediction
    head calls it at the end of its config's `__post_init__`, and the head calls it again with `require_length`."""
    settings = {key: getattr(config, key) for key in PREDICTION_DEFAULTS}
    for key, value in check_prediction_settings(settings, type(config).__name__, require_length).items():
        setattr(config, key, value)


# ------------------------------------------------------------------------------------------------ the head
def observed_values(values: torch.Tensor, observed: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(values with missing ones at 0, the observed mask as floats): NaN counts as missing, as does a 0 in `observed`."""
    mask = ~torch.isnan(values)
    if observed is not None:
        mask = mask & observed.bool()
    return torch.where(mask, values, torch.zeros_like(values)), mask.to(values.dtype)


def lag_features(values, observed, lags: list[int], start: int, loc, scale) -> torch.Tensor:
    """(B, T, 2 len(lags) + 1): for each position t from `start` to the end, the scaled y_{t-l} and o_{t-l} for every
    lag l, and log(scale)."""
    positions = torch.arange(start, values.shape[1], device=values.device)
    index = positions[:, None] - torch.tensor(lags, device=values.device)  # (T, lags)
    scaled = (values - loc) / scale * observed
    lagged = scaled[:, index], observed[:, index]  # (B, T, lags) each
    log_scale = scale.log()[:, :, None].expand(-1, len(positions), 1)
    return torch.cat([*lagged, log_scale], -1)


class DistributionHead(nn.Module):
    """The top hidden state -> the next value's distribution (a DistributionOutput chosen by name), in the series'
    own units."""

    def __init__(self, hidden_size: int, distribution: str):
        super().__init__()
        self.distribution_output = DISTRIBUTIONS[distribution]()
        self.proj = nn.Linear(hidden_size, len(self.distribution_output.args))

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The distribution's parameters (`distribution_output.args`) in scaled units, each (B, T)."""
        return self.distribution_output.domain_map(self.proj(hidden_states).float().unbind(-1))

    def distribution(self, params, loc, scale) -> Distribution:
        """The distribution of y in the series' units: loc + scale * (the scaled distribution)."""
        return self.distribution_output.distribution(params, loc, scale)


@dataclass
class SeriesPredictionOutput(ModelOutput):
    """`loss`: the mean NLL per observed future value; `params`: the distribution's parameters in scaled units at
    every predicted position, each (B, T); `loc`, `scale` (B, 1): the scaling."""

    loss: torch.Tensor | None = None
    params: tuple[torch.Tensor, ...] | None = None
    loc: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class ValuePredictionHead:
    """A family's forecasting model: its backbone (`backbone_class`) reading lagged values through `value_embedding`,
    `scaler` (from `config.scaling`) and `distribution_head` (from `config.distribution_output`) on its top states.
    Put it before the family's PreTrainedModel among the bases."""

    backbone_class: type
    main_input_name = "past_values"

    def __init__(self, config):
        check_prediction_fields(config, require_length=True)
        if getattr(config, "bidirectional", False):
            raise ValueError(
                f"{type(config).__name__}: bidirectional=True cannot forecast: the backward direction reads the "
                "future values."
            )
        super().__init__(config)
        self.model = self.backbone_class(config)
        width = self.model.get_input_embeddings().embedding_dim
        self.value_embedding = nn.Linear(2 * len(config.lags_sequence) + 1, width)
        self.scaler = SCALERS[config.scaling]()
        self.distribution_head = DistributionHead(config.hidden_size, config.distribution_output)
        self.post_init()

    @property
    def past_length(self) -> int:
        """How many past values a call needs: the context and the longest lag before it."""
        return self.config.context_length + max(self.config.lags_sequence)

    def _series(self, past_values, past_observed_mask, future_values=None, future_observed_mask=None):
        config, name = self.config, type(self).__name__
        if past_values.dim() != 2:
            raise ValueError(f"{name}: past_values must be (batch, length), one univariate series a row; got "
                             f"shape {tuple(past_values.shape)}.")  # fmt: skip
        if past_values.shape[1] < self.past_length:
            raise ValueError(
                f"{name}: past_values holds {past_values.shape[1]} values a row; this model needs at least "
                f"{self.past_length} (context_length={config.context_length} plus the longest lag, "
                f"{max(config.lags_sequence)})."
            )
        past, past_observed = observed_values(past_values.float(), past_observed_mask)
        context = slice(-config.context_length, None)
        loc, scale = self.scaler(past[:, context], past_observed[:, context])
        if future_values is None:
            return past, past_observed, loc, scale
        future, future_observed = observed_values(future_values.float(), future_observed_mask)
        return torch.cat([past, future], 1), torch.cat([past_observed, future_observed], 1), loc, scale

    def forward(
        self,
        past_values: torch.Tensor,
        past_observed_mask: torch.Tensor | None = None,
        future_values: torch.Tensor | None = None,
        future_observed_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        **kwargs,
    ) -> SeriesPredictionOutput:
        """`past_values` (B, L) with L >= `past_length`; `future_values` (B, P), the values to score (teacher
        forcing). Predicts every position from the last `context_length` past values to the end; the loss is the mean
        NLL of the observed future values (summed over `num_items_in_batch` when a training loop passes the count of
        its whole batch, so gradient accumulation equals the full batch)."""
        values, observed, loc, scale = self._series(
            past_values, past_observed_mask, future_values, future_observed_mask
        )
        start = past_values.shape[1] - self.config.context_length
        features = lag_features(values, observed, self.config.lags_sequence, start, loc, scale)
        outputs = self.model(
            inputs_embeds=self.value_embedding(features),
            use_cache=False,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        params = self.distribution_head(outputs.last_hidden_state)
        loss = None
        if future_values is not None:
            first = past_values.shape[1]  # the future's first position
            future = tuple(p[:, first - start :] for p in params)
            nll = -self.distribution_head.distribution(future, loc, scale).log_prob(values[:, first:])
            weight = observed[:, first:]
            count = weight.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
            loss = (nll * weight).sum() / count
        return SeriesPredictionOutput(
            loss=loss, params=params, loc=loc, scale=scale, hidden_states=outputs.hidden_states
        )

    @torch.no_grad()
    def generate(
        self,
        past_values: torch.Tensor,
        past_observed_mask: torch.Tensor | None = None,
        num_parallel_samples: int | None = None,
        prediction_length: int | None = None,
    ) -> SampleTSPredictionOutput:
        """Sample paths (B, num_parallel_samples, prediction_length): each step draws y_t from the predicted
        distribution and feeds it back as the next steps' lag; the backbone's state carries the past, so a step costs
        one position. The point forecast is the paths' median (`sequences.median(1).values`)."""
        from .utils import cache_field, cache_of  # here, not at the top: the configs import this module

        config = self.config
        samples = num_parallel_samples or config.num_parallel_samples
        horizon = prediction_length or config.prediction_length
        if not _positive_int(samples) or not _positive_int(horizon):
            raise ValueError(f"{type(self).__name__}.generate: num_parallel_samples and prediction_length must be "
                             f"positive integers, got {samples!r} and {horizon!r}.")  # fmt: skip
        past, observed, loc, scale = self._series(past_values, past_observed_mask)
        past, observed = past.repeat_interleave(samples, 0), observed.repeat_interleave(samples, 0)
        loc, scale = loc.repeat_interleave(samples, 0), scale.repeat_interleave(samples, 0)
        # one slot past the end: the first future value's position, whose lags are all in the past
        values = torch.cat([past, past.new_zeros(past.shape[0], horizon)], 1)
        observed = torch.cat([observed, observed.new_zeros(past.shape[0], horizon)], 1)
        lags, first = config.lags_sequence, past.shape[1]
        start, state, drawn = first - config.context_length, None, []
        for t in range(first, first + horizon):
            features = lag_features(values[:, : t + 1], observed[:, : t + 1], lags, start, loc, scale)
            outputs = self.model(inputs_embeds=self.value_embedding(features), use_cache=True, **cache_field(state))
            state, start = cache_of(outputs), t + 1
            params = self.distribution_head(outputs.last_hidden_state[:, -1:])
            value = self.distribution_head.distribution(params, loc, scale).sample()[:, 0]  # torch's RNG
            values[:, t], observed[:, t] = value, 1.0
            drawn.append(value)
        paths = torch.stack(drawn, 1).view(past_values.shape[0], samples, horizon)
        return SampleTSPredictionOutput(sequences=paths)
