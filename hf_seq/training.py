"""The training loop: plain PyTorch driven by `accelerate`, so one recipe runs on a CPU, one GPU, or many processes
under `accelerate launch` (DDP, FSDP, DeepSpeed) without code changes.

Exactness is a design goal, not an accident:
- batches are indexed by step: step s of epoch e takes rows s*B ... (s+1)*B of a permutation seeded by (seed, e),
  and process p of P takes every P-th of those rows; so a resumed run sees exactly the batches it would have seen,
  and P processes see the same global batch as one;
- the loss is summed over the global batch and divided by its number of predicted tokens (`num_items_in_batch`,
  counted across processes and accumulation steps), so gradient accumulation and data parallelism change nothing;
- checkpoints (`accelerator.save_state`, RNG states included) are written to a temporary folder and renamed when
  complete: a killed run never leaves a half-written checkpoint, and `resume=True` continues from the last one;
- evaluation runs under a forked RNG, so evaluating does not change what training draws next.
"""

import contextlib
import dataclasses
import json
import math
import shutil
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from transformers import DataCollatorForSeq2Seq, default_data_collator, get_scheduler

from hf_seq import data as data_lib
from hf_seq.recipes import Recipe, resolve_tracker
from hf_seq.registry import family as get_family

CHECKPOINT_PREFIX = "checkpoint-"


# ---------------------------------------------------------------------------------------------- schedules, optimizer
def decay_parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices only, not on biases and norm gains (GPT-2 / BERT practice)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


# ---------------------------------------------------------------------------------------------- data for each task
def prepare_tokenizer(recipe: Recipe, train_texts, output_dir: Path, accelerator: Accelerator):
    """Load the recipe's tokenizer, or train one on the training texts (once, on the main process) and save it."""
    from transformers import AutoTokenizer

    from hf_seq.tokenization import train_bpe_tokenizer

    if recipe.tokenizer.path:
        return AutoTokenizer.from_pretrained(recipe.tokenizer.path)
    folder = output_dir / "checkpoints" / "tokenizer"
    if accelerator.is_main_process and not (folder / "tokenizer.json").exists():
        style = recipe.tokenizer.style or ("bert" if recipe.task == "masked_lm" else "byte_level")
        tokenizer = train_bpe_tokenizer(
            train_texts(),
            vocab_size=recipe.tokenizer.vocab_size,
            min_frequency=recipe.tokenizer.min_frequency,
            style=style,
        )
        tokenizer.save_pretrained(folder)
    accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(folder)


def load_examples(recipe: Recipe):
    """(train, eval) raw examples: lists of texts for the LM tasks, lists of {source, target} for seq2seq."""
    d = recipe.data
    if recipe.task == "seq2seq":
        if d.dataset == "gettext":
            rows = data_lib.gettext_pairs(d.target_language, max_pairs=d.max_examples)
        elif d.dataset in getattr(data_lib, "SYNTHETIC_TASKS", {}):
            rows = data_lib.SYNTHETIC_TASKS[d.dataset](num_examples=d.max_examples or 20000, seed=recipe.training.seed)
        else:
            table = data_lib.load_text_dataset(d.dataset, text_column=d.source_column)
            rows = [{"source": r[d.source_column], "target": r[d.target_column]} for r in table]
            rows = rows[: d.max_examples]
    else:
        kwargs = {"max_chars": d.max_chars} if d.dataset in (None, data_lib.STDLIB) else {}
        rows = list(data_lib.load_text_dataset(d.dataset, text_column=d.text_column, **kwargs)[d.text_column])
        rows = rows[: d.max_examples]
    generator = torch.Generator().manual_seed(1234)  # the split does not depend on the training seed
    order = torch.randperm(len(rows), generator=generator).tolist()
    n_eval = max(1, int(len(rows) * d.eval_fraction))
    return [rows[i] for i in order[n_eval:]], [rows[i] for i in order[:n_eval]]


def build_dataset(recipe: Recipe, tokenizer, rows):
    """Packed LM blocks (causal, masked) or tokenized source/target pairs (seq2seq)."""
    if recipe.task == "causal_lm":
        return data_lib.packed_lm_dataset(rows, tokenizer, recipe.data.block_size)
    if recipe.task == "masked_lm":
        return data_lib.packed_mlm_dataset(rows, tokenizer, recipe.data.block_size)
    return seq2seq_dataset(rows, tokenizer, recipe.data.block_size)


