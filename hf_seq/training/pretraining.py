"""The training loop: plain PyTorch driven by `accelerate`, so one recipe runs on a CPU, one GPU, or many processes
under `accelerate launch` (DDP, FSDP, DeepSpeed) without code changes. What the data is and how a model is scored
comes from the task table (`hf_seq.data.tasks`); checkpoints and kept weights from `hf_seq.training.checkpointing`; what fine-tuning
shares with this loop from `hf_seq.training.runs`. This file only trains: `run` is `setup`, `loop`, `finish`, and returns the
run as a value (`runs.RunResult`).

Exactness is a design goal, not an accident:
- batches are indexed by step: step s of epoch e takes blocks s*B ... (s+1)*B of a permutation seeded by (seed, e),
  and process p of P takes every P-th of those; so a resumed run sees exactly the batches it would have seen, and P
  processes see the same global batch as one;
- the loss is summed over the global batch and divided by its number of predicted tokens (`num_items_in_batch`,
  counted across processes and accumulation steps), so gradient accumulation and data parallelism change nothing;
- checkpoints are written whole or not at all and hold no code (`hf_seq.training.checkpointing`);
- Ctrl-C or SIGTERM (a scheduler's preemption notice) saves a checkpoint of the current step before exiting;
- evaluation runs under a forked RNG, so evaluating does not change what training draws next.
"""

import contextlib
import dataclasses
import functools
import io
import json
import os
import signal
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from transformers import get_scheduler

from hf_seq.data import corpora as data_lib
from hf_seq.data import tasks
from hf_seq.data.streaming import BlockStream
from hf_seq.errors import InvalidValueError
from hf_seq.training import sharding
from hf_seq.training.checkpointing import (
    average_snapshots,
    averaged_steps,
    check_output_dir,
    keep_best,
    keep_snapshot,
    last_finite_checkpoint,
    load_checkpoint,
    save_checkpoint,
    snapshot_steps,
)
from hf_seq.training.divergence import Diverged, DivergenceError, check_loss, explain
from hf_seq.training.memory import check_recipe_fits
from hf_seq.training.recipes import SELECT_BY, Recipe, RecipeError, resolve_tracker
from hf_seq.training.runs import (
    RunResult,
    budget_note,
    build_config,
    build_model,
    check_batch_split,
    check_precision,
    choose_threads,
    evaluate_folder,
    save_run_files,
)
from hf_seq.training.schedules import PROGRESS_SCHEDULES, ProgressSchedule

# Evaluation entries that are settings, not measurements: in metrics.json, not in the progress lines
DECODING_KEYS = {"num_beams", "do_sample", "length_penalty", "early_stopping", "max_length_a", "max_length_b"}
# The step limit of a run whose budget is seconds alone: none (its schedule follows its progress through the seconds).
UNPLANNED_STEPS = 10**9


@dataclass
class TrainState:
    """What a checkpoint's state.json holds besides the schedule: where the run is, what it has measured, and the
    evaluation model selection keeps (`best`: step, metric, evaluations waited since)."""

    step: int = 0
    planned_steps: int = UNPLANNED_STEPS
    losses: list = field(default_factory=list)
    evaluations: list = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    real_tokens: int = 0  # not padding; for sentence pairs, source and target
    padded_tokens: int = 0  # sentence pairs: both sides as batched
    best: dict | None = None
    learning_rates: list = field(default_factory=list)  # each step's rate, as it ran
    eval_seconds: float = 0.0  # time spent in evaluations, kept apart from the steps' speed
    stopped_early: int | None = None

    @classmethod
    def from_json(cls, saved: dict) -> "TrainState":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


@dataclass
class Session:
    """Everything `setup` builds for the loop and `finish`: the accelerator, the data, the model (`model` as
    prepared or sharded, `plain` the module itself, which is evaluated and saved), the optimizer and schedule."""

    recipe: Recipe
    accelerator: Accelerator
    prepared: tasks.Prepared
    model: torch.nn.Module
    plain: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    collator: object
    state: TrainState
    distributed: dict
    fsdp: object = None  # the FSDP settings of the launch, if any
    tracker: str | None = None

    @property
    def output_dir(self) -> Path:
        return Path(self.recipe.training.output_dir)

    @property
    def shards(self):
        return (self.model, self.optimizer) if self.fsdp else None


# ---------------------------------------------------------------------------------------------- the run
def run(recipe: Recipe, resume: bool = False, progress: bool = True, overwrite: bool = False, prepared=None):
    """Train `recipe`, save the final model, tokenizer, card, metrics and loss curve in training.output_dir, and
    return the run (`RunResult`: the model trained, its tokenizer, evaluations and summary). `prepared`: the data
    already prepared by `tasks.prepare` for this recipe (a study prepares it once for all its members)."""
    session = setup(recipe, resume, overwrite, prepared)
    loop(session, progress)
    return finish(session)


