"""Recipes: one YAML file = model config x data x schedule. Everything is checked before training starts: an unknown
key, a value of the wrong type or a family that cannot do the task fails with the key and what is allowed."""

import copy
import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hf_seq.errors import InvalidValueError, MissingFileError

SCHEDULERS = ("wsd", "cosine", "linear", "constant", "constant_with_warmup", "inverse_sqrt")
MIXED_PRECISION = ("no", "bf16", "fp16")
# training.select_by: the held-out metric model selection follows -> (its key in the metrics, whether higher is better)
SELECT_BY = {"loss": ("eval_loss", False), "bleu": ("eval_bleu", True)}


class RecipeError(InvalidValueError):
    """A recipe or an override that is not allowed: `hf-seq` prints the message without a traceback."""


@dataclass
class TokenizerRecipe:
    path: str | None = None  # an existing tokenizer folder; otherwise one is trained on the training data
    vocab_size: int = 4096
    min_frequency: int = 2
    style: str | None = None  # byte_level | bert; default from the task (bert for masked_lm)


@dataclass
class DataRecipe:
    # a name of hf_seq.data.corpora.EMBEDDED_DATA (the data built into hf-seq), local file(s) or a Hub dataset
    # name[:config]
    dataset: str | list[str] = "stdlib"
    validation: str | list[str] | None = None  # held-out file(s) or a Hub split; default: the dataset's own split,
    test: str | list[str] | None = None  # else eval_fraction of the documents (test: only when given or on the Hub)
    text_column: str = "text"
    label_column: str = "label"  # sequence classification
    tokens_column: str = "tokens"  # token classification: words and their tags
    tags_column: str = "tags"
    source_column: str = "source"  # seq2seq
    target_column: str = "target"
    source_language: str = "en"  # gettext pairs
    target_language: str = "fr"
    block_size: int = 128  # packed LM blocks; for seq2seq the longest source/target kept
    max_chars: int | None = 3_000_000  # stdlib corpus size
    max_examples: int | None = None
    eval_fraction: float = 0.05
    eval_examples: int | None = None  # a cap on the held-out examples (blocks, pairs, rows) scored; None: all
    mlm_probability: float = 0.15
    num_proc: int | None = None  # processes for tokenization (datasets.map)
    # Corpora larger than the disk: read data.dataset as a stream, tokenized and packed on the fly (hf_seq.data.streaming)
    streaming: bool = False
    shuffle: bool = True  # shuffle the blocks (cached: a permutation per epoch; streaming: through a buffer)
    shuffle_buffer: int = 1000  # streaming: blocks the shuffle draws from (memory: this many blocks per process)
    # seq2seq (hf-seq train): training batches filled up to this many padded tokens, rows x (longest source + longest
    # target), from rows sorted by length, as fairseq's --max-tokens does (hf_seq.data.token_budget_batches);
    # training.batch_size then only sizes the evaluation batches. None: batches of training.batch_size rows
    batch_tokens: int | None = None
    # time_series (hf_seq.data.series): the column holding the values is target_column; many series by id_column, each
    # ordered by timestamp_column; the test set is the last test_windows x model.prediction_length values of each
    # series; season: the seasonal period (52 for weekly data with a yearly cycle) of the seasonal-naive forecast
    # that MASE is scaled by (1: the naive forecast)
    id_column: str | None = None
    timestamp_column: str | None = None
    test_windows: int = 1
    season: int = 1
    # music (hf_seq.data.music): each training piece again transposed by each of these semitone shifts (augmentation)
    transpose: list[int] | None = None


DEFAULT_MAX_STEPS = 400  # the budget of a recipe that gives neither training.max_steps nor training.max_seconds


