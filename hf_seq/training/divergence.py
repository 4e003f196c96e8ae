"""Divergence: a run whose loss (or gradient norm) stops being finite, or grows past `training.max_loss`, stops at
that step with the reason instead of writing NaN weights and a card and exiting 0. The test is one `isfinite` on
numbers the loop has already reduced, so it costs nothing on the step's hot path. fairseq raises FloatingPointError on
a NaN loss and Lightning offers finite checks; here the accelerate loop (`pretraining`) and the Trainer runner
(`finetuning`) both raise `DivergenceError`, which the command prints in one line, and the studies record as a failed
trial."""

import math
from pathlib import Path

from hf_seq.errors import UserError


class Diverged(Exception):
    """A step whose loss or gradient norm is not finite, or whose loss passed training.max_loss: raised before the
    optimizer applies it."""

    def __init__(self, loss: float, grad_norm: float | None, held_out: bool = False):
        super().__init__(loss, grad_norm)
        self.loss, self.grad_norm, self.held_out = loss, grad_norm, held_out


class DivergenceError(UserError):
    """Training diverged: `hf-seq` prints the step, the loss and the likely causes in one line and exits 2."""


def check_loss(loss: float, t, grad_norm: float | None = None, held_out: bool = False) -> None:
    """Raise `Diverged` for a loss that is not finite or above `t.max_loss`, or a gradient norm that is not finite."""
    if not math.isfinite(loss) or (t.max_loss is not None and loss > t.max_loss):
        raise Diverged(loss, grad_norm, held_out)
    if grad_norm is not None and not math.isfinite(grad_norm):
        raise Diverged(loss, grad_norm, held_out)


def explain(diverged: Diverged, step: int, recipe, kept: Path | None, metrics: Path | None) -> str:
    """The one line: the step, the loss and what is wrong with it, the likely causes, and what was kept."""
    t = recipe.training
    what = "not finite" if not math.isfinite(diverged.loss) else f"above training.max_loss={t.max_loss:g}"
    if diverged.grad_norm is not None and not math.isfinite(diverged.grad_norm) and math.isfinite(diverged.loss):
        what = f"finite but its gradient norm is {diverged.grad_norm}"
    init = recipe.model.get("initializer_range")
    line = (
        f"training diverged at step {step}: the {'held-out' if diverged.held_out else 'training'} loss "
        f"{diverged.loss:.4g} is {what}; likely causes: the learning rate (training.learning_rate={t.learning_rate:g}), "
        f"the initialisation (model.initializer_range={'default' if init is None else f'{init:g}'}) or the precision "
        f"(training.mixed_precision={t.mixed_precision}); "
    )
    line += f"the last finite weights are in {kept}" if kept else "no finite weights were kept"
    return line + (f", and why it stopped in {metrics}" if metrics else "")