def setup(recipe: Recipe, resume: bool, overwrite: bool, prepared=None) -> Session:
    """Check the recipe against the launch, make the run folder, read the data, build the model, optimizer and
    schedule (sharded under FSDP), and load the checkpoint to resume from."""
    t = recipe.training
    output_dir = Path(t.output_dir)
    check_precision(t)
    fsdp = sharding.requested()  # `accelerate launch --config_file recipes/accelerate/fsdp.yaml`
    check_launch(t, fsdp)
    tracker = resolve_tracker(t.log_with)
    on_cpu = not (torch.cuda.is_available() or torch.backends.mps.is_available())
    # cpu=True on a machine without an accelerator makes torchrun's processes join over gloo (multi-CPU data parallel)
    accelerator = Accelerator(
        mixed_precision=t.mixed_precision,
        log_with=tracker,
        project_dir=str(output_dir),
        cpu=on_cpu,
        dynamo_backend="inductor" if t.compile else None,
    )
    note_launch_shortfall(accelerator, fsdp)
    check_batch_split(t, accelerator.num_processes)
    check_recipe_fits(recipe, accelerator.device, accelerator.num_processes)  # before any data or weights
    if accelerator.is_main_process:
        check_output_dir(recipe, output_dir, resume, overwrite)
    accelerator.wait_for_everyone()
    torch.set_num_threads(choose_threads(t.threads))
    torch.set_flush_denormal(True)
    (output_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process and not resume:
        (output_dir / "checkpoints" / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2))
    prepared = prepared or prepare_data(recipe, accelerator)
    check_data(recipe, prepared, accelerator)
    set_seed(t.seed)
    model = build_model(recipe, prepared)
    collator = prepared.task.collator(recipe, prepared.tokenizer, model)
    if fsdp:  # hf-seq shards the model itself (hf_seq/training/sharding.py); accelerate launched the processes
        model = shard_model(model, fsdp, accelerator, t)
        optimizer = make_optimizer(model, t, accelerator)
    else:
        model, optimizer = accelerator.prepare(model, make_optimizer(model, t, accelerator))
    plain = accelerator.unwrap_model(model, keep_torch_compile=False)  # the model itself: evaluated, saved
    distributed = describe_distributed(accelerator, fsdp, t, plain)
    if accelerator.num_processes > 1 or fsdp:
        accelerator.print(f"distributed: {distributed['distributed_type']} over {accelerator.num_processes} processes")
    step_cap = t.max_steps or UNPLANNED_STEPS  # max_seconds alone: no step limit
    state = TrainState(planned_steps=step_cap)
    scheduler = make_scheduler(t, optimizer)
    session = Session(recipe, accelerator, prepared, model, plain, optimizer, scheduler, collator, state, distributed)
    session.fsdp, session.tracker = fsdp, tracker
    if resume:
        session.state = TrainState.from_json(
            load_checkpoint(accelerator, output_dir, scheduler, shards=session.shards, data=prepared.train)
        )
        saved = json.loads((output_dir / "checkpoints" / "recipe.json").read_text())
        if saved["training"].get("select_by") != t.select_by:  # a new measure: its choice starts from the resume
            session.state.best = None
        # a resumed run may be given a new budget (max_steps, max_seconds, decay_fraction): its schedule ends there
        session.state.planned_steps = step_cap
        if not isinstance(scheduler, ProgressSchedule):
            session.scheduler = _scheduler(t, optimizer, step_cap, state_dict=scheduler.state_dict())
    if budget_note(t):
        accelerator.print(budget_note(t))
    if tracker:
        accelerator.init_trackers(output_dir.name, config={k: str(v) for k, v in recipe.to_dict().items()})
    return session


def check_launch(t, fsdp) -> None:
    """What the launch asks for against what the recipe says, before anything is read."""
    launched = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    if launched not in ("no", t.mixed_precision) and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        print(
            f"note: the launch config asks for mixed_precision {launched!r}; the run follows the recipe's "
            f"training.mixed_precision={t.mixed_precision!r} (set it in the recipe or as an override)"
        )
    if fsdp and (t.select_by or t.average_checkpoints):
        raise RecipeError(
            "training.select_by and training.average_checkpoints are not supported with FSDP yet: the weights they "
            "keep are whole"
        )
    if fsdp and t.mixed_precision == "fp16":
        raise RecipeError("training.mixed_precision='fp16' is not supported with FSDP in hf-seq; use 'bf16'")