@dataclass
class TrainingRecipe:
    output_dir: str = "runs/model"
    seed: int = 0
    # The budget. max_seconds alone: the wall clock; both: the run ends at whichever comes first (and says which at its
    # start); neither: DEFAULT_MAX_STEPS steps. Under either, wsd, cosine, linear and constant are functions of the
    # run's progress through it (hf_seq.training.schedules.ProgressSchedule): nothing is planned from a speed.
    max_steps: int | None = None
    max_seconds: float | None = None
    threads: int | None = None  # torch threads; None: one per core that is not busy (measured at the start)
    compile: bool = False  # torch.compile the model for the training loop
    # Bengio et al. (2015) for models with `scheduled_sampling` (Bahdanau): {decay: linear | exponential |
    # inverse_sigmoid, k: ..., c: ..., minimum: ...}; see hf_seq.training.schedules.teacher_forcing_probability
    scheduled_sampling: dict | None = None
    batch_size: int = 16  # the global batch: split over processes and accumulation steps
    gradient_accumulation_steps: int = 1
    learning_rate: float = 1e-3
    weight_decay: float = 0.1
    adam_beta2: float = 0.95
    warmup_steps: int = 20
    scheduler: str | None = None  # None: "wsd" under a seconds budget alone, else "cosine"
    decay_fraction: float = 0.2  # wsd: the share of the budget its decay takes (0: none, a run that can continue)
    max_grad_norm: float = 1.0
    # A step whose training loss is not finite, or above this (nats per token; None: only non-finite), stops the run
    # with the reason, keeping the last finite weights: far above any loss a model that is learning reports
    max_loss: float | None = 1.0e4
    mixed_precision: str = "no"
    eval_every: int = 100
    save_every: int = 100
    keep_checkpoints: int = 2
    log_with: str | None = "auto"  # an accelerate tracker (tensorboard, wandb, ...); auto: TensorBoard if installed
    # Model selection: "loss" keeps the weights of the evaluation with the lowest held-out loss (eval_loss) and saves
    # those as the model, with best_step in the metrics; patience: stop after this many evaluations without a better one
    select_by: str | None = None  # "loss" (eval_loss, lowest) or "bleu" (eval_bleu, highest: seq2seq)
    patience: int | None = None
    # The saved model is the mean of the weights of the last N evaluations (with select_by: of the N evaluations
    # ending at the best one), as fairseq's average_checkpoints.py and Marian do; the steps are in the metrics
    average_checkpoints: int | None = None
    # How seq2seq models decode, in the BLEU of the evaluations and by default in the saved folder's generation config
    # (hf-seq evaluate / generate, pipeline("translation")): beam search with a length penalty (transformers': the
    # beam's log-probability / length ** penalty), each output at most a x source tokens + b long (fairseq's
    # max_len_a / max_len_b), or a fixed generation_max_new_tokens when one is given
    generation_num_beams: int = 5
    generation_length_penalty: float = 1.0
    generation_max_length_a: float = 1.2
    generation_max_length_b: int = 10
    generation_max_new_tokens: int | None = None
    # Forbid 1 to this many whole words repeated back to back ("de entrada de entrada") in the translations of the
    # evaluations and `hf-seq evaluate` (tasks.translate; models.seq2seq.BackToBackRepeatBlock); 0: off
    generation_block_repeats: int = 0

    def __post_init__(self):
        if self.max_steps is None and self.max_seconds is None:
            self.max_steps = DEFAULT_MAX_STEPS
        if self.scheduler is None:
            self.scheduler = "wsd" if self.max_seconds and not self.max_steps else "cosine"


@dataclass
class Recipe:
    family: str
    task: str | None = None
    model: dict = field(default_factory=dict)
    tokenizer: TokenizerRecipe = field(default_factory=TokenizerRecipe)
    data: DataRecipe = field(default_factory=DataRecipe)
    training: TrainingRecipe = field(default_factory=TrainingRecipe)
    # extra model-card fields: license, language, description, limitations; cpu_minutes: about how long the recipe
    # trains on a laptop CPU, for `hf-seq recipes` (unset: a recipe sized for GPUs)
    card: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check_type(key: str, value, annotation):
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        if isinstance(value, list):  # a list is checked item by item against the list option
            options = [o for o in options if typing.get_origin(o) is list] or options
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check_type(key, value, option)
            except RecipeError as error:
                errors.append(error)
        raise errors[0]
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return _in_range(key, float(value))
    if annotation is float and isinstance(value, str):  # "nan", "inf": YAML reads them as text, float() does not
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is not None:
            return _in_range(key, number)
    if annotation is dict and isinstance(value, dict):
        return value
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(annotation)
        return [_check_type(f"{key}[{i}]", v, item) for i, v in enumerate(value)]
    if annotation in (int, float, str, bool) and type(value) is annotation:
        return _in_range(key, value)
    hint = " (YAML reads no/yes/on/off as booleans: quote the value, e.g. 'no')" if isinstance(value, bool) else ""
    raise RecipeError(
        f"recipe key {key!r}: expected {getattr(annotation, '__name__', annotation)}, got {value!r}{hint}"
    )


