"""The training loop: plain PyTorch driven by `accelerate`, so one recipe runs on a CPU, one GPU, or many processes
under `accelerate launch` (DDP, FSDP, DeepSpeed) without code changes. What the data is and how a model is scored
comes from the task table (`hf_seq.tasks`); this file only trains.

Exactness is a design goal, not an accident:
- batches are indexed by step: step s of epoch e takes blocks s*B ... (s+1)*B of a permutation seeded by (seed, e),
  and process p of P takes every P-th of those; so a resumed run sees exactly the batches it would have seen, and P
  processes see the same global batch as one;
- the loss is summed over the global batch and divided by its number of predicted tokens (`num_items_in_batch`,
  counted across processes and accumulation steps), so gradient accumulation and data parallelism change nothing;
- checkpoints are written to a temporary folder and renamed when complete, so a killed run never leaves a
  half-written one; they hold safetensors (model), tensors-only torch files loaded with `weights_only=True`
  (optimizer, RNG) and JSON (step, schedule, recipe): resuming runs no code from the folder;
- Ctrl-C or SIGTERM (a scheduler's preemption notice) saves a checkpoint of the current step before exiting;
- evaluation runs under a forked RNG, so evaluating does not change what training draws next.
"""

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from transformers import get_scheduler

from hf_seq import sharding, tasks
from hf_seq.checksums import record_checksums, verify_checksums
from hf_seq.errors import DamagedRunError, InvalidValueError, MissingFileError, RunExistsError
from hf_seq.recipes import SELECT_BY, Recipe, RecipeError, resolve_tracker
from hf_seq.registry import family as get_family
from hf_seq.streaming import BlockStream

CHECKPOINT_PREFIX = "checkpoint-"
# Recipe keys a resumed run may change; any other difference from the interrupted run is refused.
RESUMABLE_KEYS = {
    "training.max_steps",
    "training.max_seconds",
    "training.eval_every",
    "training.save_every",
    "training.keep_checkpoints",
    "training.log_with",
    "training.threads",
    "training.output_dir",
    "training.generation_max_new_tokens",
    "training.generation_num_beams",
    "training.generation_length_penalty",
    "training.generation_max_length_a",
    "training.generation_max_length_b",
    "data.num_proc",
    "data.eval_examples",
}
# Evaluation entries that are settings, not measurements: in metrics.json, not in the progress lines
DECODING_KEYS = {"num_beams", "do_sample", "length_penalty", "early_stopping", "max_length_a", "max_length_b"}
# The schedule's length while a wall-clock budget without max_steps is not yet planned (it is at step 10): warm-up,
# then the peak rate.
UNPLANNED_STEPS = 10**9


# ---------------------------------------------------------------------------------------------- model and optimizer
def decay_parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices only, not on biases and norm gains (GPT-2 / BERT practice)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_config(recipe: Recipe, tokenizer, **extra):
    """The recipe's model section, completed with the tokenizer's vocabulary size and special-token ids."""
    fam = get_family(recipe.family)
    fields = {f.name for f in dataclasses.fields(fam.config_class)}
    kwargs = {k: v for k, v in recipe.model.items() if k != "from_pretrained"} | extra
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
        options = {k: v for k, v in recipe.model.items() if k != "from_pretrained"}
        try:
            return model_class.from_pretrained(source, **prepared.label_kwargs, **options)
        except OSError as error:  # transformers' answer for a folder or Hub name that holds no model
            raise MissingFileError(f"model.from_pretrained: {source!r} does not load: {error}") from error
    return model_class(build_config(recipe, prepared.tokenizer, **prepared.label_kwargs))


def choose_threads(requested: int | None = None) -> int:
    """Torch threads for a run: the recipe's, else one per core that other processes are not using right now.
    Per-step work on a few cores stalls at OpenMP barriers when another process holds one of them, so on a shared
    machine fewer threads are faster, and a busy machine slows a run in proportion instead of by 20x."""
    if requested:
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, round(cores - busy_cores())))


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