def note_launch_shortfall(accelerator: Accelerator, fsdp) -> None:
    """One line at the start when `accelerate launch` asked for a distributed type or a number of processes this run
    does not have. Its simple launcher (taken with `--cpu`, or for a CPU config) starts one process whatever
    --num_processes or the config's distributed_type say; it exports ACCELERATE_USE_CPU, and MASTER_ADDR when asked
    for several processes, but neither the number nor the type, so those are read from its command line."""
    if "ACCELERATE_USE_CPU" not in os.environ or "WORLD_SIZE" in os.environ:
        return  # not the simple launcher (accelerate starts multi-process configs through torch's, which sets both)
    count, kind, cpu_flag = _launch_request(_launcher_argv())
    several = "MASTER_ADDR" in os.environ  # the simple launcher sets it when asked for 2 processes or more
    ran, n = ("FSDP" if fsdp else str(accelerator.distributed_type).split(".")[-1]), accelerator.num_processes
    if (count or (2 if several else 1)) <= n and kind in (None, "NO", ran):
        return
    asked = [kind] if kind not in (None, "NO") else []
    if count and count > 1:
        asked.append(f"{count} processes")
    elif several and not count:  # its command line was not readable
        asked.append("several processes")
    advice = "leave out --cpu to start them" if cpu_flag else "several CPU processes: torchrun, docs/cluster.md"
    accelerator.print(
        f"note: accelerate launch asked for {' over '.join(asked)}, but its one-process launcher started {n} process"
        f"{'es' if n > 1 else ''}, {'not distributed' if ran == 'NO' else ran} ({advice})"
    )


def _launcher_argv() -> list[str]:
    """The command line of this process's parent: `accelerate launch`'s simple launcher runs the script as its child."""
    try:
        import psutil  # an accelerate dependency

        return psutil.Process().parent().cmdline()
    except Exception:  # no parent, or not readable
        return []


def _launch_request(argv: list[str]) -> tuple[int | None, str | None, bool]:
    """(num_processes, distributed_type, whether --cpu was given) that an `accelerate launch` command line and the
    config file it reads ask for, resolved as accelerate resolves them; (None, None, False) for any other command."""
    from accelerate.commands.config.config_args import default_config_file, load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    names = ("accelerate-launch", "accelerate.commands.launch")
    start = next((i for i, arg in enumerate(argv) if arg == "launch" or arg.endswith(names)), None)
    if start is None:
        return None, None, False
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage line, for a command it cannot read
            args, _ = launch_command_parser().parse_known_args(argv[start + 1 :])
        use_file = args.config_file is not None or (not args.cpu and os.path.isfile(default_config_file))
        config = load_config_from_file(args.config_file) if use_file else None
    except (SystemExit, OSError, ValueError):  # a command line or config file accelerate itself would refuse
        return None, None, False
    flags = {"FSDP": args.use_fsdp, "DEEPSPEED": args.use_deepspeed, "MULTI_GPU": args.multi_gpu}
    kind = next((name for name, given in flags.items() if given), None)
    if kind is None and config is not None:
        kind = str(config.distributed_type).split(".")[-1]
    count = args.num_processes or (config.num_processes if config is not None else None)
    return count, kind, bool(args.cpu)


def prepare_data(recipe: Recipe, accelerator: Accelerator) -> tasks.Prepared:
    """The recipe's data, with its tokenizer trained (or loaded) once and kept in the run's checkpoints folder."""
    return tasks.prepare(
        recipe,
        tokenizer_folder=Path(recipe.training.output_dir) / "checkpoints" / "tokenizer",
        is_main=accelerator.is_main_process,
        wait=accelerator.wait_for_everyone,
        main_first=accelerator.main_process_first,
        process_index=accelerator.process_index,
        num_processes=accelerator.num_processes,
    )


def check_data(recipe: Recipe, prepared: tasks.Prepared, accelerator: Accelerator) -> None:
    train_set, batch_size = prepared.train, recipe.training.batch_size
    if not isinstance(train_set, BlockStream) and len(train_set) < batch_size:
        raise InvalidValueError(
            f"the training data has {len(train_set)} examples, fewer than one batch of {batch_size}"
        )
    for key, count in prepared.notes.items():
        if "truncated" in key and count:
            accelerator.print(f"note: {count} {key.replace('_', ' ')} (longer than data.block_size)")


