"""What a run will need, told before any of it is allocated: the model's parameter count from its config on the
meta device (shapes without storage), the memory of one training step, and what the machine has. A model that
cannot fit is refused in one line instead of being killed by the system or ending in an allocator's traceback.

The estimate is a floor, so that nothing trainable is refused: per parameter, 16 bytes in fp32 (the weight, its
gradient and Adam's two moments); per step, the activations kept for the backward pass, 8 values of 4 bytes per
token, layer and hidden unit (an LSTM keeps its four gates, its cell and its output; a Transformer layer keeps about
17 values per hidden unit in half precision, Korthikanti et al. 2022, "Reducing activation recomputation in large
transformer models", section 4.1), plus the logits once (none with the fused loss, which never holds them whole).
Mixed precision keeps fp32 master weights, so it changes the parameters' share little."""

import contextlib
import os

import torch

from hf_seq.errors import InvalidValueError

BYTES_PER_PARAMETER = 16  # fp32 weight + gradient + Adam's first and second moments
ACTIVATION_FACTOR = 8  # values kept per token, layer and hidden unit for the backward pass (a floor)
DIRECT_LAYERS = 64  # up to this many layers the model is built on the meta device as it is; beyond, extrapolated


class OutOfMemoryError(InvalidValueError):
    """A model or a step that cannot fit in the memory the machine has."""


def layer_keys(config) -> list[str]:
    """The config's layer counts (num_hidden_layers, encoder_layers, decoder_layers, ...)."""
    return [k for k, v in vars(config).items() if k.endswith("layers") and isinstance(v, int) and not isinstance(v, bool)]


def meta_parameters(model_class, config) -> int:
    """The model's parameter count, built on the meta device: shapes only, no storage, no initialisation cost."""
    with torch.device("meta"), contextlib.redirect_stderr(open(os.devnull, "w")):  # noqa: SIM115
        return sum(p.numel() for p in model_class(config).parameters())


def count_parameters(model_class, config) -> int:
    """The parameter count of `model_class(config)`. Past DIRECT_LAYERS layers, each layer count is extrapolated
    from models of one and two layers (the layers of a stack are alike), so that a billion layers cost no time."""
    keys = layer_keys(config)
    if all(getattr(config, k) <= DIRECT_LAYERS for k in keys):
        return meta_parameters(model_class, config)
    small = config.__class__(**(config.to_dict() | {k: 1 for k in keys}))
    base = meta_parameters(model_class, small)
    total = base
    for key in keys:
        two = meta_parameters(model_class, small.__class__(**(small.to_dict() | {key: 2})))
        total += (getattr(config, key) - 1) * (two - base)
    return total


def available_bytes(device: torch.device) -> int | None:
    """The memory a run on `device` can have: the accelerator's free memory, or the host's available memory
    (/proc/meminfo's MemAvailable); None where neither can be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as info:
            fields = dict(line.split(":", 1) for line in info)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def step_bytes(config, parameters: int, tokens: int) -> int:
    """The floor of one training step's memory: parameters with their gradients and Adam's moments, the kept
    activations and the logits."""
    width = getattr(config, "hidden_size", 0) or 0
    layers = sum(getattr(config, k) for k in layer_keys(config)) or 1
    vocab = getattr(config, "vocab_size", 0) or 0
    activations = 4 * ACTIVATION_FACTOR * tokens * layers * width
    logits = 0 if getattr(config, "fused_loss", False) else 4 * tokens * vocab
    return BYTES_PER_PARAMETER * parameters + activations + logits


def check_fits(model_class, config, tokens: int, device: torch.device, what: str = "the model") -> int:
    """Refuse a model whose training step cannot fit in `device`'s memory; returns the parameter count."""
    parameters = count_parameters(model_class, config)
    needed, available = step_bytes(config, parameters, tokens), available_bytes(device)
    if available is not None and needed > available:
        where = "this machine" if device.type == "cpu" else str(device)
        sizes = ", ".join(f"{k}={getattr(config, k)}" for k in ("hidden_size", *layer_keys(config)) if hasattr(config, k))
        raise OutOfMemoryError(
            f"{what} ({sizes}) has {parameters:.3g} parameters and needs at least {needed / 2**30:,.1f} GiB to train "
            f"one step of {tokens} tokens, but {where} has {available / 2**30:,.1f} GiB available; make it "
            "smaller (model.hidden_size, model.num_hidden_layers) or the batch (training.batch_size, data.block_size)"
        )
    return parameters


def check_recipe_fits(recipe, device: torch.device, processes: int = 1) -> int | None:
    """`check_fits` for a recipe's fresh model (a model loaded from a folder was already allocated once), before
    its data is read: the vocabulary is the tokenizer's planned size. Returns the parameter count."""
    from hf_seq.data.tasks import TASKS
    from hf_seq.registry import family

    if recipe.model.get("from_pretrained"):
        return None
    fam, task = family(recipe.family), TASKS[recipe.task]
    kwargs = {k: v for k, v in recipe.model.items() if k != "from_pretrained"}
    kwargs.setdefault("vocab_size", 1 if task.series else recipe.tokenizer.vocab_size)
    fields = {f for f in fam.config_class.__dataclass_fields__}
    if "max_position_embeddings" in fields and "max_position_embeddings" not in kwargs:
        kwargs["max_position_embeddings"] = max(fam.config_class().max_position_embeddings, recipe.data.block_size)
    config = fam.config_class(**kwargs)
    t = recipe.training
    rows = max(1, t.batch_size // max(1, processes * t.gradient_accumulation_steps))
    return check_fits(fam.model_class(task.auto_class), config, rows * recipe.data.block_size, device)