def make_optimizer(model: torch.nn.Module, t, accelerator: Accelerator) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        decay_parameter_groups(model, t.weight_decay),
        lr=t.learning_rate,
        betas=(0.9, t.adam_beta2),
        fused=accelerator.device.type == "cuda",  # one kernel for the whole update on a GPU
    )


def shard_model(model: torch.nn.Module, settings, accelerator: Accelerator, t) -> torch.nn.Module:
    """FSDP2 units over the processes (hf_seq/sharding.py), the recipe's autocast on the forward (the parameters
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


# ---------------------------------------------------------------------------------------------- checkpoints
def checkpoints(output_dir: Path) -> list[Path]:
    """Complete checkpoints (their state.json is written last), newest first."""
    found = [p for p in (output_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}*") if (p / "state.json").exists()]
    return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]), reverse=True)


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = checkpoints(output_dir)
    return found[0] if found else None


def save_checkpoint(
    accelerator: Accelerator, output_dir: Path, state: dict, scheduler, keep: int, shards=None, data=None
) -> None:
    """`shards`: (model, optimizer) of a sharded run, whose states each process writes itself; `data`: the training
    blocks (a stream writes each process's position in it)."""
    folder = output_dir / "checkpoints"
    final = folder / f"{CHECKPOINT_PREFIX}{state['step']}"
    partial = folder / f".partial-{CHECKPOINT_PREFIX}{state['step']}"
    if accelerator.is_main_process and partial.exists():
        shutil.rmtree(partial)
    accelerator.wait_for_everyone()
    # safetensors stores a tied weight once; accelerate warns that it dropped the tied twin ("Removed shared
    # tensor"), which is harmless here: load_state loads into the same model, whose tie restores it (resumes are
    # tested bit-identical)
    accelerate_logger = logging.getLogger("accelerate.utils.other")
    level = accelerate_logger.level
    accelerate_logger.setLevel(logging.ERROR)
    try:
        accelerator.save_state(str(partial), safe_serialization=True)
        if shards:
            sharding.save_shards(*shards, partial, accelerator.process_index)
        if isinstance(data, BlockStream):  # streaming: each process's position in its stream, before state.json
            data.save(partial, accelerator.process_index)
    except OSError as error:  # a full disk, a quota: the earlier checkpoints are untouched
        earlier = latest_checkpoint(output_dir)
        raise OSError(
            error.errno,
            f"could not write the checkpoint of step {state['step']} to {partial} ({error.strerror or error}); "
            + (f"{earlier} is intact: " if earlier else "")
            + "free some space and run the same command with --resume",
        ) from error
    finally:
        accelerate_logger.setLevel(level)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        record_checksums(partial)  # safetensors has no checksum: --resume checks these
        # written last: marks the checkpoint complete
        (partial / "state.json").write_text(json.dumps({**state, "scheduler": scheduler.state_dict()}))
        if final.exists():
            shutil.rmtree(final)
        partial.rename(final)
        for stale in checkpoints(output_dir)[keep:]:
            shutil.rmtree(stale)
    accelerator.wait_for_everyone()


def load_checkpoint(accelerator: Accelerator, output_dir: Path, scheduler, shards=None, data=None) -> dict:
    """The newest checkpoint that loads; one that does not (a file cut short, a disk that filled, weights that differ
    from their recorded SHA-256) is reported and the previous one is tried. Only tensors, safetensors and JSON are
    read: a pickle planted in the folder is refused."""
    from accelerate.utils import load

    found = checkpoints(output_dir)
    if not found:
        raise MissingFileError(
            f"--resume: {output_dir} holds no complete checkpoint to resume from; run without --resume to start"
        )
    for checkpoint in found:
        try:
            verify_checksums(checkpoint)
            for rng in sorted(checkpoint.glob("random_states_*.pkl")):  # accelerate skips unreadable ones silently
                load(rng, weights_only=True)
            if not list(checkpoint.glob("random_states_*.pkl")):
                raise FileNotFoundError(f"{checkpoint} has no random_states_*.pkl: the resume would not be exact")
            accelerator.load_state(str(checkpoint))
            if shards:
                sharding.load_shards(*shards, checkpoint, accelerator.process_index)
            if isinstance(data, BlockStream):  # streaming: each process continues its own stream
                data.load(checkpoint, accelerator.process_index)
            state = json.loads((checkpoint / "state.json").read_text())
            scheduler.load_state_dict({**state.pop("scheduler"), "lr_lambdas": [None] * len(scheduler.lr_lambdas)})
        except Exception as error:  # noqa: BLE001  (any damage: say which file, fall back to an older checkpoint)
            accelerator.print(f"warning: checkpoint {checkpoint} does not load ({type(error).__name__}: {error})")
            if checkpoint == found[-1]:
                raise DamagedRunError(
                    f"--resume: no checkpoint in {output_dir / 'checkpoints'} loads (the warnings above say why); "
                    "start again with --overwrite, or restore the folder from a copy"
                ) from error
            continue
        accelerator.print(f"resuming from {checkpoint} (step {state['step']})")
        return state


def check_output_dir(recipe: Recipe, output_dir: Path, resume: bool, overwrite: bool) -> None:
    """Never overwrite a finished or interrupted run by accident, and never resume with a different recipe."""
    saved = output_dir / "checkpoints" / "recipe.json"
    if resume:
        if not saved.exists():
            raise MissingFileError(f"--resume: {output_dir} holds no run to resume (no checkpoints/recipe.json)")
        before, now = _flatten(json.loads(saved.read_text())), _flatten(recipe.to_dict())
        changed = sorted(
            k for k in before.keys() | now.keys() if before.get(k) != now.get(k) and k not in RESUMABLE_KEYS
        )
        if changed:
            lines = [f"  {k}: {before.get(k)!r} -> {now.get(k)!r}" for k in changed]
            raise RecipeError(
                "--resume with a different recipe; these keys may not change on resume:\n"
                + "\n".join(lines)
                + f"\n(keys that may: {sorted(RESUMABLE_KEYS)})"
            )
        return
    # a run that stopped before its first checkpoint (its data did not load, or it was killed at once) has no steps
    # to lose: it is started again, not protected
    earlier = [name for name in ("config.json", "model.safetensors") if (output_dir / name).exists()]
    if checkpoints(output_dir):
        earlier.insert(0, "checkpoints")
    elif (output_dir / "checkpoints").exists() and not earlier:
        shutil.rmtree(output_dir / "checkpoints")
    if earlier and not overwrite:
        raise RunExistsError(
            f"{output_dir} holds an earlier run ({', '.join(earlier)}): pass --resume to continue it, --overwrite to "
            "replace it, or choose another training.output_dir"
        )
    if earlier:
        shutil.rmtree(output_dir / "checkpoints", ignore_errors=True)


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and key != "model":
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


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


# ---------------------------------------------------------------------------------------------- the loop
def run(recipe: Recipe, resume: bool = False, progress: bool = True, overwrite: bool = False) -> dict:
    """Train `recipe` and save the final model, tokenizer, card, metrics and loss curve in training.output_dir."""
    t = recipe.training
    output_dir = Path(t.output_dir)
    on_cpu = not (torch.cuda.is_available() or torch.backends.mps.is_available())
    if t.mixed_precision == "fp16" and on_cpu:
        raise RecipeError("training.mixed_precision='fp16' needs a GPU; on a CPU use 'bf16' (or 'no')")
    tracker = resolve_tracker(t.log_with)
    fsdp = sharding.requested()  # `accelerate launch --config_file recipes/accelerate/fsdp.yaml`
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
    # cpu=True on a machine without an accelerator makes torchrun's processes join over gloo (multi-CPU data parallel)
    accelerator = Accelerator(
        mixed_precision=t.mixed_precision,
        log_with=tracker,
        project_dir=str(output_dir),
        cpu=on_cpu,
        dynamo_backend="inductor" if t.compile else None,
    )
    processes = accelerator.num_processes
    if t.batch_size % (t.gradient_accumulation_steps * processes):
        raise InvalidValueError(
            f"training.batch_size ({t.batch_size}) must be divisible by gradient_accumulation_steps x processes "
            f"({t.gradient_accumulation_steps} x {processes}): it is the global batch"
        )
    if accelerator.is_main_process:
        check_output_dir(recipe, output_dir, resume, overwrite)
    accelerator.wait_for_everyone()
    torch.set_num_threads(choose_threads(t.threads))
    torch.set_flush_denormal(True)
    (output_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process and not resume:
        (output_dir / "checkpoints" / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2))

    prepared = tasks.prepare(
        recipe,
        tokenizer_folder=output_dir / "checkpoints" / "tokenizer",
        is_main=accelerator.is_main_process,
        wait=accelerator.wait_for_everyone,
        main_first=accelerator.main_process_first,
        process_index=accelerator.process_index,
        num_processes=accelerator.num_processes,
    )
    task, tokenizer, train_set = prepared.task, prepared.tokenizer, prepared.train
    if not isinstance(train_set, BlockStream) and len(train_set) < t.batch_size:
        raise InvalidValueError(
            f"the training data has {len(train_set)} examples, fewer than one batch of {t.batch_size}"
        )
    for key, count in prepared.notes.items():
        if "truncated" in key and count:
            accelerator.print(f"note: {count} {key.replace('_', ' ')} (longer than data.block_size)")
    set_seed(t.seed)
    model = build_model(recipe, prepared)
    collator = task.collator(recipe, tokenizer, model)
    if fsdp:  # hf-seq shards the model itself (hf_seq/sharding.py); accelerate launched the processes
        model = shard_model(model, fsdp, accelerator, t)
        optimizer = make_optimizer(model, t, accelerator)
    else:
        model, optimizer = accelerator.prepare(model, make_optimizer(model, t, accelerator))
    shards = (model, optimizer) if fsdp else None
    plain = accelerator.unwrap_model(model, keep_torch_compile=False)  # the model itself: evaluated, saved
    distributed = describe_distributed(accelerator, fsdp, t, plain)
    if accelerator.num_processes > 1 or fsdp:
        accelerator.print(f"distributed: {distributed['distributed_type']} over {accelerator.num_processes} processes")
    step_cap = t.max_steps or UNPLANNED_STEPS  # max_seconds alone: no step limit, the plan at step 10 sets the end
    state = {"step": 0, "planned_steps": step_cap, "losses": [], "evaluations": [], "tokens": 0, "seconds": 0.0}
    scheduler = _scheduler(t, optimizer, step_cap)
    if resume:
        state = load_checkpoint(accelerator, output_dir, scheduler, shards=shards, data=train_set)
        # a resumed run may be given a new max_steps: the schedule then ends there
        planned = state["planned_steps"] if t.max_seconds else step_cap
        state["planned_steps"] = min(planned, step_cap)
        scheduler = _scheduler(t, optimizer, state["planned_steps"], state_dict=scheduler.state_dict())
    # a wall-clock budget is fitted at steps 10 and 50; a resumed run keeps the plan it made before the interruption
    plan = bool(t.max_seconds) and (not resume or "plan_mark" not in state)
    if budget_note(t):
        accelerator.print(budget_note(t) + ("; the speed at step 10 and 50 says which" if plan and t.max_steps else ""))
    if tracker:
        accelerator.init_trackers(output_dir.name, config={k: str(v) for k, v in recipe.to_dict().items()})

    total = None if plan else state["planned_steps"]  # known once the budget is planned
    disable = not (progress and accelerator.is_local_main_process)
    bar = tqdm(total=total, initial=state["step"], desc="training", disable=disable)
    start_time = time.perf_counter() - state["seconds"]
    model.train()
    with StopRequest() as stop:
        while state["step"] < state["planned_steps"]:
            set_scheduled_sampling(recipe, plain, state["step"])
            batches = global_batch(train_set, collator, state["step"], t, accelerator, shuffle=recipe.data.shuffle)
            loss = train_step(model, optimizer, scheduler, batches, task, t, accelerator, sharded=bool(fsdp))
            state["step"] += 1
            state["tokens"] += sum(int(b["input_ids"].numel()) for b in batches) * accelerator.num_processes
            state["seconds"] = time.perf_counter() - start_time
            state["losses"].append(loss)
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
            if tracker:
                accelerator.log({"train/loss": loss, "train/lr": scheduler.get_last_lr()[0]}, step=state["step"])
            # plan at step 10, and again at 50 once the first steps' warm-up no longer weighs on the speed
            if plan and state["step"] in (10, 50) and state["step"] < state["planned_steps"]:
                fit, per_step = _plan_steps(t, state, accelerator)
                state["planned_steps"] = min(fit, step_cap)  # fit the schedule to the budget
                scheduler = _scheduler(t, optimizer, state["planned_steps"], state_dict=scheduler.state_dict())
                bar.total = state["planned_steps"]
                bar.refresh()
                if accelerator.is_main_process:
                    bar.write(f"step {state['step']}: {_plan_note(t, state, fit, per_step)}")
            last = state["step"] >= state["planned_steps"] or _out_of_time(t, state, accelerator)
            if state["step"] % t.eval_every == 0 or last:
                metrics = tasks.evaluate(recipe, prepared, plain, accelerator.device)
                state["evaluations"].append({k: state[k] for k in ("step", "tokens", "seconds")} | metrics)
                if tracker:
                    accelerator.log({f"eval/{k}": v for k, v in metrics.items()}, step=state["step"])
                if accelerator.is_main_process:
                    shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and k not in DECODING_KEYS}
                    bar.write(f"step {state['step']}: " + ", ".join(_show(k, v) for k, v in shown.items()))
                if t.average_checkpoints:
                    keep_snapshot(accelerator, plain, output_dir, state, t)
                if t.select_by and keep_best(accelerator, plain, output_dir, state, metrics, t) and not last:
                    last = True
                    state["stopped_early"] = state["step"]
                    key, higher = SELECT_BY[t.select_by]
                    accelerator.print(
                        f"step {state['step']}: {t.patience} evaluations without a {'higher' if higher else 'lower'} "
                        f"{key} than step {state['best']['step']}'s (training.patience): stopping"
                    )
            interrupted = _any(accelerator, stop.signal is not None)
            if (state["step"] % t.save_every == 0 and not last) or interrupted:
                save_checkpoint(
                    accelerator, output_dir, state, scheduler, t.keep_checkpoints, shards=shards, data=train_set
                )
            if interrupted:
                bar.close()
                accelerator.print(
                    f"\n{stop.signal or 'stop'}: saved a checkpoint of step {state['step']} in {output_dir}/checkpoints; "
                    "continue with the same command and --resume"
                )
                raise SystemExit(130 if stop.signal == "SIGINT" else 143)
            if last:
                break
    bar.close()
    if tracker:
        accelerator.end_training()
    return finish(recipe, accelerator, model, prepared, state, distributed, sharded=bool(fsdp))