def loop(session: Session, progress: bool) -> None:
    """Steps until the planned end, a time limit or early stopping; evaluations every training.eval_every steps and
    at the end; checkpoints every training.save_every steps and on Ctrl-C / SIGTERM (which then exits)."""
    s, recipe, t, accelerator = session.state, session.recipe, session.recipe.training, session.accelerator
    total = None if s.planned_steps >= UNPLANNED_STEPS else s.planned_steps  # a seconds budget: the bar counts up
    by_progress, recent = isinstance(session.scheduler, ProgressSchedule), []  # the last steps' seconds
    disable = not (progress and accelerator.is_local_main_process)
    bar = tqdm(total=total, initial=s.step, desc="training", disable=disable)
    start_time = time.perf_counter() - s.seconds
    session.model.train()
    with StopRequest() as stop:
        while s.step < s.planned_steps:
            set_scheduled_sampling(recipe, session.plain, s.step)
            batches = global_batch(
                session.prepared.train, session.collator, s.step, t, accelerator, recipe.data.shuffle,
                recipe.data.batch_tokens,
            )  # fmt: skip
            if by_progress:  # the rate of this step, from where the run will be when it ends (every process agrees)
                session.scheduler.advance(_agreed(accelerator, s.seconds + _step_seconds(recent) + _eval_reserve(s)))
            s.learning_rates.append(session.optimizer.param_groups[0]["lr"])
            before = s.seconds
            try:
                loss = train_step(
                    session.model, session.optimizer, session.scheduler, batches, session.prepared.task, t,
                    accelerator, sharded=bool(session.fsdp),
                )  # fmt: skip
            except Diverged as diverged:
                bar.close()
                stop_diverged(session, diverged, s.step + 1)
            s.step += 1
            s.tokens += sum(session.prepared.task.count_inputs(b) for b in batches) * accelerator.num_processes
            count_tokens(s, batches, session.prepared.task, accelerator)
            s.seconds = time.perf_counter() - start_time
            recent[:] = [*recent[-9:], s.seconds - before]
            s.losses.append(loss)
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{s.learning_rates[-1]:.2e}")
            if session.tracker:
                accelerator.log({"train/loss": loss, "train/lr": s.learning_rates[-1]}, step=s.step)
            if s.step == 10 and t.max_seconds and accelerator.is_main_process:
                bar.write(f"step 10: {_budget_progress_note(t, s, _step_seconds(recent))}")
            done = by_progress and _any(accelerator, session.scheduler.done)  # this step ran at the end of the budget
            last = s.step >= s.planned_steps or done or _out_of_time(t, s, accelerator)
            if s.step % t.eval_every == 0 or last:
                last = evaluate_now(session, bar, last)
            interrupted = _any(accelerator, stop.signal is not None)
            # a run that ends in its stable phase (no decay) keeps a checkpoint to be continued from
            stable_end = last and by_progress and session.scheduler.continuable
            if (s.step % t.save_every == 0 and not last) or interrupted or stable_end:
                save_checkpoint(
                    accelerator, session.output_dir, dataclasses.asdict(s), session.scheduler, t.keep_checkpoints,
                    shards=session.shards, data=session.prepared.train,
                )  # fmt: skip
            if interrupted:
                bar.close()
                accelerator.print(
                    f"\n{stop.signal or 'stop'}: saved a checkpoint of step {s.step} in {session.output_dir}/"
                    "checkpoints; continue with the same command and --resume"
                )
                raise SystemExit(130 if stop.signal == "SIGINT" else 143)
            if last:
                break
    bar.close()
    if session.tracker:
        accelerator.end_training()


def evaluate_now(session: Session, bar, last: bool) -> bool:
    """One periodic evaluation, logged and shown; keeps the weights model selection or averaging needs. Returns
    whether this is the last step: `last`, or training.patience says to stop here."""
    s, recipe, t, accelerator = session.state, session.recipe, session.recipe.training, session.accelerator
    started = time.perf_counter()
    metrics = tasks.evaluate(recipe, session.prepared, session.plain, accelerator.device)
    elapsed = time.perf_counter() - started
    s.evaluations.append({"step": s.step, "tokens": s.tokens, "seconds": s.seconds} | metrics)
    if isinstance(metrics.get("eval_loss"), float):
        try:
            check_loss(metrics["eval_loss"], t, held_out=True)
        except Diverged as diverged:
            bar.close()
            stop_diverged(session, diverged, s.step)
    s.eval_seconds += elapsed
    s.seconds += elapsed  # the run's clock so far includes this evaluation
    if session.tracker:
        accelerator.log({f"eval/{k}": v for k, v in metrics.items()}, step=s.step)
    if accelerator.is_main_process:
        shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and k not in DECODING_KEYS}
        bar.write(f"step {s.step}: " + ", ".join(_show(k, v) for k, v in shown.items()))
    if t.average_checkpoints:
        keep_snapshot(accelerator, session.plain, session.output_dir, s, t)
    if not (t.select_by and keep_best(accelerator, session.plain, session.output_dir, s, metrics, t)) or last:
        return last
    s.stopped_early = s.step
    key, higher = SELECT_BY[t.select_by]
    accelerator.print(
        f"step {s.step}: {t.patience} evaluations without a {'higher' if higher else 'lower'} "
        f"{key} than step {s.best['step']}'s (training.patience): stopping"
    )
    return True


