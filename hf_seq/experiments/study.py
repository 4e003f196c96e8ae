"""The study runner: a study (the language-model lineage in `lineage.py`, the translation lineage in
`lineage_translation.py`, the forecasting lineage in `lineage_forecasting.py`) is a table of member rows, its
settings, its own options and a few hooks; this file owns the flow they share. One loop over sizes x members x tuning
trials x seeds under one budget (tokens, seconds or FLOPs), with parameter-matched sizes, one data preparation for
every member, reuse of finished runs, the seeds' summary and the ordering statement against the lectures' order.

A study is declared in one place, its module:
- its members: one `Member` row each (name, title, short name, family, config function, knobs, help line); the
  command line's `--members` help and choices, the reports' first line and the lectures' order come from the rows;
- its own options: an `Options` subclass whose fields are declared with `option(default, help)`; `hf-seq lineage`
  makes a flag of each (`--max-chars`), with that help and default;
- its titles: `title` (in each member's card), `report_title` and `about` (the `--task` help), `corpus_help`;
- its records: every member's entry in lineage.json is a `Record` (the fields every study and every kind of member
  shares) and the figures the study's scoring adds.
A new member is one row; a new study is one file and one line in `STUDIES`.

A study's hooks, each a method of its `Study` subclass:
- `prepare(s, options, output_dir)`: the data every member shares (`StudyData`), prepared once;
- `flops(model, data, s)` and `step_batch(data, s, vocab_size)`: a member's FLOPs per token and a batch to time a step;
- `member_recipe(data, s, row, plan, score)`: the recipe keys its members add to the shared ones;
- `score(row, run, plan, data, s)`: the figures of a trained member (`run` is its `RunResult`);
- `fit_fixed(row, data, s, given, output_dir)`: the record of a member that is not trained (the n-gram);
- `describe(data, s, records)` and `report(result, data, output_dir, title)`: lineage.json's fields and lineage.md.
"""

import copy
import dataclasses
import importlib
import json
import math
import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hf_seq.errors import InvalidValueError
from hf_seq.experiments import sizing

TUNE_FRACTION = 0.25  # a tuning trial trains on this share of the member's budget
AUTO = "auto"  # --sizes auto: each member at the size a search inside its budget chose (sizing.py)
OVERHEAD = 1.15  # a member's wall-clock time over its training seconds, until one is measured (--study-seconds)
RESERVE = 5.0  # seconds a scored run spends outside its training (setup, test scoring, saving), until measured
OVERSIZE = 1.25  # a member whose smallest size passes the target by more than this is said to be unmatched
EPOCH_FOR_DROPOUT = 1.0  # past this many epochs of the training text, dropout is on by default
DROPOUT_PAST_AN_EPOCH = 0.1
REGRET_SLICES = 4  # --regret: the three sizes of a seed train in this many slices each, in turn
REGRET_NOTE = " A regret run: trained in turns with the other sizes, a slice at a time."


@dataclass(frozen=True)
class Member:
    """One row of a study: its name on the command line, its title in the reports, its family (None for a member
    that is not a neural model, fitted by the study's `fit_fixed`), `config(s, size, dropout, **knobs)`, the family's
    config keys of the member whose free size parameter is `size` (the one `matched_size` searches), its own knobs
    (`quick`: their values under --quick), the line `--members` shows, whether the lectures rank it level with the
    row before it (Bahdanau's and Luong's scores), and `short`: its name in the report's first line (default: its
    name)."""

    name: str
    title: str
    family: str | None
    config: Callable[..., dict] | None = None
    knobs: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)
    help: str = ""
    level_with_previous: bool = False
    short: str = ""

    @property
    def heading(self) -> str:
        return self.short or self.name

    def knobs_for(self, mode: str) -> dict:
        return self.knobs | (self.quick if mode == "quick" else {})

    def model_keys(self, s, size: int, dropout: float = 0.0, knobs: dict | None = None) -> dict:
        """The family's config keys at `size`, with the knobs of the settings `s` (else the row's defaults), and
        `knobs` over both (a plan's own: fewer layers below the member's smallest shape)."""
        return self.config(s, size, dropout, **(self.knobs | s.knobs.get(self.name, {}) | (knobs or {})))


@dataclass
class Settings:
    """What every member of a study shares (a study's settings subclass this): the tokenizer's vocabulary, the block
    (or longest pair side) in tokens, the batch, the embedding width, the non-embedding parameters of a member, the
    optimizer's peak rate and warm-up, the evaluations' interval and the default token budget. `knobs`: each
    member's own settings, from its row."""

    vocab_size: int
    block_size: int
    batch_size: int
    width: int
    target: int
    learning_rate: float
    warmup_steps: int
    eval_every: int
    budget_tokens: int | None
    knobs: dict = field(default_factory=dict)


def option(default=None, help: str = ""):
    """A study's own option: a field of its `Options` subclass with its default and the help of its flag."""
    return field(default=default, metadata={"help": help})


@dataclass
class Options:
    """What every study's command line (`hf-seq lineage`) takes: the mode, the corpus and its held-out files, one
    budget, the members, sizes, seeds and tuning trials, and `set`: KEY=VALUE overrides of the settings (`width=256`)
    and of a member's knobs (`gru.layers=3`), read as recipe values are. A study's own options are the fields of its
    subclass, declared with `option(default, help)`; `Study.make_options` builds and checks them."""

    quick: bool = False
    output_dir: str | Path = "lineage"
    corpus: str | list | None = None  # None: the study's default corpus
    validation: str | None = None
    test: str | None = None
    budget_tokens: int | None = None
    budget_seconds: float | None = None
    budget_flops: float | None = None
    study_seconds: float | None = None  # the whole study's seconds, shared by its members (data and n-gram included)
    regret: int = 0  # N: also train each searched member at half, 1 and 2 times its chosen size, N seeds: the regret
    jobs: int = 1  # --regret's members measured side by side in this many processes
    members: tuple | None = None  # None: every member
    sizes: list | str | None = None  # "auto": chosen by the budget (the default under seconds or FLOPs); None: target
    seeds: int = 1
    tune: int = 0
    threads: int | None = None
    progress: bool = True
    set: tuple = ()

    @property
    def budgets(self) -> dict:
        return dict(tokens=self.budget_tokens, seconds=self.budget_seconds, flops=self.budget_flops,
                    study=self.study_seconds)  # fmt: skip


def own_fields(options_class: type) -> tuple[dataclasses.Field, ...]:
    """The fields a study's options class adds to `Options`: its own options."""
    shared = {f.name for f in dataclasses.fields(Options)}
    return tuple(f for f in dataclasses.fields(options_class) if f.name not in shared)


@dataclass
class Record:
    """One member's run as lineage.json keeps it, the same fields for every study and every kind of member (a trained
    network, the n-gram, a classical forecaster; None where a field does not apply to it), followed by the figures
    its study's scoring adds (`to_dict`). The runner adds `target`, `seed` and the tuning `trials`."""

    name: str
    title: str
    family: str | None  # None: a member that is not trained (fitted by the study's `fit_fixed`)
    params: int | None = None
    non_embedding_params: int | None = None
    flops_per_token: float | None = None
    learning_rate: float | None = None
    dropout: float | None = None
    best_step: int | None = None
    epochs: float | None = None
    steps: int | None = None
    train_tokens: int | None = None  # what the budget counts: tokens, a pair's tokens or values
    seconds: float = 0.0
    config: dict | None = None  # the family's config keys
    curve: list = field(default_factory=list)  # the periodic evaluations (a fit: its refits on growing prefixes)
    final_eval_loss: float | None = None
    selected_eval_loss: float | None = None  # the evaluation kept (training.select_by: the lowest validation loss)
    best_eval_loss: float | None = None  # the lowest validation loss of its evaluations (another select_by: not kept)
    trials: list = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float | None:
        return None if self.train_tokens is None else self.train_tokens / max(self.seconds, 1e-9)

    def to_dict(self, figures: dict) -> dict:
        """The record with its tokens per second and the study's `figures` (a field named again is refused)."""
        record = dataclasses.asdict(self) | {"tokens_per_second": self.tokens_per_second}
        clash = sorted(record.keys() & figures.keys())
        if clash:
            raise ValueError(f"{self.name}: the study's figures {clash} are Record fields; set them on the Record")
        return record | figures


