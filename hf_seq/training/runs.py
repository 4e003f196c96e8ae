"""What a training run hands back, and what pretraining (`hf_seq.training.pretraining`) and fine-tuning (`hf_seq.training.finetuning`)
share: the model built from a recipe, the checks made before any data is read, the torch threads, the files a run
folder holds (tokenizer, metrics, recipe, loss curve, card, checksums), a saved run opened again (`open_run`, the one
way every command and the studio read a run folder), a finished run found again, and `hf-seq evaluate` on a saved
folder.

A run is a value: `training.run(recipe)` returns a `RunResult` (the trained model on the device it trained on, its
tokenizer, its evaluations and summary) as well as writing its folder, so a study or a notebook uses what it trained
and never reads its own output files back.
"""

import dataclasses
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from hf_seq.baselines.ngram import CONFIG_NAME as NGRAM_CONFIG
from hf_seq.baselines.ngram import KneserNeyLM
from hf_seq.data import tasks
from hf_seq.errors import InvalidValueError, MissingFileError, RunExistsError
from hf_seq.hub.checksums import record_checksums, verify_checksums
from hf_seq.registry import FAMILIES
from hf_seq.registry import family as get_family
from hf_seq.training.recipes import Recipe, RecipeError


@dataclass(eq=False)
class RunResult(Mapping):
    """A finished run: `model` (the weights it kept: the selected or averaged ones where the recipe asks, in eval
    mode, on `device`), `tokenizer`, `evaluations` (one dict per periodic evaluation: step, tokens, seconds and the
    held-out metrics), `summary` (what metrics.json holds beside the evaluations) and `folder` (a Hub name as given,
    for a model `open_run` read from the Hub). A saved n-gram opened by `open_run` is a `KneserNeyLM` in `model`.

    It reads as its summary too (`result["eval_loss"]`), as `training.run`'s dict did."""

    model: torch.nn.Module
    tokenizer: object
    evaluations: list[dict]
    summary: dict
    folder: Path | str
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    prepared: tasks.Prepared | None = None  # the data it trained on; None for a run read back from its folder
    recipe: Recipe | None = None

    def __getitem__(self, key):
        return self.summary[key]

    def __iter__(self):
        return iter(self.summary)

    def __len__(self):
        return len(self.summary)


def finished_run(recipe: Recipe, device=None) -> RunResult | None:
    """The run already finished in `recipe.training.output_dir` with exactly this recipe, else None: a study stopped
    part-way and started again with the same command trains only what it had not finished. The saved recipe is read
    through the recipe loader before the comparison, so a run saved before a recipe key existed counts as that key's
    default (which is what it ran with); damaged weights, an unreadable recipe or a run continued from it that
    diverged (its metrics.json says where it stopped) count as not finished."""
    from hf_seq.training.recipes import load_recipe

    folder = Path(recipe.training.output_dir)
    needed = ("recipe.json", "metrics.json", "model.safetensors", "checksums.json")
    if not all((folder / name).exists() for name in needed):
        return None
    try:
        if "stopped" in json.loads((folder / "metrics.json").read_text()):  # a later run from here diverged
            return None
        tree = json.loads((folder / "recipe.json").read_text())
        saved = load_recipe(tree, command=tasks.TASKS[tree.get("task") or "causal_lm"].command)
        if saved.to_dict() != recipe.to_dict():
            return None
        return dataclasses.replace(open_run(folder, device=device), recipe=saved)
    except Exception:  # noqa: BLE001  (an unreadable recipe, damaged weights: train it again)
        return None


# ---------------------------------------------------------------------------------------------- a saved run, again
def check_run_folder(source, hub: bool = True) -> Path:
    """The refusals a run folder gets before anything is read, each one line naming it: a folder that holds no
    config.json (nor a saved n-gram's), a path that does not exist. With `hub`, a name user/model that is not a local
    path is left to the Hub."""
    source = str(source)
    path = Path(source)
    if path.exists() and not any((path / name).is_file() for name in ("config.json", NGRAM_CONFIG)):
        raise MissingFileError(
            f"{source} holds no config.json: give the output_dir of a run (hf-seq train, finetune or lineage) or a "
            "folder written by save_pretrained"
        )
    if not path.exists() and not (hub and not source.startswith((".", "/", "~")) and source.count("/") == 1):
        raise MissingFileError(f"{source} does not exist (give a run folder{' or a Hub name user/model' * hub})")
    return path