def finish(session: Session) -> RunResult:
    """Keep the selected or averaged weights, save the model (whole: one model.safetensors, also after a sharded
    run), tokenizer, metrics, recipe, loss curve and card, and return the run."""
    s, recipe, accelerator, prepared = session.state, session.recipe, session.accelerator, session.prepared
    output_dir, t, plain = session.output_dir, recipe.training, session.plain
    final = s.evaluations[-1] if s.evaluations else {}
    if s.best:  # training.select_by: the model saved, and the figures reported, are the best evaluation's
        from safetensors.torch import load_model

        load_model(plain, output_dir / "checkpoints" / "best.safetensors")
        final = next(e for e in s.evaluations if e["step"] == s.best["step"])
    averaged = None
    if t.average_checkpoints:  # the mean of several evaluations' weights, scored again
        averaged = averaged_steps(snapshot_steps(output_dir), t.average_checkpoints, s.best and s.best["step"])
        average_snapshots(plain, output_dir, averaged)
        final = tasks.evaluate(recipe, prepared, plain, accelerator.device)
    summary = summarize(session, final, averaged)
    accelerator.wait_for_everyone()
    # collectives: every process takes part in gathering the FSDP / ZeRO-3 shards
    sharded = bool(session.fsdp)
    state_dict = sharding.full_state_dict(session.model) if sharded else accelerator.get_state_dict(session.model)
    state_dict = {k.removeprefix("_orig_mod."): v for k, v in state_dict.items()}  # the names under torch.compile
    unwrapped = sharding.unsharded_twin(plain) if sharded else plain
    if prepared.task.generates:
        tasks.set_decoding(unwrapped, recipe)  # generation_config.json: the folder decodes as the evaluations did
    unwrapped.save_pretrained(
        output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save, state_dict=state_dict
    )
    if accelerator.is_main_process:
        history = {"evaluations": s.evaluations, "learning_rates": thinned_rates(s.learning_rates)}
        curve = {"losses": s.losses, "evaluations": s.evaluations}
        save_run_files(recipe, output_dir, prepared.tokenizer, unwrapped.config, summary, history, curve)
    accelerator.wait_for_everyone()
    return RunResult(
        plain.eval(), prepared.tokenizer, s.evaluations, summary, output_dir, accelerator.device, prepared, recipe
    )


def summarize(session: Session, final: dict, averaged: list[int] | None) -> dict:
    """metrics.json's summary: the run's steps, tokens and time, how it ran, and the final (or selected) figures."""
    s, recipe, prepared = session.state, session.recipe, session.prepared
    rows = len(prepared.train) if hasattr(prepared.train, "__len__") else None
    processes = session.accelerator.num_processes
    return {
        "steps": s.step,
        "tokens": s.tokens,
        "seconds": s.seconds,
        "eval_seconds": s.eval_seconds,  # of `seconds`, the periodic evaluations'
        "tokens_per_second": s.tokens / max(s.seconds, 1e-9),
        "final_train_loss": s.losses[-1] if s.losses else None,
        "schedule": describe_schedule(session),
        "final_learning_rate": s.learning_rates[-1] if s.learning_rates else None,  # the last step's rate
        "epochs": epochs_trained(recipe, prepared.train, s.step, processes) if rows else None,
        **token_summary(s),
        **({"best_step": s.best["step"], "selected_by": recipe.training.select_by} if s.best else {}),
        **({"averaged_checkpoints": averaged} if averaged else {}),
        **({"stopped_early": s.stopped_early} if s.stopped_early is not None else {}),
        **{k: v for k, v in prepared.notes.items() if k.startswith("train_")},
        **{k: v for k, v in final.items() if k not in ("step", "tokens", "seconds")},
        **session.distributed,
    }


# ---------------------------------------------------------------------------------------------- model and optimizer
def decay_parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices only, not on biases and norm gains (GPT-2 / BERT practice)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, t, accelerator: Accelerator) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        decay_parameter_groups(model, t.weight_decay),
        lr=t.learning_rate,
        betas=(0.9, t.adam_beta2),
        fused=accelerator.device.type == "cuda",  # one kernel for the whole update on a GPU
    )


