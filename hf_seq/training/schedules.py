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


__all__ = [
    "SCHEDULED_SAMPLING_DECAYS",
    "inverse_sqrt_schedule",
    "scheduled_sampling_probability",
    "teacher_forcing_probability",
    "vaswani_learning_rate",
    "vaswani_peak_learning_rate",
]
