"""The learning-rate schedule of Vaswani et al. (2017), section 5.3, eq. 3:

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

a linear warm-up for `warmup_steps` steps, then decay with the inverse square root of the step. Written as a
multiplier of a peak rate it is min(step / warmup, sqrt(warmup / step)), which is what transformers'
`get_inverse_sqrt_schedule` computes; the paper's peak is d_model^-0.5 * warmup_steps^-0.5 (7e-4 for the base
model, warmup 4000). Trainer gets the same with `lr_scheduler_type="inverse_sqrt"`, `warmup_steps=...` and
`learning_rate=vaswani_peak_learning_rate(...)`.

    optimizer = torch.optim.Adam(model.parameters(), lr=vaswani_peak_learning_rate(512, 4000), betas=(0.9, 0.98), eps=1e-9)
    scheduler = inverse_sqrt_schedule(optimizer, warmup_steps=4000)     # scheduler.step() after each optimizer step

The scheduled-sampling decays of Bengio et al. (2015), section 2.4, give the probability epsilon_i of feeding the
true previous token at training step i; the model reads its own sample with probability 1 - epsilon_i, which is what
`BahdanauConfig.scheduled_sampling` holds. A training loop sets it before each step:

    model.config.scheduled_sampling = scheduled_sampling_probability(step, "inverse_sigmoid", k=200)

Under a budget the run knows its end by, the rate is a function of how far through the budget the run is: its
progress p = max(steps done / training.max_steps, seconds elapsed / training.max_seconds), which only grows, so
nothing is planned from a measured speed and nothing is re-planned when the machine slows down (`ProgressSchedule`).
The default under a seconds budget is warmup-stable-decay (Hägele et al. 2024, "Scaling laws and compute-optimal
training beyond fixed training durations"; Hu et al. 2024, MiniCPM): a linear warm-up over `warmup_steps`, the peak
rate while p < 1 - f, then a decay to 0 at p = 1 along 1 - sqrt, the shape Hägele et al. found best:

    factor(p) = 1                                   p <= 1 - f
              = 1 - sqrt((p - (1 - f)) / f)         1 - f < p <= 1          (f: training.decay_fraction)

A run in its stable phase (f = 0: no decay) can be continued with a larger budget, and a short decay branch from any
of its checkpoints (resumed with max_seconds = now + b and decay_fraction = b / (now + b)) gives the loss the run
would reach if it stopped there: what a study's size search compares (hf_seq.experiments.sizing).
"""

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from transformers import get_inverse_sqrt_schedule


def vaswani_learning_rate(step: int, d_model: int, warmup_steps: int = 4000) -> float:
    """Eq. 3 at optimizer step `step` (counted from 1)."""
    if step < 1 or warmup_steps < 1:
        raise ValueError(f"step and warmup_steps count from 1, got step={step}, warmup_steps={warmup_steps}.")
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def vaswani_peak_learning_rate(d_model: int, warmup_steps: int = 4000) -> float:
    """The largest rate of eq. 3, reached at the end of the warm-up."""
    return vaswani_learning_rate(warmup_steps, d_model, warmup_steps)


def inverse_sqrt_schedule(optimizer: Optimizer, warmup_steps: int = 4000) -> LambdaLR:
    """Scales the optimizer's learning rate (its peak) by min(step / warmup, sqrt(warmup / step)), with `step` the
    number of `scheduler.step()` calls so far: 0 before the first update, as transformers' schedules count."""
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be at least 1, got {warmup_steps}.")
    return get_inverse_sqrt_schedule(optimizer, num_warmup_steps=warmup_steps)


SCHEDULED_SAMPLING_DECAYS = ("linear", "exponential", "inverse_sigmoid")


def teacher_forcing_probability(step: int, decay: str, k: float, c: float = 0.0, minimum: float = 0.0) -> float:
    """epsilon_i of Bengio et al. (2015), section 2.4, at training step `step` (counted from 0):

    linear           epsilon_i = max(minimum, k - c * i)        (0 < k <= 1, c >= 0: the paper's epsilon is `minimum`)
    exponential      epsilon_i = k^i                            (0 < k < 1)
    inverse_sigmoid  epsilon_i = k / (k + exp(i / k))           (k >= 1)
    """
    if decay not in SCHEDULED_SAMPLING_DECAYS:
        raise ValueError(
            f"decay={decay!r} is not a scheduled-sampling decay; allowed values: {list(SCHEDULED_SAMPLING_DECAYS)}."
        )
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step counts training steps from 0, got {step!r}.")
    if decay == "linear":
        if not 0 < k <= 1 or c < 0 or not 0 <= minimum <= 1:
            raise ValueError(
                f"the linear decay needs 0 < k <= 1, c >= 0 and 0 <= minimum <= 1; got k={k}, c={c}, minimum={minimum}."
            )
        return max(minimum, k - c * step)
    if decay == "exponential":
        if not 0 < k < 1:
            raise ValueError(f"the exponential decay k^i needs 0 < k < 1, got k={k}.")
        return k**step
    if k < 1:
        raise ValueError(f"the inverse sigmoid decay k / (k + exp(i / k)) needs k >= 1, got k={k}.")
    return k / (k + math.exp(min(step / k, 700.0)))