def keep_best(accelerator, model, output_dir: Path, state: dict, metrics: dict, t) -> bool:
    """`training.select_by`: keep the weights of the best evaluation so far (lowest eval_loss, or highest eval_bleu)
    in checkpoints/best.safetensors (written under a temporary name, then renamed); returns True once
    `training.patience` evaluations in a row have not improved on it."""
    key, higher = SELECT_BY[t.select_by]
    best = state.get("best")
    if best is None or (metrics[key] > best[key] if higher else metrics[key] < best[key]):
        state["best"] = {"step": state["step"], key: metrics[key], "waited": 0}
        save_weights(accelerator, model, output_dir / "checkpoints" / "best.safetensors")
        return False
    best["waited"] += 1
    return t.patience is not None and best["waited"] >= t.patience


def save_weights(accelerator, model, path: Path) -> None:
    """The model's weights as safetensors, written under a temporary name and then renamed: never half a file."""
    from safetensors.torch import save_model

    if accelerator.is_main_process:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name("." + path.name)
        save_model(model, str(partial))
        partial.replace(path)
    accelerator.wait_for_everyone()


def snapshot_steps(output_dir: Path) -> list[int]:
    return sorted(int(p.stem.removeprefix("step-")) for p in (output_dir / "checkpoints" / "average").glob("step-*"))


