"""A run's checkpoints: written whole or not at all, loaded only as tensors, safetensors and JSON, checked against
their recorded SHA-256 on resume; and the weights model selection (`training.select_by`) and checkpoint averaging
(`training.average_checkpoints`) keep beside them.

- a checkpoint is written to a temporary folder and renamed when complete (its state.json last), so a killed run
  never leaves a half-written one;
- it holds safetensors (model), tensors-only torch files loaded with `weights_only=True` (optimizer, RNG) and JSON
  (step, schedule, recipe): resuming runs no code from the folder;
- a checkpoint that does not load is reported and the one before it is tried.
"""

import json
import logging
import shutil
from pathlib import Path

from accelerate import Accelerator

from hf_seq.data.streaming import BlockStream
from hf_seq.errors import DamagedRunError, MissingFileError
from hf_seq.hub.checksums import record_checksums, verify_checksums
from hf_seq.training import sharding
from hf_seq.training.recipes import SELECT_BY, Recipe, RecipeError
from hf_seq.training.runs import refuse_earlier_run

CHECKPOINT_PREFIX = "checkpoint-"
# Recipe keys a resumed run may change; any other difference from the interrupted run is refused.
RESUMABLE_KEYS = {
    "training.max_steps",
    "training.max_seconds",
    "training.decay_fraction",  # a run in its stable phase continued, or a decay branch from it
    "training.select_by",  # the evaluations kept from the resume on (the earlier choice is forgotten)
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
    "training.generation_block_repeats",
    "data.num_proc",
    "data.eval_examples",
}


def checkpoints(output_dir: Path) -> list[Path]:
    """Complete checkpoints (their state.json is written last), newest first."""
    found = [p for p in (output_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}*") if (p / "state.json").exists()]
    return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]), reverse=True)


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = checkpoints(output_dir)
    return found[0] if found else None


def last_finite_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint whose weights are all finite (a run that diverged may have saved weights that
    were already inf or NaN before its loss said so)."""
    import torch
    from safetensors.torch import load_file

    for folder in checkpoints(output_dir):
        weights = sorted(folder.glob("model*.safetensors"))
        if weights and all(bool(torch.isfinite(v).all()) for f in weights for v in load_file(f).values()):
            return folder
    return None


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
            saved = state.pop("scheduler")  # a torch scheduler's lambdas are code: not saved, not read
            lambdas = {"lr_lambdas": [None] * len(scheduler.lr_lambdas)} if hasattr(scheduler, "lr_lambdas") else {}
            scheduler.load_state_dict(saved | lambdas)
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
    refuse_earlier_run(output_dir, earlier, overwrite)
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


def keep_best(accelerator, model, output_dir: Path, state, metrics: dict, t) -> bool:
    """`training.select_by`: keep the weights of the best evaluation so far (lowest eval_loss, or highest eval_bleu)
    in checkpoints/best.safetensors (written under a temporary name, then renamed); returns True once
    `training.patience` evaluations in a row have not improved on it."""
    key, higher = SELECT_BY[t.select_by]
    best = state.best
    if best is None or (metrics[key] > best[key] if higher else metrics[key] < best[key]):
        state.best = {"step": state.step, key: metrics[key], "waited": 0}
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


def keep_snapshot(accelerator, model, output_dir: Path, state, t) -> None:
    """`training.average_checkpoints`: the weights of this evaluation, kept in checkpoints/average/ beside the others
    that an average may still need (the last N, and with model selection the N up to the best evaluation)."""
    folder = output_dir / "checkpoints" / "average"
    save_weights(accelerator, model, folder / f"step-{state.step:08d}.safetensors")
    steps = snapshot_steps(output_dir)
    best = (state.best or {}).get("step")
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