def shard_model(model: torch.nn.Module, settings, accelerator: Accelerator, t) -> torch.nn.Module:
    """FSDP2 units over the processes (hf_seq/training/sharding.py), the recipe's autocast on the forward (the parameters
    stay fp32, as in an unsharded run), and `training.compile` in place."""
    import types

    model.to(accelerator.device)
    units = sharding.shard(model, settings)
    accelerator.print(
        f"FSDP2: {', '.join(units) or 'the whole model'} sharded over {accelerator.num_processes} process(es)"
    )
    if t.mixed_precision != "no":
        dtype = torch.bfloat16 if t.mixed_precision == "bf16" else torch.float16
        autocast = torch.autocast(accelerator.device.type, dtype=dtype)
        model.forward = types.MethodType(autocast(type(model).forward), model)
    if t.compile:
        model.compile()
    return model


def describe_distributed(accelerator: Accelerator, fsdp, t, model) -> dict:
    """How the run ran, for metrics.json and the card: what sharded it, over how many processes, in which precision,
    and the share of the parameters one process held."""
    kind = "FSDP" if fsdp else str(accelerator.distributed_type).split(".")[-1]
    return {
        "distributed_type": kind,
        "num_processes": accelerator.num_processes,
        "mixed_precision": t.mixed_precision,
        "parameters_per_process": round(sharding.local_share(model), 4),
    }


class StopRequest:
    """Turns Ctrl-C / SIGTERM into a request the loop honours at the end of the current step. A Ctrl-C after a stop
    was requested stops at once; a repeated SIGTERM does not, because on a cluster one notice can arrive twice (Slurm
    signals every process of a job step, and torchrun's agent forwards the SIGTERM it gets to its workers)."""

    def __init__(self):
        self.signal = None

    def __enter__(self):
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum, frame):
        if self.signal is not None:
            if signum == signal.SIGINT:  # a second Ctrl-C: stop now
                raise KeyboardInterrupt
            return
        self.signal = signal.Signals(signum).name

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