def open_run(source, accept: tuple[str, ...] | None = None, device=None, hub: bool = True) -> RunResult:
    """A saved run read back: the one way `hf-seq generate / evaluate / card / studio`, the studio and `finished_run`
    open a run folder (`source`; with `hub`, also a Hub name user/model).

    Refused, each in one line naming the folder (a `UserError`): a missing folder or one without config.json
    (`check_run_folder`); weights that differ from their recorded checksums, or without a record hold NaN or
    impossible values (`verify_checksums`); a model that is not of an hf-seq family; a model of an Auto class not in
    `accept`, the names of the classes the caller reads a folder with (transformers' Auto classes such as
    "AutoModelForCausalLM", and "KneserNeyLM" for a saved n-gram; None: any family's model, no n-gram), refused
    before its weights are read.

    Returns a `RunResult`: the model as the class it was saved as (`config.architectures`), in eval mode on `device`
    (default the CPU), or the `KneserNeyLM`; its tokenizer (None where the folder holds none: a model of real values);
    `summary` and `evaluations` from metrics.json (empty where there is none, as on the Hub); no recipe."""
    path = check_run_folder(source, hub)
    local = path.is_dir()
    if local:
        verify_checksums(path)
    if local and (path / NGRAM_CONFIG).is_file():
        _refuse_unless(accept, "KneserNeyLM", f"{source} holds an n-gram (KneserNeyLM)")
        model = KneserNeyLM.from_pretrained(path)
    else:
        model = _saved_model(str(source), accept).to(device or "cpu").eval()
    tokenizer = _saved_tokenizer(str(source), local)
    metrics = json.loads((path / "metrics.json").read_text()) if local and (path / "metrics.json").is_file() else {}
    evaluations = metrics.pop("evaluations", [])
    metrics.pop("learning_rates", None)  # history, as the evaluations: not the summary
    device = model.device if isinstance(model, torch.nn.Module) else torch.device("cpu")
    return RunResult(model, tokenizer, evaluations, metrics, path if local else source, device)


def _refuse_unless(accept, class_name: str, holds: str) -> None:
    """Refuse a model read with `class_name` unless `accept` names it (None: any family's model, no n-gram)."""
    if accept is None and class_name == "KneserNeyLM":
        raise InvalidValueError(f"{holds}; only a model of an hf-seq family can be read here")
    if accept is not None and class_name not in accept:
        raise InvalidValueError(f"{holds}; what can be read here: {', '.join(accept)}")


