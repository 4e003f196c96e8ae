"""The learning-rate schedule of Vaswani et al. (2017), section 5.3, eq. 3:

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

a linear warm-up for `warmup_steps` steps, then decay with the inverse square root of the step. Written as a
multiplier of a peak rate it is min(step / warmup, sqrt(warmup / step)), which is what transformers'
`get_inverse_sqrt_schedule` computes; the paper's peak is d_model^-0.5 * warmup_steps^-0.5 (7e-4 for the base
model, warmup 4000). Trainer gets the same with `lr_scheduler_type="inverse_sqrt"`, `warmup_steps=...` and
`learning_rate=vaswani_peak_learning_rate(...)`.

    optimizer = torch.optim.Adam(model.parameters(), lr=vaswani_peak_learning_rate(512, 4000), betas=(0.9, 0.98), eps=1e-9)
    scheduler = inverse_sqrt_schedule(optimizer, warmup_steps=4000)     # scheduler.step() after each optimizer step
"""

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


__all__ = ["inverse_sqrt_schedule", "vaswani_learning_rate", "vaswani_peak_learning_rate"]