@dataclass
class StudyData:
    """The data every member shares, prepared once (a study's data subclass this): `prepared` holds the training
    split, the whole validation split and the test split; `recipe` is the shared recipe it was prepared from; a token
    is what the budget counts (`tokens_per_step` of them a step)."""

    prepared: object
    recipe: object
    tokenizer_dir: Path
    corpus_name: str
    train_tokens: int
    tokens_per_step: int
    eval_examples: int  # the validation examples the runs' periodic evaluations score
    names: dict  # how the reports name the validation and test splits

    @property
    def vocab_size(self) -> int:
        """The shared tokenizer's vocabulary; 1 for a study of real values (no tokenizer, no vocabulary)."""
        tokenizer = self.prepared.tokenizer
        return len(tokenizer) if tokenizer is not None else 1


@dataclass
class Plan:
    """A member at a size: its size parameter, parameter counts, FLOPs per token and steps under the budget (None: a
    seconds budget leaves them to the run), and whether it will pass an epoch (dropout on by default)."""

    size: int
    params: int
    non_embedding: int
    flops: float
    steps: int | None
    past_epoch: bool
    step_seconds: float | None = None  # a timed training step, under a seconds budget
    knobs: dict = field(default_factory=dict)  # its own knobs over the member's: fewer layers for a small target


@dataclass
class Candidate:
    """One candidate of a member's size search: its plan and settings, its name (its non-embedding parameters, and
    its learning rate and dropout when several are tried), how far it has trained and its last branch."""

    plan: Plan
    settings: dict
    tuned: bool = False
    reached: float = 0.0
    branch: tuple[float, float] | None = None  # (t, loss) of its last decay branch

    @property
    def name(self) -> str:
        lr, dropout = self.settings["learning_rate"], self.settings["dropout"]
        return f"{self.plan.non_embedding}" + (f"-lr{lr:.3g}-dropout{dropout:g}" if self.tuned else "")