def _saved_model(source: str, accept):
    """The model in `source` as the class it was saved as, once its config names an hf-seq family and that class."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as error:  # no such Hub name, a config.json of no known model_type
        raise MissingFileError(f"{source}: config.json does not load ({str(error).splitlines()[0]})") from None
    fam = next((fam for fam in FAMILIES if fam.model_type == config.model_type), None)
    if fam is None:  # by model_type only: transformers' "bert" is not hf-seq's (hf_seq_bert)
        known = ", ".join(fam.model_type for fam in FAMILIES)
        raise InvalidValueError(f"{source} holds a {config.model_type!r} model, not one of hf-seq's families ({known})")
    saved = (config.architectures or [None])[0]
    auto_class = next((auto for auto, name in fam.models.items() if name == saved), None)
    if auto_class is None:
        raise InvalidValueError(
            f"{source}: config.json names the model class {saved!r}, which is not one of the {fam.name} family's "
            f"({', '.join(fam.models.values())}): save the model with save_pretrained"
        )
    _refuse_unless(accept, auto_class, f"{source} holds a {saved} ({auto_class})")
    try:
        return fam.model_class(auto_class).from_pretrained(source, config=config)
    except OSError as error:  # transformers' answer for a folder or Hub name that holds no weights
        raise MissingFileError(f"{source}: the weights do not load ({str(error).splitlines()[0]})") from None


def _saved_tokenizer(source: str, local: bool):
    """The run's tokenizer: a transformers tokenizer, or a MidiTok one (the music task: `music.MidiTokTokenizer`);
    None where it has none (a model of real values)."""
    from transformers import AutoTokenizer

    from hf_seq.data import music

    if local:
        if (Path(source) / "tokenizer_config.json").is_file():
            return AutoTokenizer.from_pretrained(source)
        return music.MidiTokTokenizer.from_pretrained(source) if music.holds_tokenizer(source) else None
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError):  # a Hub model of real values has no tokenizer files; a MidiTok one, its own
        pass
    try:
        return music.MidiTokTokenizer.from_pretrained(source)
    except Exception:  # noqa: BLE001  (no MidiTok tokenizer there, or MidiTok not installed)
        return None


# ---------------------------------------------------------------------------------------------- before the data
def check_precision(t) -> None:
    """fp16 needs a GPU (a CPU has no fp16 autocast worth the name)."""
    on_gpu = torch.cuda.is_available() or torch.backends.mps.is_available()
    if t.mixed_precision == "fp16" and not on_gpu:
        raise RecipeError("training.mixed_precision='fp16' needs a GPU; on a CPU use 'bf16' (or 'no')")


def check_batch_split(t, processes: int) -> None:
    """training.batch_size is the global batch: it must split evenly over the processes and accumulation steps."""
    if t.batch_size % (t.gradient_accumulation_steps * processes):
        raise InvalidValueError(
            f"training.batch_size ({t.batch_size}) must be divisible by gradient_accumulation_steps x processes "
            f"({t.gradient_accumulation_steps} x {processes}): it is the global batch"
        )


def refuse_earlier_run(output_dir: Path, earlier: list[str], overwrite: bool) -> None:
    """Never replace a finished or interrupted run by accident."""
    if earlier and not overwrite:
        raise RunExistsError(
            f"{output_dir} holds an earlier run ({', '.join(earlier)}): pass --resume to continue it, --overwrite to "
            "replace it, or choose another training.output_dir"
        )


def budget_note(t) -> str | None:
    """What will end a run with a wall-clock budget, said at its start."""
    if not t.max_seconds:
        return None
    if t.max_steps is None:
        return (
            f"training.max_seconds={t.max_seconds:g} is the budget (no step limit): the {t.scheduler} schedule follows "
            "the seconds elapsed"
        )
    return (
        f"training.max_steps={t.max_steps} and training.max_seconds={t.max_seconds:g} given: the run ends at "
        "whichever comes first"
    )


def choose_threads(requested: int | None = None) -> int:
    """Torch threads for a run: the recipe's, else one per core that other processes are not using right now.
    Per-step work on a few cores stalls at OpenMP barriers when another process holds one of them, so on a shared
    machine fewer threads are faster, and a busy machine slows a run in proportion instead of by 20x."""
    if requested:
        return requested
    cores = usable_cores()
    return max(1, min(cores, round(cores - busy_cores())))


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system has one, else the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def busy_cores(seconds: float = 0.3) -> float:
    """How many cores other processes keep busy: measured from /proc/stat over `seconds` where there is one (the
    1-minute load average lags a process that has just started), else the load average."""

    def sample():
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, total

    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
        return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / max(total1 - total0, 1))
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


# ---------------------------------------------------------------------------------------------- the model
def build_config(recipe: Recipe, tokenizer, **extra):
    """The recipe's model section, completed with the tokenizer's vocabulary size and special-token ids."""
    fam = get_family(recipe.family)
    fields = {f.name for f in dataclasses.fields(fam.config_class)}
    kwargs = {k: v for k, v in recipe.model.items() if k != "from_pretrained"} | extra
    if tokenizer is None:  # a model of real values (time_series): no vocabulary beyond the backbone's one unused row
        kwargs.setdefault("vocab_size", 1)
        return fam.config_class(**kwargs)
    kwargs.setdefault("vocab_size", len(tokenizer))
    for name in ("pad", "bos", "eos"):
        token_id = getattr(tokenizer, f"{name}_token_id", None)
        if f"{name}_token_id" in fields and token_id is not None:
            kwargs.setdefault(f"{name}_token_id", token_id)
    if "decoder_start_token_id" in fields and tokenizer.bos_token_id is not None:
        kwargs.setdefault("decoder_start_token_id", tokenizer.bos_token_id)
    if "max_position_embeddings" in fields and "max_position_embeddings" not in recipe.model:
        default = fam.config_class().max_position_embeddings
        kwargs["max_position_embeddings"] = max(default, recipe.data.block_size)
    return fam.config_class(**kwargs)


def build_model(recipe: Recipe, prepared: tasks.Prepared):
    """A fresh model from the recipe's config keys, or `model.from_pretrained: FOLDER` with a new task head."""
    model_class = get_family(recipe.family).model_class(prepared.task.auto_class)
    source = recipe.model.get("from_pretrained")
    if source:
        if Path(source).is_dir():  # damaged weights are named in one line, recorded checksums or not
            verify_checksums(Path(source))
        options = {k: v for k, v in recipe.model.items() if k != "from_pretrained"}
        try:
            return model_class.from_pretrained(source, **prepared.label_kwargs, **options)
        except OSError as error:  # transformers' answer for a folder or Hub name that holds no model
            raise MissingFileError(f"model.from_pretrained: {source!r} does not load: {error}") from error
    return model_class(build_config(recipe, prepared.tokenizer, **prepared.label_kwargs))