def seq2seq_dataset(rows, tokenizer, max_length: int):
    """Source ids as `input_ids` (as the translation pipeline tokenizes them), target ids + EOS as `labels` (the
    model shifts them right for its decoder input; EOS teaches it to stop)."""
    import datasets

    eos = tokenizer.eos_token_id
    columns = {"input_ids": [], "labels": []}
    for row in rows:
        source = tokenizer(row["source"], add_special_tokens=False)["input_ids"][:max_length]
        target = tokenizer(row["target"], add_special_tokens=False)["input_ids"][: max_length - 1] + [eos]
        columns["input_ids"].append(source)
        columns["labels"].append(target)
    return datasets.Dataset.from_dict(columns)


def make_collator(recipe: Recipe, tokenizer, model):
    if recipe.task == "masked_lm":
        return data_lib.masked_lm_collator(tokenizer, recipe.data.mlm_probability)
    if recipe.task == "seq2seq":
        return DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")
    return default_data_collator


def build_config(recipe: Recipe, tokenizer):
    """The recipe's model section, completed with the tokenizer's vocabulary size and special-token ids."""
    fam = get_family(recipe.family)
    fields = {f.name for f in dataclasses.fields(fam.config_class)}
    kwargs = dict(recipe.model)
    kwargs.setdefault("vocab_size", len(tokenizer))
    for name in ("pad", "bos", "eos"):
        token_id = getattr(tokenizer, f"{name}_token_id", None)
        if f"{name}_token_id" in fields and token_id is not None:
            kwargs.setdefault(f"{name}_token_id", token_id)
    if recipe.task == "seq2seq" and "decoder_start_token_id" in fields:
        kwargs.setdefault("decoder_start_token_id", tokenizer.bos_token_id)
    if "max_position_embeddings" in fields and "max_position_embeddings" not in recipe.model:
        default = fam.config_class().max_position_embeddings
        kwargs["max_position_embeddings"] = max(default, recipe.data.block_size)
    return fam.config_class(**kwargs)


# ---------------------------------------------------------------------------------------------- checkpoints
def latest_checkpoint(output_dir: Path) -> Path | None:
    complete = [p for p in (output_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}*") if (p / "state.json").exists()]
    return max(complete, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]), default=None)


def save_checkpoint(accelerator: Accelerator, output_dir: Path, step: int, state: dict, keep: int) -> None:
    folder = output_dir / "checkpoints"
    final = folder / f"{CHECKPOINT_PREFIX}{step}"
    partial = folder / f".partial-{CHECKPOINT_PREFIX}{step}"
    if accelerator.is_main_process and partial.exists():
        shutil.rmtree(partial)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(partial))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (partial / "state.json").write_text(json.dumps(state))  # written last: marks the checkpoint complete
        partial.rename(final)
        older = sorted(
            (p for p in folder.glob(f"{CHECKPOINT_PREFIX}*") if p != final),
            key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]),
        )
        for stale in older[: max(0, len(older) - (keep - 1))]:
            shutil.rmtree(stale)
    accelerator.wait_for_everyone()