def averaged_steps(steps: list[int], count: int, best_step: int | None) -> list[int]:
    """The evaluations whose weights `training.average_checkpoints` averages: the last `count`, or with model
    selection the last `count` up to the best one."""
    return [s for s in steps if best_step is None or s <= best_step][-count:]


def keep_snapshot(accelerator, model, output_dir: Path, state: dict, t) -> None:
    """`training.average_checkpoints`: the weights of this evaluation, kept in checkpoints/average/ beside the others
    that an average may still need (the last N, and with model selection the N up to the best evaluation)."""
    folder = output_dir / "checkpoints" / "average"
    save_weights(accelerator, model, folder / f"step-{state['step']:08d}.safetensors")
    steps = snapshot_steps(output_dir)
    best = state.get("best", {}).get("step")
    needed = set(steps[-t.average_checkpoints :]) | set(averaged_steps(steps, t.average_checkpoints, best))
    if t.select_by and best is None:  # the best is not known yet: it may be this evaluation (kept above)
        needed |= set(steps)
    if accelerator.is_main_process:
        for step in set(steps) - needed:
            (folder / f"step-{step:08d}.safetensors").unlink(missing_ok=True)


def average_snapshots(model, output_dir: Path, steps: list[int]) -> None:
    """Load into `model` the mean of the weights of the evaluations `steps` (floating-point tensors; integer buffers
    are taken from the last)."""
    from safetensors.torch import load_file

    folder = output_dir / "checkpoints" / "average"
    total = None
    for step in steps:
        weights = load_file(folder / f"step-{step:08d}.safetensors")
        if total is None:
            total = {k: v.double() if v.is_floating_point() else v for k, v in weights.items()}
            continue
        for k, v in weights.items():
            total[k] = total[k] + v.double() if v.is_floating_point() else v
    mean = {k: (v / len(steps)).float() if v.is_floating_point() else v for k, v in total.items()}
    model.load_state_dict(mean, strict=False)