def scheduled_sampling_probability(step: int, decay: str, k: float, c: float = 0.0, minimum: float = 0.0) -> float:
    """1 - epsilon_i: the probability that the decoder reads its own sampled token at step `step`."""
    return 1.0 - teacher_forcing_probability(step, decay, k, c, minimum)


# The shapes a run's progress drives (the others are functions of the step alone: transformers' schedules)
PROGRESS_SCHEDULES = ("wsd", "cosine", "linear", "constant")


def progress_factor(kind: str, progress: float, decay_fraction: float = 0.2) -> float:
    """The multiplier of the peak rate at `progress` in [0, 1] (warm-up aside): wsd as in the module's docstring,
    cosine 0.5 (1 + cos(pi p)), linear 1 - p, constant 1."""
    p = min(max(progress, 0.0), 1.0)
    if kind == "wsd":
        start = 1.0 - decay_fraction
        if p <= start:
            return 1.0
        return 0.0 if p == 1.0 else 1.0 - math.sqrt((p - start) / decay_fraction)  # at the end the floor, exactly
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * p))
    if kind == "linear":
        return 1.0 - p
    if kind == "constant":
        return 1.0
    raise ValueError(f"kind={kind!r} is not a progress schedule; allowed values: {list(PROGRESS_SCHEDULES)}")


class ProgressSchedule:
    """The learning rate as a function of the run's progress through its budget (the module's docstring): no plan.

    The loop calls `advance(seconds)` before each step with the seconds the run will have used when that step ends
    (its evaluation to come included), and `step()` after it, as for torch's schedulers. Progress is kept as the
    largest seen, so the rate never rises after the warm-up, whatever the measured speed does; `done` is true once a
    step ran at progress 1, with the rate at its floor (0). Its state (a checkpoint's) is the steps taken and the
    phases' start times; a resumed run starts its progress afresh from its (possibly larger) budget."""

    def __init__(self, optimizer, kind: str, warmup_steps: int, max_steps: int | None = None,
                 max_seconds: float | None = None, decay_fraction: float = 0.2):  # fmt: skip
        if max_steps is None and max_seconds is None:
            raise ValueError("a progress schedule needs max_steps or max_seconds: the end it decays to")
        progress_factor(kind, 0.0, decay_fraction)  # the kind is known
        self.optimizer, self.kind, self.warmup_steps = optimizer, kind, warmup_steps
        self.max_steps, self.max_seconds, self.decay_fraction = max_steps, max_seconds, decay_fraction
        self.base_lrs = [group.get("initial_lr", group["lr"]) for group in optimizer.param_groups]
        self.steps, self.progress, self.phases = 0, 0.0, {"warmup": 0.0}
        self._last_lr = list(self.base_lrs)
        self._set(self._factor())

    def _factor(self) -> float:
        warm = min(1.0, self.steps / self.warmup_steps) if self.warmup_steps else 1.0
        return min(warm, progress_factor(self.kind, self.progress, self.decay_fraction))

    def _set(self, factor: float) -> None:
        self._last_lr = [base * factor for base in self.base_lrs]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr

    def advance(self, seconds: float) -> float:
        """Set the rate of the step about to run, which ends at `seconds` into the run; returns it."""
        fractions = [(self.steps + 1) / self.max_steps] if self.max_steps else []
        if self.max_seconds:
            fractions.append(seconds / self.max_seconds)
        self.progress = max(self.progress, min(1.0, max(fractions)))
        factor = self._factor()
        if self.steps >= self.warmup_steps and "stable" not in self.phases:
            self.phases["stable"] = seconds
        if factor < 1.0 and self.steps >= self.warmup_steps and "decay" not in self.phases:
            self.phases["decay"] = seconds
        self._set(factor)
        return self._last_lr[0]

    def step(self) -> None:
        self.steps += 1

    @property
    def done(self) -> bool:
        return self.progress >= 1.0

    @property
    def continuable(self) -> bool:
        """Still at the peak rate after its warm-up (a stable phase): continued with a larger budget, nothing changes."""
        return self.kind in ("wsd", "constant") and self.steps >= self.warmup_steps and self._last_lr == self.base_lrs

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {"kind": self.kind, "steps": self.steps, "phases": self.phases, "base_lrs": self.base_lrs}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.phases = int(state["steps"]), dict(state.get("phases", {}))
        self.progress = 0.0
        self._set(self._factor())

    def describe(self, end_seconds: float | None) -> dict:
        """What metrics.json says of the schedule: its kind, each phase's start in seconds, the peak and final rate."""
        return {"kind": self.kind, "warmup_steps": self.warmup_steps, "decay_fraction": self.decay_fraction,
                "phases_seconds": dict(self.phases) | {"end": end_seconds}, "peak_learning_rate": self.base_lrs[0],
                "final_learning_rate": self._last_lr[0]}  # fmt: skip


__all__ = [
    "PROGRESS_SCHEDULES",
    "ProgressSchedule",
    "progress_factor",
    "SCHEDULED_SAMPLING_DECAYS",
    "inverse_sqrt_schedule",
    "scheduled_sampling_probability",
    "teacher_forcing_probability",
    "vaswani_learning_rate",
    "vaswani_peak_learning_rate",
]