# ---------------------------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate_loss(model, dataset, collator, batch_size: int, device) -> dict:
    """Token-weighted mean loss over `dataset` and its exponential (perplexity)."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(dataset), batch_size):
        batch = collator([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        batch = {k: v.to(device) for k, v in batch.items() if k != "special_tokens_mask"}
        loss = model(**batch).loss
        labels = batch["labels"]
        n = int((labels[:, 1:] if _is_causal(model) else labels).ne(-100).sum())
        total += loss.item() * n
        count += n
    model.train()
    mean = total / max(count, 1)
    return {"eval_loss": mean, "perplexity": math.exp(min(mean, 50))}


def _is_causal(model) -> bool:
    return type(model).__name__.endswith("ForCausalLM")


@torch.no_grad()
def evaluate_bleu(model, tokenizer, rows, max_new_tokens: int, num_beams: int, batch_size: int, device) -> dict:
    from hf_seq.evaluation import corpus_bleu

    model.eval()
    tokenizer.padding_side = "right"
    hypotheses = []
    for start in range(0, len(rows), batch_size):
        sources = [r["source"] for r in rows[start : start + batch_size]]
        batch = tokenizer(sources, add_special_tokens=False, padding=True, return_tensors="pt").to(device)
        out = model.generate(**batch, max_new_tokens=max_new_tokens, num_beams=num_beams, do_sample=False)
        hypotheses += tokenizer.batch_decode(out, skip_special_tokens=True)
    model.train()
    references = [r["target"] for r in rows]
    return {"bleu": corpus_bleu(hypotheses, references)}


# ---------------------------------------------------------------------------------------------- the loop
def run(recipe: Recipe, resume: bool = False, progress: bool = True) -> dict:
    """Train `recipe` and save the final model, tokenizer, card, metrics and loss curve in training.output_dir."""
    t = recipe.training
    output_dir = Path(t.output_dir)
    tracker = resolve_tracker(t.log_with)
    # cpu=True on a machine without an accelerator makes torchrun's processes join over gloo (multi-CPU data parallel)
    on_cpu = not (torch.cuda.is_available() or torch.backends.mps.is_available())
    accelerator = Accelerator(
        mixed_precision=t.mixed_precision, log_with=tracker, project_dir=str(output_dir), cpu=on_cpu
    )
    processes = accelerator.num_processes
    if t.batch_size % (t.gradient_accumulation_steps * processes):
        raise ValueError(
            f"training.batch_size ({t.batch_size}) must be divisible by gradient_accumulation_steps x processes "
            f"({t.gradient_accumulation_steps} x {processes}): it is the global batch"
        )
    checkpoint = latest_checkpoint(output_dir) if resume else None
    if not resume and accelerator.is_main_process and any((output_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}*")):
        raise FileExistsError(f"{output_dir} holds checkpoints of an earlier run: pass --resume, or another output_dir")
    output_dir.mkdir(parents=True, exist_ok=True)
    set_seed(t.seed)
    torch.set_flush_denormal(True)

    train_rows, eval_rows = load_examples(recipe)
    texts = (
        (lambda: [x for r in train_rows for x in (r["source"], r["target"])])
        if recipe.task == "seq2seq"
        else (lambda: train_rows)
    )
    tokenizer = prepare_tokenizer(recipe, texts, output_dir, accelerator)
    train_set, eval_set = build_dataset(recipe, tokenizer, train_rows), build_dataset(recipe, tokenizer, eval_rows)
    eval_set = eval_set.select(range(min(len(eval_set), recipe.data.eval_examples)))
    if len(train_set) < t.batch_size:
        raise ValueError(f"the training data has {len(train_set)} examples, fewer than one batch of {t.batch_size}")

    fam = get_family(recipe.family)
    set_seed(t.seed)
    model = fam.model_class(_auto_class(recipe.task))(build_config(recipe, tokenizer))
    collator = make_collator(recipe, tokenizer, model)
    optimizer = torch.optim.AdamW(
        decay_parameter_groups(model, t.weight_decay), lr=t.learning_rate, betas=(0.9, t.adam_beta2)
    )
    # transformers' schedules; "inverse_sqrt" is Vaswani et al.'s eq. 3 relative to the peak rate (hf_seq.schedules)
    scheduler = get_scheduler(t.scheduler, optimizer, num_warmup_steps=t.warmup_steps, num_training_steps=t.max_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    if tracker:
        accelerator.init_trackers(output_dir.name, config={k: str(v) for k, v in recipe.to_dict().items()})

    state = {"step": 0, "losses": [], "evaluations": [], "tokens": 0, "seconds": 0.0}
    if checkpoint is not None:
        accelerator.load_state(str(checkpoint))
        state = json.loads((checkpoint / "state.json").read_text())
        accelerator.print(f"resuming from {checkpoint} (step {state['step']})")

    micro = t.batch_size // (t.gradient_accumulation_steps * processes)
    steps_per_epoch = len(train_set) // t.batch_size
    shift = recipe.task == "causal_lm"
    bar = tqdm(
        total=t.max_steps,
        initial=state["step"],
        desc="training",
        disable=not (progress and accelerator.is_local_main_process),
    )
    start_time = time.perf_counter() - state["seconds"]
    model.train()
    while state["step"] < t.max_steps:
        step = state["step"]
        epoch, index = divmod(step, steps_per_epoch)
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(t.seed * 100003 + epoch))
        rows = order[index * t.batch_size : (index + 1) * t.batch_size].tolist()[accelerator.process_index :: processes]
        batches = [
            collator([train_set[i] for i in rows[k * micro : (k + 1) * micro]])
            for k in range(t.gradient_accumulation_steps)
        ]
        batches = [{k: v.to(accelerator.device) for k, v in b.items() if k != "special_tokens_mask"} for b in batches]
        labels_here = sum(int((b["labels"][:, 1:] if shift else b["labels"]).ne(-100).sum()) for b in batches)
        num_items = accelerator.reduce(torch.tensor(labels_here, device=accelerator.device), reduction="sum")
        step_loss = torch.zeros((), device=accelerator.device)
        for k, batch in enumerate(batches):
            last = k == len(batches) - 1
            with contextlib.nullcontext() if last else accelerator.no_sync(model):
                # summed over this micro-batch / tokens of the whole global batch; DDP averages over processes
                loss = model(**batch, num_items_in_batch=num_items).loss
                accelerator.backward(loss * processes)
            step_loss += loss.detach()
        if t.max_grad_norm:
            accelerator.clip_grad_norm_(model.parameters(), t.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        state["step"] += 1
        state["tokens"] += sum(int(b["input_ids"].numel()) for b in batches) * processes
        state["seconds"] = time.perf_counter() - start_time
        loss_value = accelerator.reduce(step_loss, reduction="sum").item()
        state["losses"].append(loss_value)
        bar.update(1)
        bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
        if tracker:
            accelerator.log({"train/loss": loss_value, "train/lr": scheduler.get_last_lr()[0]}, step=state["step"])
        if state["step"] % t.eval_every == 0 or state["step"] == t.max_steps:
            metrics = _evaluate(recipe, accelerator, model, tokenizer, eval_set, eval_rows, collator)
            state["evaluations"].append({"step": state["step"], **metrics})
            if tracker:
                accelerator.log({f"eval/{k}": v for k, v in metrics.items()}, step=state["step"])
            bar.write(f"step {state['step']}: " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
        if state["step"] % t.save_every == 0 and state["step"] < t.max_steps:
            save_checkpoint(accelerator, output_dir, state["step"], state, t.keep_checkpoints)
    bar.close()
    if tracker:
        accelerator.end_training()

    final = state["evaluations"][-1] if state["evaluations"] else {}
    summary = {
        "steps": state["step"],
        "tokens": state["tokens"],
        "seconds": state["seconds"],
        "tokens_per_second": state["tokens"] / max(state["seconds"], 1e-9),
        "final_train_loss": state["losses"][-1] if state["losses"] else None,
        **{k: v for k, v in final.items() if k != "step"},
    }
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)  # collective: gathers FSDP / ZeRO-3 shards
    accelerator.unwrap_model(model).save_pretrained(
        output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save, state_dict=state_dict
    )
    if accelerator.is_main_process:
        tokenizer.save_pretrained(output_dir)
        (output_dir / "metrics.json").write_text(json.dumps({**summary, "evaluations": state["evaluations"]}, indent=2))
        (output_dir / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2))
        plot_loss_curve(state["losses"], state["evaluations"], output_dir / "loss_curve.png")
        from hf_seq.cards import write_card

        write_card(output_dir, recipe=recipe.to_dict(), metrics=summary)
    accelerator.wait_for_everyone()
    return summary


def _evaluate(recipe, accelerator, model, tokenizer, eval_set, eval_rows, collator) -> dict:
    unwrapped = accelerator.unwrap_model(model)
    with torch.random.fork_rng(devices=[] if accelerator.device.type == "cpu" else [accelerator.device]):
        torch.manual_seed(recipe.training.seed)  # the same masks at every evaluation
        metrics = evaluate_loss(unwrapped, eval_set, collator, recipe.training.batch_size, accelerator.device)
        if recipe.task == "seq2seq":
            t = recipe.training
            rows = eval_rows[: recipe.data.eval_examples]
            metrics |= evaluate_bleu(
                unwrapped,
                tokenizer,
                rows,
                t.generation_max_new_tokens,
                t.generation_num_beams,
                t.batch_size,
                accelerator.device,
            )
    return metrics


def _auto_class(task: str) -> str:
    from hf_seq.recipes import TASKS

    return TASKS[task]


def plot_loss_curve(losses: list[float], evaluations: list[dict], path: Path, steps: list[int] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps or range(1, len(losses) + 1), losses, lw=1, label="training loss")
    if evaluations:
        ax.plot([e["step"] for e in evaluations], [e["eval_loss"] for e in evaluations], "o-", label="evaluation loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def evaluate_folder(folder, recipe=None, overrides=()) -> dict:
    """The metrics `run` reports, measured again on a saved model: on the held-out split of its recipe."""
    from transformers import AutoTokenizer

    from hf_seq.recipes import load_recipe

    folder = Path(folder)
    if recipe is None:
        if not (folder / "recipe.json").exists():
            raise FileNotFoundError(f"{folder} has no recipe.json (not trained by hf-seq train): pass --recipe")
        recipe = json.loads((folder / "recipe.json").read_text())
    recipe = load_recipe(recipe, overrides)
    fam = get_family(recipe.family)
    model = fam.model_class(_auto_class(recipe.task)).from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    model = model.to(accelerator.device)
    _, eval_rows = load_examples(recipe)
    eval_set = build_dataset(recipe, tokenizer, eval_rows)
    eval_set = eval_set.select(range(min(len(eval_set), recipe.data.eval_examples)))
    return _evaluate(
        recipe, accelerator, model, tokenizer, eval_set, eval_rows, make_collator(recipe, tokenizer, model)
    )