# The largest integer a tensor index or size can hold (int64): a larger value cannot mean a size, a count or a step.
LARGEST_INT = 2**63 - 1


def _in_range(key: str, value):
    """A number a recipe can mean: finite (a NaN weight decay or an infinite learning rate trains to NaN weights and
    exits 0), and an integer a tensor can index."""
    if isinstance(value, float) and not math.isfinite(value):
        raise RecipeError(f"recipe key {key!r}: {value!r} is not a finite number; give a finite value")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > LARGEST_INT:
        raise RecipeError(
            f"recipe key {key!r}: {value} is beyond what a tensor can index (at most 2**63 - 1 = {LARGEST_INT})"
        )
    return value


def check_model_numbers(model: dict, prefix: str = "model") -> None:
    """The model section's numbers, which its config checks for type and sign but not for sense: finite, and
    integers a tensor can index (nested sections included)."""
    for key, value in model.items():
        if isinstance(value, dict):
            check_model_numbers(value, f"{prefix}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, int | float):
                    _in_range(f"{prefix}.{key}[{i}]", item)
        elif isinstance(value, int | float):
            _in_range(f"{prefix}.{key}", value)


def _build(cls, values: dict, prefix: str):
    if not isinstance(values, dict):
        raise RecipeError(f"recipe key {prefix.rstrip('.') or 'root'!r}: expected a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise RecipeError(
            f"unknown recipe key(s) {[prefix + k for k in unknown]}; allowed under {prefix.rstrip('.') or 'the top level'}: {sorted(fields)}"
        )
    kwargs = {}
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        annotation = hints[name]
        if dataclasses.is_dataclass(annotation):
            kwargs[name] = _build(annotation, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _check_type(prefix + name, value, annotation)
    missing = [
        n
        for n, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and n not in kwargs
    ]
    if missing:
        raise RecipeError(f"recipe is missing required key(s) {[prefix + m for m in missing]}")
    return cls(**kwargs)


class RecipeLoader(yaml.SafeLoader):
    """YAML as recipes read it: a number in exponent notation is a float with or without a dot (`1e-3`, `1e30`), as
    in YAML 1.2 and JSON; PyYAML follows YAML 1.1, which reads those as strings, so `learning_rate: 1e-3` or
    `model.initializer_range=1e30` would reach the checks as text."""


RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def read_yaml(text: str):
    """A recipe, or one override's value, read as YAML with `RecipeLoader`."""
    return yaml.load(text, Loader=RecipeLoader)  # noqa: S506  (a SafeLoader: plain data only)


def _set_dotted(tree: dict, dotted: str, raw: str) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise RecipeError(f"override {dotted}: {key!r} is not a section")
    try:
        value = read_yaml(raw)  # "3" -> 3, "1e-3" -> 0.001, "true" -> True, "null" -> None
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or error
        raise RecipeError(f"override {dotted}={raw}: the value is not valid YAML ({problem})") from None
    if isinstance(value, bool) and raw.lower() not in ("true", "false"):
        value = raw  # YAML 1.1 reads no/yes/on/off as booleans: mixed_precision=no means the string
    node[keys[-1]] = value


def parse_overrides(items, what: str = "override", example: str = "training.max_steps=100") -> dict:
    """`key.sub=value` items as a tree, each value read as YAML (as overrides of a recipe are)."""
    tree = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise RecipeError(f"{what} {item!r} is not of the form key=value (e.g. {example})")
        _set_dotted(tree, key.strip(), value.strip())
    return tree


def build_section(cls, values: dict, prefix: str):
    """A dataclass from `values`, checked as a recipe section is: unknown keys and wrong types name the key."""
    return _build(cls, values, prefix)


def check_value(key: str, value, annotation):
    """`value` checked (and converted where YAML allows, e.g. an int for a float) against `annotation`."""
    return _check_type(key, value, annotation)


def resolve_tracker(log_with: str | None) -> str | None:
    """The tracker to log to: `auto` means TensorBoard when it is installed, else none; a named tracker must be
    installed (checked before training starts)."""
    import importlib.util

    if log_with in (None, "none"):
        return None
    if log_with == "auto":
        return "tensorboard" if importlib.util.find_spec("tensorboard") else None
    from accelerate.utils import is_tensorboard_available, is_wandb_available

    available = {"tensorboard": is_tensorboard_available, "wandb": is_wandb_available}
    if log_with in available and not available[log_with]():
        raise RecipeError(f"training.log_with={log_with!r} but {log_with} is not installed: pip install {log_with}")
    return log_with


# The recipes, launch configs and Slurm script shipped in the package (a checkout's top-level recipes/ links here)
SHIPPED = Path(__file__).parents[1] / "recipe_files"


def shipped_files() -> dict[str, Path]:
    """Every shipped file by name: the recipes (`gpt-tiny`), the accelerate launch configs (`accelerate/fsdp`) and
    the Slurm script (`slurm/train-multinode`)."""
    files = sorted(p for p in SHIPPED.rglob("*") if p.is_file() and p.suffix in (".yaml", ".sbatch"))
    return {p.relative_to(SHIPPED).with_suffix("").as_posix(): p for p in files}


def shipped_recipes() -> dict[str, Path]:
    """The shipped recipes by name (`hf-seq train gpt-tiny`): the YAML files at the top of the folder."""
    return {name: path for name, path in shipped_files().items() if "/" not in name}


def find_recipe(name_or_path) -> Path:
    """The recipe file a command names: a file that exists wins, else the shipped recipe of that name (`gpt-tiny`
    or `gpt-tiny.yaml`; a path with a folder in it is a file or nothing)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.parent != Path("."):
        raise MissingFileError(f"recipe not found: {path}")
    shipped = shipped_recipes()
    name = path.stem if path.suffix == ".yaml" else path.name
    if name in shipped:
        return shipped[name]
    raise MissingFileError(
        f"recipe not found: {path} is neither a file nor a shipped recipe (shipped: {', '.join(shipped)})"
    )


def recipe_command(tree: dict) -> str:
    """The command that runs a recipe's task: `finetune` for the Trainer's tasks, else `train`."""
    from hf_seq.data.tasks import TASKS

    task = TASKS.get(tree.get("task"))
    return task.command if task else "train"


def load_recipe(path_or_dict, overrides: list[str] | tuple[str, ...] = (), command: str = "train") -> Recipe:
    """Read a recipe (YAML path or dict), apply `key.sub=value` overrides, and check it completely for `command`
    (`train`: pretraining tasks; `finetune`: fine-tuning tasks)."""
    if isinstance(path_or_dict, dict):
        tree = copy.deepcopy(path_or_dict)
    else:
        path = find_recipe(path_or_dict)
        try:
            tree = read_yaml(path.read_text()) or {}
        except yaml.YAMLError as error:
            mark, problem = getattr(error, "problem_mark", None), getattr(error, "problem", None) or error
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            raise RecipeError(f"recipe {path} is not valid YAML{where}: {problem}") from None
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise RecipeError(f"override {item!r} is not of the form key=value (e.g. training.max_steps=100)")
        _set_dotted(tree, key.strip(), value.strip())
    recipe = _build(Recipe, tree, "")
    validate(recipe, command)
    return recipe


def validate(recipe: Recipe, command: str = "train") -> None:
    from hf_seq.registry import family as get_family

    try:
        fam = get_family(recipe.family)
    except KeyError as error:
        raise RecipeError(str(error.args[0])) from None
    from hf_seq.data.tasks import TASKS

    command_tasks = {name: entry for name, entry in TASKS.items() if entry.command == command}
    tasks = [name for name, entry in command_tasks.items() if entry.auto_class in fam.models]
    if recipe.task is None:
        recipe.task = tasks[0] if tasks else None
    if recipe.task not in command_tasks:
        other = "finetune" if command == "train" else "train"
        hint = f" ({recipe.task!r} is a task of `hf-seq {other}`)" if TASKS.get(recipe.task) else ""
        raise RecipeError(
            f"recipe key 'task': {recipe.task!r} is not a task of `hf-seq {command}`{hint}; allowed values: "
            f"{list(command_tasks)}"
        )
    if recipe.task not in tasks:
        raise RecipeError(f"family {fam.model_type!r} cannot do task {recipe.task!r}; it can do: {tasks}")
    if recipe.data.batch_tokens is not None:
        check_batch_tokens(recipe, TASKS)
    if recipe.data.streaming and TASKS[recipe.task].packing is None:
        packed = [name for name, entry in TASKS.items() if entry.packing]
        raise RecipeError(
            f"recipe key 'data.streaming': true streams packed blocks, for the tasks {packed}; task {recipe.task!r} "
            "reads rows: set data.streaming false"
        )
    t = recipe.training
    if t.select_by not in (None, *SELECT_BY):
        raise RecipeError(f"recipe key 'training.select_by': {t.select_by!r}; allowed values: {list(SELECT_BY)}")
    if t.select_by == "bleu" and not TASKS[recipe.task].generates:
        raise RecipeError(
            f"recipe key 'training.select_by': 'bleu' scores generated translations; task {recipe.task!r} generates "
            "none: use 'loss'"
        )
    if t.average_checkpoints is not None and (isinstance(t.average_checkpoints, bool) or t.average_checkpoints < 2):
        raise RecipeError(
            f"recipe key 'training.average_checkpoints': {t.average_checkpoints!r}; a number of evaluations' weights "
            ">= 2 to average (leave it unset for the last weights)"
        )
    if t.patience is not None and (t.patience < 1 or t.select_by is None):
        raise RecipeError(
            f"recipe key 'training.patience': {t.patience!r}; a number of evaluations >= 1, with training.select_by set"
        )
    if t.scheduler not in SCHEDULERS:
        raise RecipeError(f"recipe key 'training.scheduler': {t.scheduler!r}; allowed values: {list(SCHEDULERS)}")
    if not 0 <= t.decay_fraction <= 1:
        raise RecipeError(
            f"recipe key 'training.decay_fraction' must be in [0, 1] (the share of the budget the decay takes), got "
            f"{t.decay_fraction}"
        )
    if t.mixed_precision not in MIXED_PRECISION:
        raise RecipeError(
            f"recipe key 'training.mixed_precision': {t.mixed_precision!r}; allowed values: {list(MIXED_PRECISION)}"
        )
    for name in ("batch_size", "gradient_accumulation_steps", "eval_every", "save_every"):
        if getattr(t, name) <= 0:
            raise RecipeError(f"recipe key 'training.{name}' must be positive, got {getattr(t, name)}")
    d = recipe.data
    if d.block_size < 2:  # a one-token block has nothing to predict: its loss would be 0 / 0
        raise RecipeError(
            f"recipe key 'data.block_size' must be at least 2 (a token to read and one to predict), got {d.block_size}"
        )
    smallest = 256 + 4  # a byte-level BPE vocabulary: the 256 byte symbols and the special tokens
    if recipe.tokenizer.path is None and recipe.tokenizer.vocab_size < smallest:
        raise RecipeError(
            f"recipe key 'tokenizer.vocab_size' must be at least {smallest} (the 256 byte symbols and the special "
            f"tokens of a byte-level BPE tokenizer, and more to learn any merges), got {recipe.tokenizer.vocab_size}"
        )
    for key, value, low, high in (
        ("data.eval_fraction", d.eval_fraction, 0.0, 1.0),
        ("data.mlm_probability", d.mlm_probability, 0.0, 1.0),
    ):
        if not low < value < high:
            raise RecipeError(f"recipe key {key!r} must be in the open interval ({low}, {high}), got {value}")
    for key, value in (
        ("data.block_size", d.block_size),
        ("data.eval_examples", d.eval_examples),
        ("data.max_examples", d.max_examples),
        ("data.max_chars", d.max_chars),
        ("data.num_proc", d.num_proc),
        ("data.shuffle_buffer", d.shuffle_buffer),
        ("training.threads", t.threads),
        ("training.max_steps", t.max_steps),
        ("training.max_seconds", t.max_seconds),
        ("training.keep_checkpoints", t.keep_checkpoints),
        ("training.generation_max_new_tokens", t.generation_max_new_tokens),
        ("training.generation_num_beams", t.generation_num_beams),
    ):
        if value is not None and value <= 0:
            raise RecipeError(f"recipe key {key!r} must be positive, got {value}")
    for key, value in (
        ("training.learning_rate", t.learning_rate),
        ("training.weight_decay", t.weight_decay),
        ("training.generation_max_length_a", t.generation_max_length_a),
        ("training.generation_max_length_b", t.generation_max_length_b),
        ("training.generation_block_repeats", t.generation_block_repeats),
    ):
        if value < 0:
            raise RecipeError(f"recipe key {key!r} must not be negative, got {value}")
    if not 0 <= t.adam_beta2 < 1:
        raise RecipeError(f"recipe key 'training.adam_beta2' must be in [0, 1), got {t.adam_beta2}")
    if command == "finetune" and t.max_steps is None:
        raise RecipeError(
            "recipe key 'training.max_steps': hf-seq finetune needs it (transformers' Trainer plans its schedule in "
            f"steps); training.max_seconds={t.max_seconds:g} then ends the run if it comes first"
        )
    if t.batch_size % t.gradient_accumulation_steps:
        raise RecipeError(
            f"training.batch_size ({t.batch_size}) must be divisible by gradient_accumulation_steps "
            f"({t.gradient_accumulation_steps}): it is the global batch"
        )
    resolve_tracker(t.log_with)  # a named tracker must be installed
    if t.scheduled_sampling:
        from hf_seq.training.schedules import scheduled_sampling_probability

        if "scheduled_sampling" not in {f.name for f in dataclasses.fields(fam.config_class)}:
            raise RecipeError(f"recipe key 'training.scheduled_sampling': {fam.config} has no scheduled sampling")
        try:
            scheduled_sampling_probability(0, **t.scheduled_sampling)
        except (TypeError, ValueError) as error:
            raise RecipeError(f"recipe key 'training.scheduled_sampling' {t.scheduled_sampling}: {error}") from None
    style = recipe.tokenizer.style
    if style not in (None, "byte_level", "bert"):
        raise RecipeError(f"recipe key 'tokenizer.style': {style!r}; allowed values: ['byte_level', 'bert']")
    allowed = {f.name for f in dataclasses.fields(fam.config_class)} | {"attn_implementation", "num_labels"}
    if command == "finetune":
        allowed.add("from_pretrained")
    allowed |= set(getattr(fam.config_class, "option_groups", {})) | set(getattr(fam.config_class, "attribute_map", {}))
    if TASKS[recipe.task].series:  # the forecasting fields, checked as the head will check them (prediction_length set)
        from hf_seq.data.series import prediction_settings

        prediction_settings(recipe.model)
    else:  # the configs' forecasting fields are for the time_series task only
        from hf_seq.models.prediction import PREDICTION_DEFAULTS

        allowed -= set(PREDICTION_DEFAULTS)
    unknown = sorted(set(recipe.model) - allowed)
    if unknown:
        import difflib

        guesses = {k: difflib.get_close_matches(k, allowed, n=1, cutoff=0.8) for k in unknown}
        hint = "; ".join(f"did you mean 'model.{g[0]}' for 'model.{k}'?" for k, g in guesses.items() if g)
        raise RecipeError(
            f"unknown option(s) {['model.' + k for k in unknown]} for {fam.config}"
            + (f"; {hint}" if hint else "")
            + f"; allowed: {sorted(allowed)}"
        )
    check_model_numbers(recipe.model)
    # the model section must build a valid config (its own checks name the option and the allowed values)
    try:
        fam.config_class(**{k: v for k, v in recipe.model.items() if k != "from_pretrained"})
    except (TypeError, ValueError) as error:
        raise RecipeError(f"recipe section 'model' is not a valid {fam.config}: {error}") from None


def check_batch_tokens(recipe: Recipe, tasks: dict) -> None:
    """`data.batch_tokens` is a positive number of tokens, for sentence pairs trained by `hf-seq train`: packed blocks
    are all data.block_size tokens long, and transformers' Trainer (`hf-seq finetune`) batches by rows."""
    value, task = recipe.data.batch_tokens, tasks[recipe.task]
    # sentence pairs: a series' windows are all one length too
    allowed = [
        n
        for n, entry in tasks.items()
        if entry.command == "train" and not (entry.packing or entry.series or entry.music)
    ]
    key = f"recipe key 'data.batch_tokens': {value!r}"
    if value <= 0:
        raise RecipeError(
            f"{key}; allowed: a positive number of padded tokens per training batch, or null (batches of "
            "training.batch_size rows)"
        )
    if recipe.data.streaming:
        raise RecipeError(
            f"{key} with data.streaming: true; streamed blocks are all data.block_size tokens long: use "
            f"training.batch_size (data.batch_tokens is for the tasks {allowed})"
        )
    if recipe.task not in allowed:
        why = "is trained by transformers' Trainer, which batches training.batch_size rows"
        if task.packing or task.music:
            why = "packs into blocks of data.block_size tokens, all one length: use training.batch_size"
        elif task.series:
            why = "cuts windows of one length (context and prediction): use training.batch_size"
        raise RecipeError(
            f"{key} is for the tasks {allowed} (sentence pairs of different lengths); task {recipe.task!r} {why}"
        )