def global_batch(train_set, collator, step: int, t, accelerator, shuffle: bool = True) -> list[dict]:
    """This process's micro-batches of step `step`: the step's rows of a permutation seeded by (seed, epoch) (with
    `data.shuffle: false`, of the blocks in order), every P-th of them for process p of P, cut into
    gradient-accumulation micro-batches. A stream (`data.streaming`) gives each process its own next B/P blocks."""
    if isinstance(train_set, BlockStream):
        features = train_set.take(t.batch_size // accelerator.num_processes)
    else:
        epoch, index = divmod(step, len(train_set) // t.batch_size)
        generator = torch.Generator().manual_seed(t.seed * 100003 + epoch)
        order = torch.randperm(len(train_set), generator=generator) if shuffle else torch.arange(len(train_set))
        rows = order[index * t.batch_size : (index + 1) * t.batch_size].tolist()
        features = [train_set[i] for i in rows[accelerator.process_index :: accelerator.num_processes]]
    micro = len(features) // t.gradient_accumulation_steps
    batches = [collator(features[k : k + micro]) for k in range(0, len(features), micro)]
    return [{k: v.to(accelerator.device) for k, v in b.items() if k != "special_tokens_mask"} for b in batches]


def train_step(model, optimizer, scheduler, batches: list[dict], task, t, accelerator, sharded: bool = False) -> float:
    """One optimizer step over the global batch; returns its mean loss per predicted token. `sharded`: an FSDP2
    model, which reduce-scatters its gradients itself (once per step: the last micro-batch) and clips them as
    DTensors."""
    predicted = sum(task.count_predicted(b["labels"]) for b in batches)
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
    if t.max_grad_norm and sharded:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.max_grad_norm)
    elif t.max_grad_norm:
        accelerator.clip_grad_norm_(model.parameters(), t.max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return accelerator.reduce(step_loss, reduction="sum").item()


def set_scheduled_sampling(recipe: Recipe, model, step: int) -> None:
    """`training.scheduled_sampling` (decay, k, c, minimum): the probability that the decoder reads its own
    prediction, decayed as Bengio et al. (2015) describe, set on the model's config before each step."""
    if recipe.training.scheduled_sampling:
        from hf_seq.schedules import scheduled_sampling_probability

        model.config.scheduled_sampling = scheduled_sampling_probability(step, **recipe.training.scheduled_sampling)


def _scheduler(t, optimizer, steps: int, state_dict: dict | None = None):
    # transformers' schedules; "inverse_sqrt" is Vaswani et al.'s eq. 3 relative to the peak rate (hf_seq.schedules)
    scheduler = get_scheduler(t.scheduler, optimizer, num_warmup_steps=t.warmup_steps, num_training_steps=steps)
    if state_dict is not None:  # continue at the same step, on the (possibly re-planned) schedule
        scheduler.load_state_dict({**state_dict, "lr_lambdas": [None] * len(scheduler.lr_lambdas)})
        rates = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
        for group, lr in zip(optimizer.param_groups, rates):
            group["lr"] = lr
        scheduler._last_lr = rates
    return scheduler


def budget_note(t) -> str | None:
    """What will end a run with a wall-clock budget, said at its start."""
    if not t.max_seconds:
        return None
    if t.max_steps is None:
        return (
            f"training.max_seconds={t.max_seconds:g} is the budget (no step limit): the schedule is fitted to the "
            "steps that fit, at the speed measured at step 10 and 50"
        )
    return (
        f"training.max_steps={t.max_steps} and training.max_seconds={t.max_seconds:g} given: the run ends at "
        "whichever comes first"
    )


def _plan_note(t, state: dict, fit: int, per_step: float) -> str:
    """Which limit ends the run, at the speed measured so far."""
    speed = f"at {per_step:.3g} s/step"
    if t.max_steps is None:
        return f"{speed}, training.max_seconds={t.max_seconds:g} fits about {fit} steps: the schedule ends there"
    if fit < t.max_steps:
        return (
            f"{speed}, training.max_seconds={t.max_seconds:g} ends the run, at about step {fit} (before "
            f"training.max_steps={t.max_steps})"
        )
    end = state["seconds"] + (t.max_steps - state["step"]) * per_step
    return (
        f"{speed}, training.max_steps={t.max_steps} ends the run, after about {end:.0f} s (within "
        f"training.max_seconds={t.max_seconds:g})"
    )


def _plan_steps(t, state: dict, accelerator) -> tuple[int, float]:
    """With a wall-clock budget, the number of steps that fit in it at the speed measured so far (agreed on by
    every process), so the learning-rate schedule ends when the budget does; and that speed in seconds per step."""
    mark_step, mark_seconds = state.get("plan_mark", (0, 0.0))  # the speed since the last plan: past the warm-up
    per_step = (state["seconds"] - mark_seconds) / (state["step"] - mark_step)
    state["plan_mark"] = (state["step"], state["seconds"])
    planned = torch.tensor(
        state["step"] + int((t.max_seconds - state["seconds"]) / per_step), device=accelerator.device
    )
    planned = accelerator.reduce(planned, reduction="min").item() if accelerator.num_processes > 1 else planned.item()
    return max(state["step"] + 1, int(planned)), per_step


def _out_of_time(t, state: dict, accelerator) -> bool:
    return bool(t.max_seconds) and _any(accelerator, state["seconds"] >= t.max_seconds)


def _show(key: str, value) -> str:
    return f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"


def _any(accelerator, flag: bool) -> bool:
    if accelerator.num_processes == 1:
        return flag
    return bool(accelerator.reduce(torch.tensor(int(flag), device=accelerator.device), reduction="sum").item())


def finish(recipe: Recipe, accelerator, model, prepared, state: dict, distributed: dict, sharded: bool = False) -> dict:
    """Save the model (whole: one model.safetensors, also after a sharded run), tokenizer, metrics, recipe, loss
    curve and card; return the summary."""
    output_dir = Path(recipe.training.output_dir)
    final = state["evaluations"][-1] if state["evaluations"] else {}
    best = state.get("best")
    plain = accelerator.unwrap_model(model, keep_torch_compile=False)
    if best:  # training.select_by: the model saved, and the figures reported, are the best evaluation's
        from safetensors.torch import load_model

        load_model(plain, output_dir / "checkpoints" / "best.safetensors")
        final = next(e for e in state["evaluations"] if e["step"] == best["step"])
    averaged = None
    t = recipe.training
    if t.average_checkpoints:  # the mean of several evaluations' weights, scored again
        averaged = averaged_steps(snapshot_steps(output_dir), t.average_checkpoints, best["step"] if best else None)
        average_snapshots(plain, output_dir, averaged)
        final = tasks.evaluate(recipe, prepared, plain, accelerator.device)
    rows = len(prepared.train) if hasattr(prepared.train, "__len__") else None
    summary = {
        "steps": state["step"],
        "tokens": state["tokens"],
        "seconds": state["seconds"],
        "tokens_per_second": state["tokens"] / max(state["seconds"], 1e-9),
        "final_train_loss": state["losses"][-1] if state["losses"] else None,
        "epochs": state["step"] * recipe.training.batch_size / rows if rows else None,  # passes over the training set
        **({"best_step": best["step"], "selected_by": recipe.training.select_by} if best else {}),
        **({"averaged_checkpoints": averaged} if averaged else {}),
        **({"stopped_early": state["stopped_early"]} if "stopped_early" in state else {}),
        **{k: v for k, v in prepared.notes.items() if k.startswith("train_")},
        **{k: v for k, v in final.items() if k not in ("step", "tokens", "seconds")},
        **distributed,
    }
    accelerator.wait_for_everyone()
    # collectives: every process takes part in gathering the FSDP / ZeRO-3 shards
    state_dict = sharding.full_state_dict(model) if sharded else accelerator.get_state_dict(model)
    state_dict = {k.removeprefix("_orig_mod."): v for k, v in state_dict.items()}  # the names under torch.compile
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)
    if sharded:
        unwrapped = sharding.unsharded_twin(unwrapped)
    if prepared.task.generates:
        tasks.set_decoding(unwrapped, recipe)  # generation_config.json: the folder decodes as the evaluations did
    unwrapped.save_pretrained(
        output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save, state_dict=state_dict
    )
    if accelerator.is_main_process:
        save_run_files(recipe, output_dir, prepared.tokenizer, unwrapped.config, summary, state)
    accelerator.wait_for_everyone()
    return summary


def save_run_files(recipe, output_dir: Path, tokenizer, config, summary: dict, state: dict) -> None:
    from hf_seq.cards import write_card

    context = getattr(config, "max_position_embeddings", None) or recipe.data.block_size
    tokenizer.model_max_length = context  # so truncation=True and the pipelines cut to the model's context
    tokenizer.save_pretrained(output_dir)
    (output_dir / "metrics.json").write_text(json.dumps({**summary, "evaluations": state["evaluations"]}, indent=2))
    (output_dir / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2))
    steps = state.get("loss_steps")
    plot_loss_curve(state["losses"], state["evaluations"], output_dir / "loss_curve.png", steps=steps)
    write_card(output_dir, recipe=recipe.to_dict(), metrics=summary)
    record_checksums(output_dir)  # checked by hf-seq evaluate / generate / push


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
    """The metrics a run reports, measured again on a saved model: on the held-out (and test) data of its recipe.
    Works for every task, pretrained or fine-tuned: the same `tasks.evaluate` the run used."""
    from transformers import AutoTokenizer

    from hf_seq.recipes import load_recipe

    folder = Path(folder)
    verify_checksums(folder)
    if recipe is None:
        if not (folder / "recipe.json").exists():
            raise MissingFileError(f"{folder} has no recipe.json (not trained by hf-seq): pass --recipe")
        recipe = json.loads((folder / "recipe.json").read_text())
    if not isinstance(recipe, dict):
        recipe = str(recipe)
    task_name = (recipe.get("task") if isinstance(recipe, dict) else None) or "causal_lm"
    command = tasks.TASKS[task_name].command if task_name in tasks.TASKS else "train"
    recipe = load_recipe(recipe, overrides, command=command)
    recipe.model = {k: v for k, v in recipe.model.items() if k != "from_pretrained"}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prepared = tasks.prepare(recipe, tokenizer=tokenizer)
    model = get_family(recipe.family).model_class(prepared.task.auto_class).from_pretrained(folder)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(choose_threads(recipe.training.threads))
    return tasks.evaluate(recipe, prepared, model.to(device), device)


__all__ = ["build_config", "build_model", "evaluate_folder", "run"]