class Study:
    """A study's table and hooks (see the module's docstring); `run(options)` is the whole study."""

    name: str  # `hf-seq lineage --task NAME`: its key in STUDIES
    rows: tuple[Member, ...]
    settings: dict  # "default" and "quick": Settings
    options_class: type = Options  # its own options: the fields an Options subclass adds
    auto_class: str
    title: str  # in each member's card: "the {title}"
    report_title: str  # lineage.md's first line: "The {report_title}: " and the members' short names
    about: str  # what it compares, in `--task`'s help
    default_corpus: str
    corpus_help: str  # the default corpus, in `--corpus`'s help
    size_limit: int = 256  # the largest size parameter matched_size tries, in embedding widths
    files: str = ""  # what it writes, said at the end of the command
    higher_is_better: bool = False
    budget_unit: str = "training tokens"
    trial_keys: tuple[str, ...] = ("eval_loss", "steps")  # what a tuning trial's record keeps of its run
    curve_keys: tuple[str, ...] = ("step", "seconds", "eval_loss")  # what the curves keep of each evaluation

    # ---------------------------------------------------------------------------------------- the table
    @property
    def members(self) -> tuple[str, ...]:
        return tuple(row.name for row in self.rows)

    @property
    def order(self) -> tuple:
        """The lectures' order, worst first; a tuple in it is a group the lectures do not rank."""
        groups = []
        for row in self.rows:
            if row.level_with_previous and groups:
                groups[-1] = (*(groups[-1] if isinstance(groups[-1], tuple) else (groups[-1],)), row.name)
            else:
                groups.append(row.name)
        return tuple(groups)

    def heading(self, names) -> str:
        """lineage.md's first line: the study and the short names of the members `names`, in the rows' order."""
        names = set(names)
        return f"# The {self.report_title}: " + ", ".join(row.heading for row in self.rows if row.name in names)

    @property
    def default_budget(self) -> str:
        """The token budget without --budget-*, in words (`--budget-tokens`' help)."""
        return f"{self.settings['default'].budget_tokens:,} {self.budget_unit}"

    def make_options(self, **values) -> Options:
        """This study's options from `values` (the command line's, or `run(**options)`'s); an option it does not take
        is refused, naming the studies that take it."""
        allowed = {f.name for f in dataclasses.fields(self.options_class)}
        for name, value in values.items():
            if name in allowed:
                continue
            flag = "--" + name.replace("_", "-")
            takers = [other for other in STUDIES if name in get_study(other).own_options]
            own = ", ".join("--" + o.replace("_", "-") for o in self.own_options) or "none"
            where = f"is for --task {' or '.join(takers)}" if takers else "is not an option of any study"
            raise InvalidValueError(f"lineage: {flag} {value!r} {where}; --task {self.name}'s own options: {own}")
        return self.options_class(**values)

    @property
    def own_options(self) -> tuple[str, ...]:
        """The names of the options only this study takes."""
        return tuple(f.name for f in own_fields(self.options_class))

    def row(self, name: str) -> Member:
        for row in self.rows:
            if row.name == name:
                return row
        raise InvalidValueError(f"lineage: unknown member {name!r} for --task {self.name}; allowed values: "
                                f"{list(self.members)}.")  # fmt: skip

    def settings_for(self, quick: bool = False, overrides=()):
        """The settings of a mode with `overrides` (KEY=VALUE, `MEMBER.KNOB=VALUE`) applied and type-checked as recipe
        values are: a wrong key or type is a one-line error naming it."""
        from hf_seq.training.recipes import build_section, parse_overrides

        mode = "quick" if quick else "default"
        base = self.settings[mode]
        tree = {k: v for k, v in dataclasses.asdict(base).items() if k != "knobs"}
        tree["knobs"] = {row.name: row.knobs_for(mode) for row in self.rows if row.knobs}
        for key, value in parse_overrides(overrides, "--set", "width=256 or gru.layers=3").items():
            if isinstance(value, dict) and key in self.members:
                self._set_knobs(tree["knobs"], key, value)
            elif key in tree and key != "knobs":
                tree[key] = value
            else:
                settings = sorted(k for k in tree if k != "knobs")
                raise InvalidValueError(
                    f"--set {key}: not a setting of the {self.name} lineage; its settings: {settings}, and a "
                    "member's knobs as MEMBER.KNOB"
                )
        return build_section(type(base), tree, "--set ")

    def _set_knobs(self, knobs: dict, member: str, values: dict) -> None:
        from hf_seq.training.recipes import check_value

        own = knobs.get(member, {})
        for knob, value in values.items():
            if knob not in own:
                raise InvalidValueError(
                    f"--set {member}.{knob}: {member} has no knob {knob!r}; its knobs: {', '.join(sorted(own)) or 'none'}"
                )
            own[knob] = check_value(f"{member}.{knob}", value, type(own[knob]))

    def build(self, name: str, s, size: int, vocab_size: int, device: str = "meta"):
        """The member `name` at `size`, on the meta device by default: shapes only."""
        return build(self.row(name), s, size, vocab_size, self.auto_class, device)

    def matched_size(self, name: str, s, vocab_size: int, target: int | None = None) -> int:
        """The size parameter of `name` whose non-embedding count is closest to `target` (default: the settings')."""
        return matched_size_of(self.row(name), s, vocab_size, self.auto_class, target, self.size_limit)

    # ---------------------------------------------------------------------------------------- hooks
    def prepare(self, s, options: Options, output_dir: Path) -> StudyData:
        raise NotImplementedError

    def metric(self, data: StudyData) -> str:
        raise NotImplementedError

    def flops(self, model, data: StudyData, s) -> float:
        raise NotImplementedError

    def step_batch(self, data: StudyData, s, vocab_size: int) -> dict:
        raise NotImplementedError

    def member_recipe(self, data: StudyData, s, row: Member, plan: Plan, score: bool) -> dict:
        return {}

    def score(self, row: Member, run, plan: Plan, data: StudyData, s) -> dict:
        raise NotImplementedError

    def fit_fixed(self, row: Member, data: StudyData, s, given: dict, output_dir: Path) -> dict:
        raise NotImplementedError(f"{row.name} has no family and {type(self).__name__} fits no fixed member")

    def describe(self, data: StudyData, s, records: list[dict]) -> dict:
        return {}

    def report(self, result: dict, data: StudyData, output_dir: Path, title: str) -> None:
        raise NotImplementedError

    def scored_line(self, record: dict, metric: str) -> str:
        return f"{record[metric]:.4f} {metric.replace('_', ' ')}"

    # ---------------------------------------------------------------------------------------- the flow
    def run(self, options: Options) -> dict:
        """Train and score every member at every size and seed; write lineage.json, lineage.md, the plots and the
        member folders into the output folder. Returns what lineage.json holds."""
        started = time.monotonic()  # a whole-study budget counts from here: the data and the n-gram are in it
        s = self.settings_for(options.quick, options.set)
        members = tuple(options.members or self.members)
        given, sizes = check_arguments(members, self.members, options.budgets, options.seeds, options.tune,
                                       options.sizes, s.target, self.name, int(options.regret), options.jobs)  # fmt: skip
        if options.study_seconds:  # a first guess of a member's seconds (for dropout); each is allotted as it starts
            given = {"seconds": options.study_seconds / max(1, sum(self.row(m).family is not None for m in members))}
        output_dir = Path(options.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        say = print if options.progress else silent
        data = self.prepare(s, options, output_dir)
        if "tokens" in given:
            s.budget_tokens = given["tokens"]
        deadline = started + options.study_seconds if options.study_seconds else None
        loop = StudyRun(self, s, data, given, options, output_dir, say, deadline)
        head = self.head(options, data, s, given, sizes)
        saved = finished_study(output_dir, head, members)
        if saved is None:
            records = loop.train_all(members, sizes)
            elapsed, machine_text = time.monotonic() - started, machine(load_before)
            result = self.write_result(options, data, s, head, records, elapsed, machine_text)
        else:  # the same command again: the study had finished (the regret runs after it may not have)
            say(f"lineage: {output_dir / 'lineage.json'} holds this very study, finished: its records are reused")
            records, elapsed, machine_text = saved["members"], saved["elapsed_seconds"], saved["machine"]
        if options.regret:  # a measurement of the study's choices, after it (and its report): not in its seconds
            loop.regret(records)
            result = self.write_result(options, data, s, head, records, elapsed, machine_text)
        return result if saved is None or options.regret else saved

    def head(self, options, data, s, given, sizes) -> dict:
        """What names a study in lineage.json: its task, data, budget, tuning, seeds, sizes and settings (as JSON
        reads them back)."""
        return json.loads(json.dumps({
            "task": self.name, "corpus": data.corpus_name, "quick": options.quick, **data.names,
            "vocab_size": data.vocab_size, "width": s.width, "train_tokens": data.train_tokens,
            "budget": budget_text(given, s.budget_tokens, self.budget_unit, options.study_seconds),
            "budget_tokens": s.budget_tokens if "tokens" in given or not given else None,
            "budget_seconds": options.budget_seconds, "budget_flops": options.budget_flops,
            "study_seconds": options.study_seconds,
            "tuning": f"{options.tune} trials per member at {TUNE_FRACTION:g} of the budget, chosen on validation loss"
            if options.tune else "none (the defaults)",
            "seeds": options.seeds, "sizes": sizes, "settings": dataclasses.asdict(s),
        }))  # fmt: skip

    def write_result(self, options, data, s, head, records, elapsed, machine_text: str) -> dict:
        """lineage.json, lineage.md and the plots from the records so far; what lineage.json holds."""
        output_dir = Path(options.output_dir)
        budget, sizes = head["budget"], head["sizes"]
        metric = self.metric(data)
        result = {k: head[k] for k in ("task", "corpus", "quick", *data.names, "vocab_size", "width", "train_tokens")}
        result |= self.describe(data, s, records)
        result |= {
            "budget": budget,
            **{k: head[k] for k in ("budget_tokens", "budget_seconds", "budget_flops", "study_seconds")},
            "elapsed_seconds": elapsed,  # the study's own time: data, n-gram, searches and scored runs (no regret)
            **{k: head[k] for k in ("tuning", "seeds", "sizes")},
            "metric": metric,
            "machine": machine_text,
            "settings": head["settings"],
            "members": records,
            "summary": summarize(records, metric),
        }
        self.report(result, data, output_dir, f"{data.corpus_name}, {budget}")
        (output_dir / "lineage.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
        if len(sizes) > 1:
            plot_scaling(result["summary"], metric, output_dir / "scaling.png", f"{data.corpus_name}, {budget}")
        return result


# The studies `hf-seq lineage --task NAME` runs: NAME -> the module whose `LINEAGE` is the study. The first is the
# default. Modules are imported when a study is asked for, and a study module imports no torch until it runs, so
# `hf-seq --help` reads every study's rows and options cheaply.
STUDIES = {
    "language_model": "hf_seq.experiments.lineage",
    "translation": "hf_seq.experiments.lineage_translation",
    "time_series": "hf_seq.experiments.lineage_forecasting",
    "music": "hf_seq.experiments.lineage_music",
}


def get_study(name: str) -> Study:
    """The study `hf-seq lineage --task name` runs."""
    if name not in STUDIES:
        raise InvalidValueError(f"lineage: --task {name!r} is not a study; allowed values: {list(STUDIES)}")
    found = importlib.import_module(STUDIES[name]).LINEAGE
    if found.name != name:
        raise ValueError(f"STUDIES[{name!r}] is the module of a study named {found.name!r}: use one name for both")
    return found


def all_studies() -> dict[str, Study]:
    """Every registered study, by name, in STUDIES' order."""
    return {name: get_study(name) for name in STUDIES}


def shared_data(recipe, output_dir: Path):
    """The study's data prepared once, with one tokenizer trained on its training split and saved in
    `output_dir/tokenizer`, from where every member's recipe names it: (the prepared data, that folder)."""
    from hf_seq.data import tasks

    folder = output_dir / "tokenizer"
    prepared = tasks.prepare(recipe, tokenizer_folder=folder)
    if not (folder / "tokenizer.json").exists():
        prepared.tokenizer.save_pretrained(folder)
    return prepared, folder


def member_folder(name: str, target, seed: int, single: bool, fitted: bool = False) -> str:
    """A member's run folder in the study's output folder: its name when the study runs one size and one seed (and
    always for a fitted member, the n-gram), else `<name>-<size>-seed<seed>`."""
    return name if single or fitted else f"{name}-{target}-seed{seed}"


def largest_records(result: dict) -> list[dict]:
    """The records of the first seed at the largest size: what the curves and pictures show."""
    return [r for r in result["members"] if r["target"] == result["sizes"][-1] and r["seed"] == 0]


def member_data(shared, cap: int | None):
    """The study's data as one member's run sees it: the validation split cut to its first `cap` examples (what the
    periodic evaluations score) and no test split (the study scores it once, with the selected weights). The same
    data `tasks.prepare` gives the member's recipe, without reading and encoding it again."""
    eval_set, rows = shared.held_out["eval"], shared.held_out_rows.get("eval")
    notes = {k: v for k, v in shared.notes.items() if not k.startswith(("test_", "eval_examples"))}
    if cap is not None and cap < len(eval_set):
        notes["eval_examples_total"] = len(eval_set)
        eval_set, rows = eval_set.select(range(cap)), rows.select(range(cap)) if rows is not None else None
    notes["eval_examples"] = len(eval_set)
    return dataclasses.replace(shared, held_out={"eval": eval_set}, held_out_rows={"eval": rows}, notes=notes)


def silent(*args, **kwargs) -> None:
    """A study's `say` without --progress (a function, not a lambda: a study run is pickled for --jobs)."""


class StudyRun:
    """One study's run: plans, trains and scores its members."""

    def __init__(self, study: Study, s, data: StudyData, given: dict, options: Options, output_dir: Path, say,
                 deadline: float | None = None):  # fmt: skip
        self.study, self.s, self.data, self.given, self.options = study, s, data, given, options
        self.output_dir, self.say = output_dir, say
        self.fixed = {}  # a member that is not trained is fitted once, whatever the sizes and seeds
        self.seconds = options.budget_seconds  # a member's training seconds (--study-seconds: set per member)
        self.deadline, self.overhead = deadline, OVERHEAD  # time.monotonic() at which the whole study must end
        self.member_deadline, self.reserve = None, RESERVE  # a member's end; its scored run's time outside training

    def train_all(self, members, sizes) -> list[dict]:
        """Every member at every size: `tune` trials at TUNE_FRACTION of the budget (the lowest validation loss
        wins), then one scored run per seed with the chosen settings. `--sizes auto`: the size searched inside the
        member's budget (`search`), the survivor continued to the end of it."""
        options, records = self.options, []
        networks = [name for name in members if self.study.row(name).family is not None]
        for target in sizes:
            for name in members:
                row = self.study.row(name)
                if row.family is None:
                    if name not in self.fixed:
                        self.fixed[name] = self.study.fit_fixed(row, self.data, self.s, self.given, self.output_dir)
                    records.append(dict(self.fixed[name]) | {"target": target, "seed": 0})
                    continue
                started = time.monotonic()
                left = len(networks) * (len(sizes) - sizes.index(target)) - networks.index(name)  # runs to come
                self.allot(left)
                if target != AUTO:
                    plan = self.plan(row, target)
                    trials, chosen = self.tune(row, plan, target)
                for seed in range(options.seeds):
                    folder = self.output_dir / member_folder(name, target, seed, len(sizes) == 1 and options.seeds == 1)
                    if target == AUTO:
                        record = self.search(row, folder, seed)
                    else:
                        self.say(f"lineage: training {name} (size {plan.non_embedding:,}, seed {seed}, {chosen})")
                        record = self.train(row, plan, chosen, seed, folder, plan.steps, self.seconds, True)
                        record["trials"] = trials
                    self.say(f"lineage: {name}: {self.study.scored_line(record, self.study.metric(self.data))}")
                    records.append(record | {"target": target, "seed": seed})
                self.spent(time.monotonic() - started)
        return records

    # ------------------------------------------------------------------------------------------ the whole budget
    def allot(self, left: int) -> None:
        """Under a whole-study budget (--study-seconds), the next member's training seconds: what is left of the
        study's seconds, shared by the `left` network runs still to come, less the time a run spends outside its
        training (building, saving, scoring: measured on the members before, first guessed at OVERHEAD)."""
        if self.deadline is None:
            return
        share = max(self.deadline - time.monotonic(), 0.0) / max(left, 1)
        self.seconds = max(share / self.overhead, 1.0)
        self.member_deadline = time.monotonic() + share  # the survivor's run is fitted to it (`search`)
        self.say(f"lineage: {self.seconds:.0f} s of training for the next member ({share:.0f} s of the study's left)")

    def spent(self, seconds: float) -> None:
        """A member took `seconds` for `self.seconds` of training: the overhead the next allotments assume."""
        if self.deadline is not None and self.seconds:
            self.overhead = max(1.0, seconds / (self.seconds * self.options.seeds))

    # ------------------------------------------------------------------------------------------ the size search
    def search(self, row: Member, folder: Path, seed: int) -> dict:
        """`--sizes auto`: successive halving over the member at sizing.SCALES times the target (and, with --tune N,
        each at the N trials' learning rates and dropouts) inside its budget, judged by decay branches and the
        candidates' own curves (hf_seq.experiments.sizing); the survivor continued from its checkpoint to the end of
        the budget. Its scored record, with how it was chosen."""
        total, unit = self.budget_clock(row)
        plans = {}
        for scale in sizing.SCALES:
            plan = self.plan(row, round(self.s.target * scale))
            plans.setdefault(plan.non_embedding, plan)  # a member whose smallest shape is above a target: once
        past_epoch = next(iter(plans.values())).past_epoch
        grid = trial_grid(self.options.tune, self.s, past_epoch) if self.options.tune else [
            {"learning_rate": self.s.learning_rate, "dropout": default_dropout(past_epoch)}]  # fmt: skip
        alive = [Candidate(plan, settings, bool(self.options.tune)) for plan in plans.values() for settings in grid]
        share = sizing.survivor_share(len(alive))
        end = share * total
        rungs = []
        for k, (rung, keep) in enumerate(zip(sizing.RUNGS, sizing.KEEP)):
            judged, aim = sizing.rank([self.rung(row, c, seed, k, rung * total, unit, end) for c in alive], end)
            kept = [j["candidate"] for j in judged[:keep]]
            alive = [c for c in alive if c.name in kept]
            rungs.append({"at": rung * total, "unit": unit, "candidates": judged, "kept": kept, "aim": aim})
            aimed = f" (nearest {aim['size']:,.0f}: {aim['leader']} x {aim['growth']:.2f})" if aim else ""
            starved = [j for j in judged if j["tokens_per_parameter"] is not None
                       and j["tokens_per_parameter"] < sizing.MIN_TOKENS_PER_PARAMETER]  # fmt: skip
            if starved:
                aimed += (f"; under {sizing.MIN_TOKENS_PER_PARAMETER:g} tokens per parameter by the end: "
                          + ", ".join(f"{j['candidate']} ({j['tokens_per_parameter']:.1f})" for j in starved))  # fmt: skip
            self.say(f"lineage: {row.name} rung {k + 1}: kept {', '.join(kept)}{aimed}")
        chosen = alive[0]
        if self.member_deadline is not None and self.options.seeds == 1:  # the survivor takes what the member has left
            end = chosen.reached + max(1.0, self.member_deadline - time.monotonic() - self.reserve)
        self.say(f"lineage: training {row.name} ({chosen.name}, seed {seed}): continued from {chosen.reached:.0f} to "
                 f"{end:.0f} {unit} (its budget: {total:.0f})")  # fmt: skip
        limit = {"seconds": end} if unit == "seconds" else {"steps": round(end)}
        started = time.monotonic()
        record = self.train(row, chosen.plan, chosen.settings, seed, folder, limit.get("steps"), limit.get("seconds"),
                            True, resume=True, copy_from=self.candidate_folder(row, chosen, seed))  # fmt: skip
        if unit == "seconds":  # what the next member's survivor keeps aside
            self.reserve = max(1.0, time.monotonic() - started - (record["seconds"] - chosen.reached))
        record["search"] = {"budget": total, "unit": unit, "survivor_share": share, "rungs": rungs,
                            "scales": list(sizing.SCALES), "chosen": chosen.name}  # fmt: skip
        return record

    def budget_clock(self, row: Member) -> tuple[float, str]:
        """The member's budget on the clock its runs keep: (seconds, "seconds"), or under a FLOPs budget the steps
        the target size's FLOPs allow, (steps, "steps") (every candidate then trains the same steps: a larger one
        spends more FLOPs in them, which halving against the steps does not count)."""
        if self.seconds:
            return self.seconds, "seconds"
        plan = self.plan(row, self.s.target)
        return float(plan.steps), "steps"

    def candidate_folder(self, row: Member, candidate: "Candidate", seed: int) -> Path:
        return self.output_dir / "search" / f"{row.name}-{candidate.name}-seed{seed}"

    def rung(self, row: Member, candidate: "Candidate", seed: int, k: int, at: float, unit: str, end: float) -> dict:
        """One candidate at rung k: trained (or continued) at its peak rate to `at`, then a decay branch on a copy;
        judged at `end` (sizing.judge)."""
        plan, settings, folder = candidate.plan, candidate.settings, self.candidate_folder(row, candidate, seed)
        limit = (lambda x: {"seconds": x}) if unit == "seconds" else (lambda x: {"steps": max(1, round(x))})
        # the first rung's curve: EVALUATIONS_PER_RUNG points; later rungs are judged by their branches, not a curve,
        # and evaluate at the study's cadence (the seconds denser evaluations would take go to training)
        every = None
        if k == 0:
            expected = at / plan.step_seconds if unit == "seconds" and plan.step_seconds else at
            every = max(1, round(expected / sizing.EVALUATIONS_PER_RUNG))
        about = {"candidate": candidate.name, "non_embedding_params": plan.non_embedding, "params": plan.params,
                 "knobs": plan.knobs, **settings}  # fmt: skip
        stable = self.train(row, plan, settings, seed, folder, limit(at).get("steps"), limit(at).get("seconds"),
                            False, eval_every=every, resume=k > 0, decay_fraction=0.0)  # fmt: skip
        if "diverged" in stable:
            return about | {"predicted_loss": math.inf, "diverged": True}
        candidate.reached = stable["total_seconds"] if unit == "seconds" else stable["steps"]
        branch_end = candidate.reached * (1 + sizing.BRANCH)
        got = self.train(row, plan, settings, seed, folder.with_name(f"{folder.name}-branch{k + 1}"),
                         limit(branch_end).get("steps"), limit(branch_end).get("seconds"), False,
                         eval_every=every, resume=True,
                         decay_fraction=(branch_end - candidate.reached) / branch_end, copy_from=folder)  # fmt: skip
        key = "seconds" if unit == "seconds" else "step"
        curve = [(c[key], c["eval_loss"]) for c in stable["evaluations"]]
        loss = got["eval_loss"] if "diverged" not in got else math.inf
        rate = stable["epochs"] / candidate.reached if stable.get("epochs") and candidate.reached else None
        judged = sizing.judge(curve, loss, candidate.reached, end, earlier=candidate.branch, epochs_per_unit=rate)
        candidate.branch = (candidate.reached, loss)
        self.say(f"lineage: {row.name} {candidate.name}: branch {loss:.4f} at {candidate.reached:.0f} {unit}, "
                 f"predicted {judged['predicted_loss']:.4f} at {end:.0f}")  # fmt: skip
        epochs = stable.get("epochs")
        tokens = epochs * self.data.train_tokens if epochs else None
        return about | {"reached": candidate.reached, "epochs": epochs, "tokens": tokens} | judged

    # ------------------------------------------------------------------------------------------ the regret
    def regret(self, records: list[dict]) -> None:
        """--regret N: each searched member trained from the start at half, the same and twice its chosen size, for
        the chosen run's training, at N seeds (the record's, and N - 1 the study does not use). The regret is the
        chosen size's mean validation loss less the best of the three means: the choice of size alone, every run
        alike. The searched run's own loss less the chosen size's from the start, at its seed, is what the search
        cost its survivor (`search_cost`). The three sizes of a seed train interleaved, in REGRET_SLICES slices of
        their time in turn (each slice continues its run from its checkpoint), so a machine whose speed drifts
        within the hour slows the three alike. With --jobs N, N members are measured side by side, each in a
        process of its own (a member's three sizes stay together, taking turns)."""
        work = {}
        for index, record in enumerate(records):
            if "search" in record:
                work[index] = self.regret_work(record)
        for index, measured in self.side_by_side(work).items():
            record = records[index]
            for label in ("half", "twice"):
                measured.setdefault(label, measured["chosen"])
            losses = {label: sum(values) / len(values) for label, values in measured.items()}
            record["regret_losses"] = {label: losses[label] for label in ("chosen", "half", "twice")}
            for key in ("regret_seeds", "regret_seed_losses"):  # an earlier --regret N's, measured again
                record.pop(key, None)
            seeds = work[index][3]
            if len(seeds) > 1:
                record["regret_seeds"] = seeds
                record["regret_seed_losses"] = {label: measured[label] for label in ("chosen", "half", "twice")}
            record["regret"] = losses["chosen"] - min(losses.values())
            record["searched_loss"] = lowest_loss(record)
            fresh = measured["chosen"][0]
            record["search_cost"] = record["searched_loss"] - fresh if math.isfinite(fresh) else None

    def regret_work(self, record: dict) -> tuple:
        """(member, {label: plan}, settings, seeds, trained, unit): what `measure` trains for one searched record; a
        size with no shape of its own (half or twice lands on the chosen shape) is named and left out."""
        row, chosen = self.study.row(record["name"]), record["non_embedding_params"]
        unit = record["search"]["unit"]
        trained = record["seconds"] if unit == "seconds" else record["steps"]
        seeds = [record["seed"] + self.options.seeds * k for k in range(int(self.options.regret))]
        plans = {}
        for label, scale in (("half", 0.5), ("chosen", 1.0), ("twice", 2.0)):
            plan = self.plan(row, round(chosen * scale))
            record.setdefault("regret_sizes", {})[label] = plan.non_embedding
            if label != "chosen" and plan.non_embedding == chosen:  # no smaller (larger) shape: the chosen's
                self.say(f"lineage: regret: {row.name} has no shape at {scale:g}x its chosen size; not trained")
                continue
            plans[label] = plan
        if plans["chosen"].non_embedding != chosen:
            self.say(f"lineage: regret: warning: {row.name}'s chosen size trained again has "
                     f"{plans['chosen'].non_embedding:,} non-embedding parameters, the searched run {chosen:,}")
        settings = {"learning_rate": record["learning_rate"], "dropout": record["dropout"]}
        return row.name, plans, settings, seeds, trained, unit

    def measure(self, name: str, plans: dict, settings: dict, seeds: list, trained: float, unit: str) -> dict:
        """{label: [lowest validation loss at each seed]}: one member's regret runs, its sizes interleaved."""
        row, measured = self.study.row(name), {label: [] for label in plans}
        for k, seed in enumerate(seeds):
            self.say(f"lineage: regret: {name} at {', '.join(f'{p.non_embedding:,}' for p in plans.values())}"
                     f" for {trained:.0f} {unit}, seed {seed}, interleaved")  # fmt: skip
            for label, loss in self.interleaved(row, plans, settings, seed, trained, unit, turn=k).items():
                measured[label].append(loss)
        return measured

    def side_by_side(self, work: dict) -> dict:
        """{key: measure(*work[key])}, in --jobs processes at once (spawned, each on --threads threads, else its
        share of the cores, with no progress bars: their lines would interleave), else one after another here."""
        jobs = min(self.options.jobs, len(work))
        if jobs <= 1:
            return {key: self.measure(*arguments) for key, arguments in work.items()}
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from hf_seq.training.runs import usable_cores

        threads = self.options.threads or max(1, usable_cores() // jobs)
        worker = copy.copy(self)  # its lines (`say`) as the study's; no progress bars
        worker.options = dataclasses.replace(self.options, threads=threads, progress=False)
        self.say(f"lineage: regret: {len(work)} members' runs in {jobs} processes side by side, {threads} thread"
                 f"{'s' * (threads > 1)} each")  # fmt: skip
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {key: pool.submit(worker.measure, *arguments) for key, arguments in work.items()}
            return {key: future.result() for key, future in futures.items()}

    def interleaved(self, row: Member, plans: dict, settings: dict, seed: int, trained: float, unit: str,
                    turn: int = 0) -> dict:  # fmt: skip
        """{label: lowest validation loss} of one run per plan, each from the start for `trained` (seconds or
        steps) on the wsd schedule, trained in REGRET_SLICES slices taken in turn (the order rotated by `turn`, so no
        size always goes first): its peak rate to the end of each slice, the decay in the last. The same command
        again reuses a finished run and continues an interrupted one after its last finished slice."""
        labels = list(plans)
        labels = labels[turn % len(labels):] + labels[: turn % len(labels)]
        folders = {label: self.output_dir / "regret" / f"{row.name}-{label}-seed{seed}" for label in labels}

        def limit(share: float) -> tuple:
            x = trained * share
            return (max(1, round(x)), None) if unit == "steps" else (None, x)

        def decay(k: int) -> float:
            return sizing.DECAY_FRACTION if k == REGRET_SLICES else 0.0

        results, done = {}, {}
        for label in labels:  # the same command again: a run continues after its last finished slice (or is reused)
            for k in range(REGRET_SLICES, 0, -1):
                got = self.finished(row, plans[label], settings, seed, folders[label], *limit(k / REGRET_SLICES),
                                    decay_fraction=decay(k), note=REGRET_NOTE)  # fmt: skip
                if got is not None:
                    done[label] = k
                    if k == REGRET_SLICES:
                        results[label] = got
                    break
        for k in range(1, REGRET_SLICES + 1):
            for label in (label for label in labels if label not in results and k > done.get(label, 0)):
                got = self.train(row, plans[label], settings, seed, folders[label], *limit(k / REGRET_SLICES), False,
                                 resume=k > 1, decay_fraction=decay(k), note=REGRET_NOTE)  # fmt: skip
                if "diverged" in got or k == REGRET_SLICES:
                    results[label] = got
        return {label: math.inf if "diverged" in got else got["eval_loss"] for label, got in results.items()}

    def tune(self, row: Member, plan: Plan, target: int) -> tuple[list[dict], dict]:
        """(the trials, the settings chosen): the defaults without tuning."""
        chosen = {"learning_rate": self.s.learning_rate, "dropout": default_dropout(plan.past_epoch)}
        trials, seconds = [], self.seconds
        for k, trial in enumerate(trial_grid(self.options.tune, self.s, plan.past_epoch)):
            folder = self.output_dir / "trials" / f"{row.name}-{target}-{k}"
            steps = max(1, math.ceil(plan.steps * TUNE_FRACTION)) if plan.steps else None
            got = self.train(row, plan, trial, 0, folder, steps, seconds and seconds * TUNE_FRACTION, False)
            trials.append(trial | {k: v for k, v in got.items() if k != "curve"})
            if "diverged" not in got:
                self.say(f"lineage: {row.name} trial {k}: {trial} -> validation loss {got['eval_loss']:.4f}")
        finished = [t for t in trials if "diverged" not in t]  # a trial that diverged is reported, never chosen
        if finished:
            best = min(finished, key=lambda t: t["eval_loss"])
            chosen = {k: best[k] for k in ("learning_rate", "dropout")}
        elif trials:
            self.say(f"lineage: {row.name}: every trial diverged; trained with the defaults")
        return trials, chosen

    def build(self, row: Member, size: int, device: str = "meta", knobs: dict | None = None):
        return build(row, self.s, size, self.data.vocab_size, self.study.auto_class, device, knobs)

    def plan(self, row: Member, target: int) -> Plan:
        """The member's size parameter, shapes (on the meta device), FLOPs per token and steps under the budget."""
        vocab_size = self.data.vocab_size
        knobs = {}
        while True:  # below the member's smallest shape at its depth, one layer fewer (to one): a search's small sizes
            size = matched_size_of(row, self.s, vocab_size, self.study.auto_class, target, self.study.size_limit,
                                   knobs)  # fmt: skip
            shapes = self.build(row, size, knobs=knobs)
            params, non_embedding = count_parameters(shapes)
            layers = (row.knobs | self.s.knobs.get(row.name, {}) | knobs).get("layers", 1)
            if not (size == 1 and non_embedding > OVERSIZE * target and layers > 1):
                break
            knobs = {"layers": layers - 1}
        if size == 1 and non_embedding > OVERSIZE * target:  # its knobs alone pass the target: it cannot be matched
            named = [f"{row.name}.{k}" for k in self.s.knobs.get(row.name, {}) if k != "layers"] + ["width"]
            self.say(f"lineage: warning: {row.name} has {non_embedding:,} non-embedding parameters at its smallest "
                     f"size{' (one layer)' * (layers == 1)}, {non_embedding / target - 1:.0%} above the target "
                     f"{target:,}: it is not matched to the others; lower {' or '.join(named)} with --set")  # fmt: skip
        flops = self.study.flops(shapes, self.data, self.s)

        timed = []

        def step_time() -> float:  # under a seconds budget: will the member pass an epoch, and so need dropout?
            from hf_seq.experiments.common import torch_threads
            from hf_seq.training.runs import choose_threads

            batch = self.study.step_batch(self.data, self.s, vocab_size)
            with torch_threads(choose_threads(self.options.threads)):  # timed as its runs will train (--threads)
                timed.append(seconds_per_step(self.build(row, size, "cpu", knobs), batch))
            return timed[-1]

        steps, past_epoch = plan_steps(self.given, self.s.budget_tokens, flops, self.data.tokens_per_step,
                                       self.data.train_tokens, step_time)  # fmt: skip
        return Plan(size, params, non_embedding, flops, steps, past_epoch, timed[-1] if timed else None, knobs)

    def train(
        self, row: Member, plan: Plan, settings: dict, seed: int, folder: Path, steps, seconds, score: bool,
        eval_every: int | None = None, resume: bool = False, decay_fraction: float = sizing.DECAY_FRACTION,
        copy_from: Path | None = None, note: str = "",
    ):  # fmt: skip
        """One training run through `hf_seq.training.run` (or a finished run of the very same recipe, reused), on the
        wsd schedule: a tuning trial or a search's run reports its `trial_keys`, seconds and evaluations; a final run
        (`score`) is scored by the study. `resume`: continue the run in `folder` (a candidate's, or a copy of it) to
        the new limit, decaying over its last `decay_fraction` (0: none, it can be continued again); `copy_from`: a
        run folder copied to `folder` first (`copy_run`), unless `folder` already holds this very run, finished."""
        from hf_seq.training.divergence import DivergenceError
        from hf_seq.training.pretraining import run
        from hf_seq.training.runs import finished_run

        recipe = self.recipe(row, plan, settings, seed, folder, steps, seconds, score, eval_every, decay_fraction, note)
        result = finished_run(recipe)
        if result is None:
            if copy_from is not None:
                copy_run(copy_from, folder)
            try:
                result = run(recipe, resume=resume, progress=self.options.progress, overwrite=not resume,
                             prepared=member_data(self.data.prepared, self.data.eval_examples))  # fmt: skip
            except DivergenceError as error:
                if score:  # the settings chosen from trials that did not diverge: say so, in one line
                    raise DivergenceError(f"lineage: {row.name}'s scored run: {error}") from None
                self.say(f"lineage: {folder.name}: failed, not selected: {error}")
                failed = {k: 0 if k == "steps" else None for k in self.study.trial_keys}  # no figures to report
                return failed | {"seconds": 0.0, "curve": [], "evaluations": [], "diverged": str(error)}
        elif self.options.progress:
            print(f"lineage: {folder.name}: a finished run of the same recipe is there, reused")
        return self.figures(row, plan, settings, recipe, result, score)

    def finished(self, row: Member, plan: Plan, settings: dict, seed: int, folder: Path, steps, seconds,
                 decay_fraction: float = sizing.DECAY_FRACTION, note: str = "") -> dict | None:  # fmt: skip
        """A run `train` would reuse (the very same recipe, finished in `folder`), as `train` reports it; else None."""
        from hf_seq.training.runs import finished_run

        recipe = self.recipe(row, plan, settings, seed, folder, steps, seconds, False, decay_fraction=decay_fraction,
                             note=note)  # fmt: skip
        result = finished_run(recipe)
        return None if result is None else self.figures(row, plan, settings, recipe, result, False)

    def recipe(self, row: Member, plan: Plan, settings: dict, seed: int, folder: Path, steps, seconds, score: bool,
               eval_every: int | None = None, decay_fraction: float = sizing.DECAY_FRACTION, note: str = ""):  # fmt: skip
        """The recipe of one of the study's runs: the shared data and tokenizer (no test split), the member at
        `plan`'s size with `settings`, on the wsd schedule to `steps` or `seconds`; `note` ends its card's
        description (and tells its run apart from one of another kind)."""
        from hf_seq.training.recipes import load_recipe

        s, data = self.s, self.data
        tree = json.loads(json.dumps(data.recipe.to_dict()))  # the shared recipe, without its test split
        tree["data"].pop("test", None)
        tree["data"]["eval_examples"] = data.eval_examples
        if data.tokenizer_dir is not None:  # a study of real values has no tokenizer
            tree["tokenizer"]["path"] = str(data.tokenizer_dir)
        tree |= {"family": row.family, "model": row.model_keys(s, plan.size, settings["dropout"], plan.knobs)}
        tree["training"] |= {"output_dir": str(folder), "log_with": "none", "max_steps": steps, "max_seconds": seconds}
        tree["training"] |= {"threads": self.options.threads, "seed": seed, "batch_size": s.batch_size}
        tree["training"] |= {"learning_rate": settings["learning_rate"], "warmup_steps": s.warmup_steps}
        tree["training"] |= {"eval_every": eval_every or s.eval_every, "save_every": 10**9, "select_by": "loss"}
        tree["training"] |= {"scheduler": "wsd", "decay_fraction": decay_fraction}
        tree["card"] = {"description": f"The {row.title} member of the hf-seq {self.study.title}.{note}"}
        for section, keys in self.study.member_recipe(data, s, row, plan, score).items():
            tree[section] |= keys
        return load_recipe(tree)

    def figures(self, row: Member, plan: Plan, settings: dict, recipe, result, score: bool) -> dict:
        """What `train` reports of a run: a trial's or a search's `trial_keys`, seconds and evaluations; a scored
        run's record, scored by the study."""
        s, data = self.s, self.data
        summary = result.summary
        if not score:
            curve = [(c["step"] * data.tokens_per_step, c["eval_loss"]) for c in result.evaluations]
            steps_only = summary["seconds"] - summary.get("eval_seconds", 0.0)  # the pilots' speed, evaluations aside
            return {k: summary[k] for k in self.study.trial_keys} | {"seconds": steps_only, "curve": curve,
                    "total_seconds": summary["seconds"], "evaluations": result.evaluations,
                    "epochs": summary.get("epochs")}  # fmt: skip
        record = Record(
            row.name, row.title, row.family, plan.params, plan.non_embedding, plan.flops,
            learning_rate=settings["learning_rate"], dropout=settings["dropout"], best_step=summary.get("best_step"),
            epochs=summary.get("epochs"), steps=summary["steps"], train_tokens=summary["steps"] * data.tokens_per_step,
            seconds=summary["seconds"], config=recipe.model,
            curve=[{k: c.get(k) for k in self.study.curve_keys} for c in result.evaluations],
            final_eval_loss=result.evaluations[-1]["eval_loss"] if result.evaluations else None,
            selected_eval_loss=summary.get("eval_loss"),
            best_eval_loss=min((e["eval_loss"] for e in result.evaluations if "eval_loss" in e), default=None),
        )  # fmt: skip
        return record.to_dict(self.study.score(row, result, plan, data, s))


def lowest_loss(record: dict) -> float:
    """A scored run's lowest validation loss, as a run selected by loss (a tuning trial's, a regret run's) reports
    its own: a translation member's scored run keeps its evaluation of highest BLEU, not always its lowest loss
    (records from before best_eval_loss: the loss kept)."""
    best = record.get("best_eval_loss")
    return record["selected_eval_loss"] if best is None else best


def copy_run(source: Path, folder: Path) -> None:
    """A run folder copied whole (its checkpoint included), so the copy can be resumed on its own: a decay branch,
    or the survivor's scored run. An earlier copy there is replaced."""
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(source, folder)


def build(row: Member, s, size: int, vocab_size: int, auto_class: str, device: str = "meta", knobs=None):
    """The member, on the meta device by default: shapes only, counting needs no memory and no initialisation."""
    import torch

    from hf_seq.registry import family

    fam = family(row.family)
    config = fam.config_class(vocab_size=vocab_size, **row.model_keys(s, size, knobs=knobs))
    with torch.device(device):
        return fam.model_class(auto_class)(config)


def matched_size_of(row: Member, s, vocab_size: int, auto_class: str, target: int | None = None, limit=256,
                    knobs: dict | None = None) -> int:  # fmt: skip
    """The member's size parameter whose non-embedding count is closest to `target` (default: the settings')."""
    count = lambda size: count_parameters(build(row, s, size, vocab_size, auto_class, knobs=knobs))[1]
    return matched_size(count, target or s.target, limit * s.width)


# ---------------------------------------------------------------------------------------------- arguments
def check_arguments(members, allowed, budgets: dict, seeds: int, tune: int, sizes, target: int, task: str,
                    regret: int = 0, jobs: int = 1) -> list:  # fmt: skip
    """The budget actually given ({kind: value}: at most one of tokens, seconds, flops) and the sizes; refuses
    anything else with a message that names the option, the value and what is allowed."""
    given = {k: v for k, v in budgets.items() if v is not None}  # 0 is refused below, not ignored
    if len(given) > 1:
        raise InvalidValueError(
            f"lineage: give one budget (--budget-tokens, --budget-seconds, --budget-flops or --study-seconds), got "
            f"{sorted(given)}"
        )
    for kind, value in given.items():
        if value <= 0:
            flag = "--study-seconds" if kind == "study" else f"--budget-{kind}"
            raise InvalidValueError(f"lineage: {flag} must be positive, got {value!r}")
    for name in members:
        if name not in allowed:
            raise InvalidValueError(
                f"lineage: unknown member {name!r} for --task {task}; allowed values: {list(allowed)}."
            )
    if seeds < 1 or tune < 0:
        raise InvalidValueError(f"lineage: --seeds must be >= 1 and --tune >= 0, got {seeds} and {tune}")
    if regret < 0:
        raise InvalidValueError(f"lineage: --regret takes a number of seeds >= 1 (or nothing: 1), got {regret}")
    if jobs < 1 or (jobs > 1 and not regret):
        raise InvalidValueError(f"lineage: --jobs is the number of processes that measure --regret side by side: a "
                                f"number >= 1, and more than 1 only with --regret; got --jobs {jobs}"
                                f"{'' if regret else ' without --regret'}")  # fmt: skip
    timed = bool({"seconds", "flops", "study"} & given.keys())
    auto = sizes == AUTO or (sizes is None and timed)
    if regret and not auto:
        why = (f"got --sizes {','.join(map(str, sizes))}" if sizes else
               "and a token budget (the default) trains the target size, chooses none")  # fmt: skip
        raise InvalidValueError(f"lineage: --regret measures the size --sizes auto chose, {why}; use --sizes auto "
                                "with --budget-seconds, --study-seconds or --budget-flops")  # fmt: skip
    if auto:  # under a seconds or FLOPs budget the size follows the budget
        if not timed:
            raise InvalidValueError(
                "lineage: --sizes auto needs a --budget-seconds, --study-seconds or --budget-flops (a token budget "
                "does not trade "
                "size against tokens: the largest size would always win)"
            )
        return given, [AUTO]
    sizes = sorted(sizes) if sizes else [target]
    if any(size <= 0 for size in sizes):
        raise InvalidValueError(f"lineage: --sizes must be positive parameter counts, got {sizes}")
    return given, sizes


def finished_study(output_dir: Path, head: dict, members) -> dict | None:
    """The lineage.json in `output_dir` when it holds this very study (`head`: the same task, data files' names and
    token counts, budget, tuning, seeds, sizes and settings; the same members), finished (it is written once every
    member is trained), else None. The runs inside are reused only where their recipes are the same too (the data
    paths as given: the same command from the same folder)."""
    path = output_dir / "lineage.json"
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    same = all(saved.get(k) == v for k, v in head.items())
    return saved if same and {m["name"] for m in saved.get("members", [])} == set(members) else None


def budget_text(given: dict, budget_tokens: int, unit: str = "training tokens", study_seconds=None) -> str:
    if study_seconds:
        return f"{study_seconds:g} s for the whole study"
    if "flops" in given:
        return f"{given['flops']:.3g} training FLOPs per member"
    if "seconds" in given:
        return f"{given['seconds']:g} s of training per member"
    return f"{budget_tokens:,} {unit} per member"


def machine(load_before: float) -> str:
    import torch

    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{os.cpu_count()} CPU cores, torch {torch.__version__}, 1-min load {load_before:.2f} before and "
        f"{load_after:.2f} after"
    )


# ---------------------------------------------------------------------------------------------- sizes and budgets
def count_parameters(model) -> tuple[int, int]:
    """(all parameters, non-embedding parameters): embedding tables (token, position) and an untied output layer
    (the output embedding) are left out of the second; a tied output layer shares the token table, so it is counted
    once."""
    import torch

    total = sum(p.numel() for p in model.parameters())
    tables = {id(p): p for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is not None:
        tables |= {id(p): p for p in output.parameters()}
    return total, total - sum(p.numel() for p in tables.values())


def matched_size(non_embedding: Callable[[int], int], target: int, largest: int) -> int:
    """The size parameter in [1, largest] whose non-embedding count (`non_embedding(size)`, growing with the size)
    is closest to `target`."""
    lo, hi = 1, largest
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if non_embedding(mid) <= target:
            lo = mid
        else:
            hi = mid
    return min((lo, hi), key=lambda size: abs(non_embedding(size) - target))


def plan_steps(
    given: dict,
    default_tokens: int,
    flops_per_token: int,
    tokens_per_step: float,
    corpus_tokens: int,
    seconds_per_step: Callable[[], float] | None = None,
):
    """(steps, past_epoch) under the budget: a token or FLOPs budget fixes the steps (a FLOPs budget gives each
    member the steps its FLOPs per token allow), a seconds budget leaves them to the run (None); whether the member
    will pass an epoch then comes from its measured step time (`seconds_per_step()`, called only then)."""
    if "flops" in given:
        steps = max(1, math.ceil(given["flops"] / (flops_per_token * tokens_per_step)))
    elif "seconds" in given:
        steps = None
    else:
        steps = math.ceil((given.get("tokens") or default_tokens) / tokens_per_step)
    expected = steps
    if steps is None and seconds_per_step is not None:
        expected = given["seconds"] / seconds_per_step()
    past_epoch = expected is not None and expected * tokens_per_step > EPOCH_FOR_DROPOUT * corpus_tokens
    return steps, past_epoch


def seconds_per_step(model, batch: dict, repeats: int = 3) -> float:
    """A member's training step, timed: forward, backward and an AdamW step on `batch` (its model's inputs), the
    median of `repeats` steps after one to warm up."""
    import time

    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


# ---------------------------------------------------------------------------------------------- tuning
def trial_grid(count: int, s: Settings, past_epoch: bool) -> list[dict]:
    """The same `count` trials for every member: learning rates spread over [lr / 4, 4 lr] on a log scale and, once
    the budget passes an epoch, dropout over [0, 0.4], drawn from a Halton sequence (bases 2 and 3), so any count
    covers the square evenly and the first trial is always the default learning rate."""

    def halton(index: int, base: int) -> float:
        value, fraction = 0.0, 1.0
        while index:
            fraction /= base
            value += fraction * (index % base)
            index //= base
        return value

    trials = []
    for k in range(count):
        u = 0.5 if k == 0 else halton(k + 1, 2)
        trial = {"learning_rate": s.learning_rate * 4 ** (2 * u - 1)}
        trial["dropout"] = round(0.4 * halton(k + 1, 3), 3) if past_epoch else default_dropout(past_epoch)
        trials.append(trial)
    return trials


def default_dropout(past_epoch: bool) -> float:
    """Dropout when nothing is tuned: off within an epoch (no sample is seen twice, so there is nothing to
    overfit), 0.1 past it."""
    return DROPOUT_PAST_AN_EPOCH if past_epoch else 0.0


# ---------------------------------------------------------------------------------------------- summary
def summarize(records: list[dict], metric: str) -> list[dict]:
    """One row per (size, member): the mean of `metric` over the seeds, its range, and the member's settings."""
    rows = {}
    for r in records:
        rows.setdefault((r["target"], r["name"]), []).append(r)
    summary = []
    for (target, name), group in rows.items():
        values = [r[metric] for r in group]
        first = group[0]
        summary.append(
            {
                "target": target,
                "name": name,
                "title": first["title"],
                "non_embedding_params": first["non_embedding_params"],
                "mean": statistics.fmean(values),
                "min": min(values),
                "max": max(values),
                "seeds": len(values),
            }
        )
    return summary


def ordering_notes(rows: list[dict], order, higher_is_better: bool = False) -> list[str]:
    """Where the measured ranking inverts the lectures' `order` (worst first; a tuple in it is a group the lectures
    do not rank, e.g. Bahdanau's and Luong's scores), and whether each such difference exceeds the seeds' spread (the
    two ranges do not overlap) or not."""
    by_name = {r["name"]: r for r in rows}
    groups = [[m for m in (g if isinstance(g, tuple) else (g,)) if m in by_name] for g in order]
    groups = [g for g in groups if g]
    notes = []
    for i, earlier_group in enumerate(groups):
        for later_group in groups[i + 1 :]:
            for earlier in earlier_group:
                for later in later_group:
                    a, b = by_name[earlier], by_name[later]
                    worse = b["mean"] < a["mean"] if higher_is_better else b["mean"] > a["mean"]
                    if not worse:
                        continue
                    clear = b["max"] < a["min"] if higher_is_better else b["min"] > a["max"]
                    seeded = max(a["seeds"], b["seeds"]) > 1
                    notes.append(
                        f"{later} ({b['mean']:.3f}) is worse than {earlier} ({a['mean']:.3f})"
                        + ("" if not seeded else (", beyond the seeds' spread" if clear else ", within the spread"))
                    )
    return notes


def separations(rows: list[dict], higher_is_better: bool = False) -> list[str]:
    """Neighbours in the measured order (best first) whose seed ranges do not overlap: the differences the seeds
    resolve."""
    ranked = sorted(rows, key=lambda r: -r["mean"] if higher_is_better else r["mean"])
    sign = ">" if higher_is_better else "<"
    resolved = []
    for a, b in zip(ranked, ranked[1:]):
        apart = b["max"] < a["min"] if higher_is_better else a["max"] < b["min"]
        if max(a["seeds"], b["seeds"]) > 1 and apart:
            resolved.append(f"{a['name']} {sign} {b['name']}")
    return resolved


def ordering_lines(rows: list[dict], order, seeds: int, higher_is_better: bool = False) -> list[str]:
    """The report's paragraph under a size's table: the measured order (best first, with the seeds' range), the
    lectures' order and its inversions, and the differences the seeds resolve."""
    ranked = sorted(rows, key=lambda r: -r["mean"] if higher_is_better else r["mean"])
    spread = lambda r: "" if r["seeds"] == 1 else f" [{r['min']:.3f}-{r['max']:.3f}]"
    present = {r["name"] for r in rows}
    names = lambda g: " ~ ".join(m for m in (g if isinstance(g, tuple) else (g,)) if m in present)
    lectures = [names(g) for g in order if names(g)]
    notes, resolved = ordering_notes(rows, order, higher_is_better), separations(rows, higher_is_better)
    sign = " > " if higher_is_better else " < "
    return [
        "",
        "Measured order, best first: " + sign.join(f"{r['name']} {r['mean']:.3f}{spread(r)}" for r in ranked),
        "",
        "Lectures' order, worst first: "
        + (" < " if higher_is_better else " > ").join(lectures)
        + ". "
        + ("Inversions: " + "; ".join(notes) + "." if notes else "No inversion: the measured order is the lectures'.")
        + (f" Differences beyond the seeds' spread: {', '.join(resolved)}." if seeds > 1 else ""),
        "",
    ]


# ---------------------------------------------------------------------------------------------- extrapolation
def lower_envelope(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points (x, y) lower than every point at a smaller x: the best y reached by each x (a compute frontier)."""
    frontier, best = [], math.inf
    for x, y in sorted(points):
        if y < best:
            frontier.append((x, y))
            best = y
    return frontier


def fit_power_law(points: list[tuple[float, float]]) -> dict | None:
    """Least squares fit of y = E + A x^-alpha (a loss against compute, Kaplan et al. 2020; Hoffmann et al. 2022) to
    at least four points: for each floor E on a grid below the lowest y, log(y - E) is a line in log x; the E whose
    curve has the smallest squared error in y wins. None when the points do not fall with x."""
    import numpy as np

    if len(points) < 4:
        return None
    x, y = (np.asarray(v, dtype=float) for v in zip(*points))
    best = None
    for floor in np.linspace(0.0, y.min(), 400, endpoint=False):
        slope, intercept = np.polyfit(np.log(x), np.log(y - floor), 1)
        if slope >= 0:
            continue
        error = float(((floor + np.exp(intercept) * x**slope - y) ** 2).sum())
        if best is None or error < best["error"]:
            best = {"floor": float(floor), "scale": float(np.exp(intercept)), "alpha": float(-slope), "error": error}
    return best


def power_law_reaches(fit: dict, y: float) -> float:
    """The x at which the fitted curve comes down to y (infinite when y is at or below its floor)."""
    if y <= fit["floor"]:
        return math.inf
    return ((y - fit["floor"]) / fit["scale"]) ** (-1 / fit["alpha"])


# ---------------------------------------------------------------------------------------------- plots
def save_log_plot(fig, ax, xlabel: str, ylabel: str, title: str, path: Path, log_x: bool = True) -> None:
    """The lineage's plots: a log x axis, a grid, the legend, saved at 120 dpi."""
    import matplotlib.pyplot as plt

    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_scaling(summary: list[dict], metric: str, path: Path, title: str) -> None:
    """`metric` against non-embedding parameters, one line per member (a member without such parameters, the
    n-gram, as a horizontal line), with the seeds' range as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name in dict.fromkeys(row["name"] for row in summary):
        rows = sorted((r for r in summary if r["name"] == name), key=lambda r: r["target"])
        if rows[0]["non_embedding_params"] is None:
            ax.axhline(rows[0]["mean"], ls="--", color="gray", label=rows[0]["title"])
            continue
        x = [r["non_embedding_params"] for r in rows]
        y = [r["mean"] for r in rows]
        spread = [[r["mean"] - r["min"] for r in rows], [r["max"] - r["mean"] for r in rows]]
        ax.errorbar(x, y, yerr=spread, fmt="o-", ms=4, lw=1.5, capsize=3, label=rows[0]["title"])
    save_log_plot(fig, ax, "non-embedding parameters", metric.replace("_", " "), title, path)