# ---------------------------------------------------------------------------------------------- steps and batches
def global_batch(
    train_set, collator, step: int, t, accelerator, shuffle: bool = True, batch_tokens: int | None = None
) -> list[dict]:
    """This process's micro-batches of step `step`: the step's rows of a permutation seeded by (seed, epoch) (with
    `data.shuffle: false`, of the blocks in order), or with `data.batch_tokens` the step's batch of
    `data.token_budget_batches`; every P-th of them for process p of P, cut into gradient-accumulation micro-batches
    (as equal as the rows allow). A stream (`data.streaming`) gives each process its own next B/P blocks."""
    processes, parts = accelerator.num_processes, t.gradient_accumulation_steps
    if isinstance(train_set, BlockStream):
        features = train_set.take(t.batch_size // processes)
    else:
        if batch_tokens:  # the same number of batches every epoch: the cuts depend on the lengths alone
            per_epoch = len(budget_batches(train_set, batch_tokens, t.seed, 0, processes * parts, shuffle))
            epoch, index = divmod(step, per_epoch)
            rows = budget_batches(train_set, batch_tokens, t.seed, epoch, processes * parts, shuffle)[index]
        else:
            epoch, index = divmod(step, len(train_set) // t.batch_size)
            generator = torch.Generator().manual_seed(t.seed * 100003 + epoch)
            order = torch.randperm(len(train_set), generator=generator) if shuffle else torch.arange(len(train_set))
            rows = order[index * t.batch_size : (index + 1) * t.batch_size].tolist()
        features = [train_set[i] for i in rows[accelerator.process_index :: processes]]
    bounds = [len(features) * k // parts for k in range(parts + 1)]
    batches = [collator(features[a:b]) for a, b in zip(bounds, bounds[1:])]
    return [{k: v.to(accelerator.device) for k, v in b.items() if k != "special_tokens_mask"} for b in batches]


@functools.lru_cache(maxsize=4)
def budget_batches(train_set, batch_tokens: int, seed: int, epoch: int, min_rows: int, shuffle: bool) -> list:
    """`data.batch_tokens`: the batches of one epoch (rows x (longest source + longest target) <= batch_tokens, at
    least `min_rows` rows each), computed once per epoch."""
    lengths = (data_lib.sequence_lengths(train_set, column) for column in ("input_ids", "labels"))
    return data_lib.token_budget_batches(*lengths, batch_tokens, seed, epoch, min_rows=min_rows, shuffle=shuffle)


def epochs_trained(recipe: Recipe, train_set, steps: int, processes: int) -> float:
    """Passes over the training rows: steps x batch_size / rows, or with data.batch_tokens steps / batches an epoch."""
    d, t = recipe.data, recipe.training
    if not d.batch_tokens:
        return steps * t.batch_size / len(train_set)
    min_rows = processes * t.gradient_accumulation_steps
    return steps / len(budget_batches(train_set, d.batch_tokens, t.seed, 0, min_rows, d.shuffle))


def count_tokens(state: TrainState, batches: list[dict], task, accelerator) -> None:
    """Add the step's real tokens (not padding; for sentence pairs the source and the target side) to
    state.real_tokens, and for sentence pairs the padded size of both sides to state.padded_tokens, summed over the
    processes: padding_fraction = 1 - real / padded."""
    pairs = "source" in task.columns
    real = sum(task.count_real(b) for b in batches)
    padded = 0
    if pairs:
        real = real + sum(b["labels"].ne(-100).sum() for b in batches)
        padded = sum(b["input_ids"].numel() + b["labels"].numel() for b in batches)
    counts = torch.tensor([int(real), padded], device=accelerator.device)
    if accelerator.num_processes > 1:
        counts = accelerator.reduce(counts, reduction="sum")
    state.real_tokens += int(counts[0])
    if pairs:
        state.padded_tokens += int(counts[1])


def token_summary(state: TrainState) -> dict:
    """metrics.json: real (non-padding) tokens, and for sentence pairs the share of padding in the training batches."""
    padded = state.padded_tokens
    return {
        "real_tokens": state.real_tokens if state.step else None,
        **({"padding_fraction": 1 - state.real_tokens / padded} if padded else {}),
    }


def stop_diverged(session: Session, diverged: Diverged, step: int) -> None:
    """Keep the last finite weights as a checkpoint, record why the run stopped in metrics.json, and raise the
    one-line error."""
    s, t, recipe, accelerator = session.state, session.recipe.training, session.recipe, session.accelerator
    finite = all(bool(torch.isfinite(p).all()) for p in session.plain.parameters())
    if s.step > 0 and finite:  # the weights the step that diverged started from (that step was not applied)
        save_checkpoint(accelerator, session.output_dir, dataclasses.asdict(s), session.scheduler,
                        t.keep_checkpoints, shards=session.shards, data=session.prepared.train)  # fmt: skip
    kept = last_finite_checkpoint(session.output_dir)
    loss_name = "held_out_loss" if diverged.held_out else "training_loss"
    stopped = {"reason": "diverged", "step": step, loss_name: diverged.loss, "grad_norm": diverged.grad_norm,
               "last_finite_checkpoint": str(kept) if kept else None}  # fmt: skip
    if accelerator.is_main_process:
        summary = {"steps": s.step, "tokens": s.tokens, "seconds": s.seconds, "losses": s.losses}
        metrics = {"stopped": stopped, **summary, "evaluations": s.evaluations}
        (session.output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    raise DivergenceError(explain(diverged, step, recipe, kept, session.output_dir / "metrics.json"))


def train_step(model, optimizer, scheduler, batches: list[dict], task, t, accelerator, sharded: bool = False) -> float:
    """One optimizer step over the global batch; returns its mean loss per predicted token. `sharded`: an FSDP2
    model, which reduce-scatters its gradients itself (once per step: the last micro-batch) and clips them as
    DTensors."""
    predicted = sum(task.count_predicted(b) for b in batches)
    num_items = accelerator.reduce(torch.tensor(predicted, device=accelerator.device), reduction="sum")
    step_loss = torch.zeros((), device=accelerator.device)
    for k, batch in enumerate(batches):
        if sharded:
            model.set_requires_gradient_sync(k == len(batches) - 1)
        with contextlib.nullcontext() if k == len(batches) - 1 or sharded else accelerator.no_sync(model):
            # summed over this micro-batch / tokens of the whole global batch; DDP and FSDP average over processes
            loss = model(**batch, num_items_in_batch=num_items).loss
            accelerator.backward(loss * accelerator.num_processes)
        step_loss += loss.detach()
    norm = None
    if t.max_grad_norm and sharded:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.max_grad_norm)
    elif t.max_grad_norm:
        norm = accelerator.clip_grad_norm_(model.parameters(), t.max_grad_norm)
    loss = accelerator.reduce(step_loss, reduction="sum")
    if norm is None:
        mean_loss, grad_norm = loss.item(), None
    else:  # one transfer for both numbers (an FSDP norm is a DTensor: its full value)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        mean_loss, grad_norm = torch.stack([loss.float(), norm.float()]).tolist()
    check_loss(mean_loss, t, grad_norm)  # before the optimizer: the weights stay as they were when the step went wrong
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return mean_loss


def set_scheduled_sampling(recipe: Recipe, model, step: int) -> None:
    """`training.scheduled_sampling` (decay, k, c, minimum): the probability that the decoder reads its own
    prediction, decayed as Bengio et al. (2015) describe, set on the model's config before each step."""
    if recipe.training.scheduled_sampling:
        from hf_seq.training.schedules import scheduled_sampling_probability

        model.config.scheduled_sampling = scheduled_sampling_probability(step, **recipe.training.scheduled_sampling)


def _scheduler(t, optimizer, steps: int, state_dict: dict | None = None):
    # transformers' schedules; "inverse_sqrt" is Vaswani et al.'s eq. 3 relative to the peak rate (hf_seq.training.schedules)
    scheduler = get_scheduler(t.scheduler, optimizer, num_warmup_steps=t.warmup_steps, num_training_steps=steps)
    if state_dict is not None:  # continue at the same step, on the (possibly re-planned) schedule
        scheduler.load_state_dict({**state_dict, "lr_lambdas": [None] * len(scheduler.lr_lambdas)})
        rates = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
        for group, lr in zip(optimizer.param_groups, rates):
            group["lr"] = lr
        scheduler._last_lr = rates
    return scheduler


def make_scheduler(t, optimizer):
    """The recipe's schedule: a function of the run's progress through its budget (`ProgressSchedule`) for wsd, and
    for cosine, linear and constant under a seconds budget; transformers' schedule of the step otherwise."""
    if t.scheduler == "wsd" or (t.max_seconds and t.scheduler in PROGRESS_SCHEDULES):
        return ProgressSchedule(optimizer, t.scheduler, t.warmup_steps, t.max_steps, t.max_seconds, t.decay_fraction)
    return _scheduler(t, optimizer, t.max_steps or UNPLANNED_STEPS)


def describe_schedule(session: Session) -> dict:
    """metrics.json's schedule: its kind, its phases' starts in seconds, the peak and final rate."""
    s, t, scheduler = session.state, session.recipe.training, session.scheduler
    if isinstance(scheduler, ProgressSchedule):
        return scheduler.describe(s.seconds)
    final = s.learning_rates[-1] if s.learning_rates else None
    return {"kind": t.scheduler, "warmup_steps": t.warmup_steps, "steps": t.max_steps, "peak_learning_rate":
            t.learning_rate, "final_learning_rate": final}  # fmt: skip


def thinned_rates(rates: list[float], most: int = 2000) -> list[list]:
    """[step, rate] of each step (counted from 1), every k-th past `most` steps, and always the last."""
    every = max(1, -(-len(rates) // most))
    kept = [[k + 1, rate] for k, rate in enumerate(rates) if k % every == 0]
    return kept + ([[len(rates), rates[-1]]] if rates and (len(rates) - 1) % every else [])


def _step_seconds(recent: list[float]) -> float:
    """A step's seconds, as the last few measured (their median: one slow step moves it little); 0 before any."""
    return statistics.median(recent) if recent else 0.0


def _eval_reserve(state: TrainState) -> float:
    """The seconds the final evaluation will take, as the earlier ones did: kept out of the steps' share."""
    return state.eval_seconds / len(state.evaluations) if state.evaluations else 0.0


def _agreed(accelerator, seconds: float) -> float:
    """The latest of the processes' clocks: every process sets the same rate."""
    if accelerator.num_processes == 1:
        return seconds
    return accelerator.reduce(torch.tensor(seconds, device=accelerator.device), reduction="max").item()


def _budget_progress_note(t, state: TrainState, per_step: float) -> str:
    """Said at step 10: what the budget holds at the speed so far (a guide; nothing is planned from it)."""
    fit = state.step + int(max(t.max_seconds - state.seconds, 0) / per_step) if per_step > 0 else None
    speed = f"at {per_step:.3g} s/step"
    if fit is None:
        return f"{speed}: too fast to time"
    if t.max_steps is None or fit < t.max_steps:
        return f"{speed}, training.max_seconds={t.max_seconds:g} holds about {fit} steps"
    end = state.seconds + (t.max_steps - state.step) * per_step
    return (
        f"{speed}, training.max_steps={t.max_steps} ends the run, after about {end:.0f} s (within "
        f"training.max_seconds={t.max_seconds:g})"
    )


def _out_of_time(t, state: TrainState, accelerator) -> bool:
    return bool(t.max_seconds) and _any(accelerator, state.seconds >= t.max_seconds)


def _show(key: str, value) -> str:
    return f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"


def _any(accelerator, flag: bool) -> bool:
    if accelerator.num_processes == 1:
        return flag
    return bool(accelerator.reduce(torch.tensor(int(flag), device=accelerator.device), reduction="sum").item())


__all__ = ["RunResult", "TrainState", "build_config", "build_model", "evaluate_folder", "run"]