# ---------------------------------------------------------------------------------------------- the run folder
def save_run_files(recipe, output_dir: Path, tokenizer, config, summary: dict, history: dict, curve: dict) -> None:
    """Beside the saved model: the tokenizer (cut to the model's context), metrics.json (the summary and `history`,
    the run's evaluations or Trainer's log), recipe.json, loss_curve.png (`curve`: plot_loss_curve's arguments), the
    card, and the checksums `hf-seq evaluate / generate / push` check."""
    from hf_seq.hub.cards import write_card

    if tokenizer is not None:  # a model of real values has none
        context = getattr(config, "max_position_embeddings", None) or recipe.data.block_size
        tokenizer.model_max_length = context  # so truncation=True and the pipelines cut to the model's context
        tokenizer.save_pretrained(output_dir)
    (output_dir / "metrics.json").write_text(json.dumps({**summary, **history}, indent=2))
    (output_dir / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2))
    if curve["losses"]:
        plot_loss_curve(path=output_dir / "loss_curve.png", **curve)
    write_card(output_dir, recipe=recipe.to_dict(), metrics=summary)
    record_checksums(output_dir)


def plot_loss_curve(losses: list[float], evaluations: list[dict], path: Path, steps: list[int] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps or range(1, len(losses) + 1), losses, lw=1, label="training loss")
    scored = [e for e in evaluations if "eval_loss" in e]
    if scored:
        ax.plot([e["step"] for e in scored], [e["eval_loss"] for e in scored], "o-", label="held-out NLL")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def evaluate_folder(folder, recipe=None, overrides=(), device=None) -> dict:
    """The metrics a run reports, measured again on a saved model (opened by `open_run`): on the held-out (and test)
    data of its recipe, or of `recipe` with `overrides`. Works for every task, pretrained or fine-tuned: the same
    `tasks.evaluate` the run used."""
    from hf_seq.training.recipes import load_recipe

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    run = open_run(folder, device=device)
    if recipe is None:
        saved = Path(folder) / "recipe.json"
        if not saved.is_file():
            raise MissingFileError(f"{folder} has no recipe.json (not trained by hf-seq): pass --recipe")
        recipe = json.loads(saved.read_text())
    if not isinstance(recipe, dict):
        recipe = str(recipe)
    task_name = (recipe.get("task") if isinstance(recipe, dict) else None) or "causal_lm"
    command = tasks.TASKS[task_name].command if task_name in tasks.TASKS else "train"
    recipe = load_recipe(recipe, overrides, command=command)
    recipe.model = {k: v for k, v in recipe.model.items() if k != "from_pretrained"}
    prepared = tasks.prepare(recipe, tokenizer=run.tokenizer)
    torch.set_num_threads(choose_threads(recipe.training.threads))
    return tasks.evaluate(recipe, prepared, run.model, device)


__all__ = [
    "RunResult",
    "budget_note",
    "build_config",
    "build_model",
    "check_run_folder",
    "choose_threads",
    "evaluate_folder",
    "finished_run",
    "open_run",
    "plot_loss_curve",
    "usable_cores",
]
