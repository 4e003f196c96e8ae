"""Fine-tuning with transformers' `Trainer` / `Seq2SeqTrainer`: sequence classification, token classification and
translation, from a recipe. The model starts from a saved checkpoint (`model.from_pretrained: FOLDER`) or from
scratch (config keys). The data, the collator and the final evaluation come from the task table (`hf_seq.data.tasks`),
as for `hf-seq train`, so `hf-seq evaluate` on the saved folder measures the same numbers."""

import json
import math
import os
import time
from pathlib import Path

import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer, TrainerCallback, TrainingArguments

from hf_seq.data import tasks
from hf_seq.errors import MissingFileError
from hf_seq.training.divergence import Diverged, DivergenceError, check_loss, explain
from hf_seq.training.recipes import Recipe, resolve_tracker
from hf_seq.training.runs import (
    RunResult,
    budget_note,
    build_model,
    check_batch_split,
    check_precision,
    choose_threads,
    refuse_earlier_run,
    save_run_files,
)


class WallClockBudget(TrainerCallback):
    """`training.max_seconds` for Trainer, which has no time budget of its own: stop after the step that reaches it
    (every process stops at the same step). The schedule still ends at max_steps."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        over = torch.tensor(int(time.perf_counter() - self.start >= self.seconds), device=args.device)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(over, op=torch.distributed.ReduceOp.MAX)
        if over.item():
            control.should_training_stop = True


class DivergenceStop(TrainerCallback):
    """Trainer's logged loss and gradient norm checked as the accelerate loop checks its own (`divergence`): a loss
    that is not finite or above training.max_loss stops the run with the reason, recorded in metrics.json. Trainer
    applies a step before it logs it, so the weights kept are those of its last checkpoint."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        for key, held_out in (("loss", False), ("eval_loss", True)):
            if key in logs:
                try:
                    norm = logs.get("grad_norm")
                    check_loss(float(logs[key]), self.recipe.training, None if norm is None else float(norm), held_out)
                except Diverged as diverged:
                    self.stop(diverged, state, args)

    def stop(self, diverged: Diverged, state, args) -> None:
        output_dir = Path(self.recipe.training.output_dir)
        kept = sorted(Path(args.output_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        kept = kept[-1] if kept else None
        if state.is_world_process_zero:
            stopped = {"reason": "diverged", "step": state.global_step, "loss": diverged.loss,
                       "grad_norm": diverged.grad_norm, "last_checkpoint": str(kept) if kept else None}  # fmt: skip
            output_dir.mkdir(parents=True, exist_ok=True)
            (output_dir / "metrics.json").write_text(json.dumps({"stopped": stopped, "log_history": state.log_history}))
        raise DivergenceError(explain(diverged, state.global_step, self.recipe, kept, output_dir / "metrics.json"))


def finetune(recipe: Recipe, resume: bool = False, overwrite: bool = False) -> RunResult:
    """Fine-tune (or train) `recipe` with Trainer, save the model, tokenizer, card and metrics in
    training.output_dir, and return the run (`RunResult`; its summary is what metrics.json holds)."""
    t = recipe.training
    output_dir = Path(t.output_dir)
    check_precision(t)
    if not resume:
        refuse_earlier_run(
            output_dir, [n for n in ("checkpoints", "config.json") if (output_dir / n).exists()], overwrite
        )
    if resume and not list((output_dir / "checkpoints").glob("checkpoint-*")):
        raise MissingFileError(f"--resume: {output_dir} holds no checkpoint to resume from; run without --resume")
    torch.set_num_threads(choose_threads(t.threads))
    prepared = tasks.prepare(recipe, tokenizer_folder=None)
    task, tokenizer = prepared.task, prepared.tokenizer
    model = build_model(recipe, prepared)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    check_batch_split(t, world)
    per_device = t.batch_size // (t.gradient_accumulation_steps * world)
    generates = task.generates  # translation: BLEU of generated text at every evaluation
    if generates:
        tasks.set_decoding(model, recipe)  # Seq2SeqTrainer's evaluations decode as the recipe says
    args = trainer_arguments(recipe, per_device, generates)
    trainer = (Seq2SeqTrainer if generates else Trainer)(
        model=model,
        args=args,
        train_dataset=prepared.train,
        eval_dataset=prepared.held_out["eval"],
        data_collator=task.collator(recipe, tokenizer, model),
        processing_class=tokenizer,
        compute_metrics=task.trainer_metrics(tokenizer, model),
        callbacks=[DivergenceStop(recipe), *([WallClockBudget(t.max_seconds)] if t.max_seconds else [])],
    )
    if budget_note(t) and trainer.is_world_process_zero():
        print(budget_note(t))
    trainer.train(resume_from_checkpoint=True if resume else None)
    measured = tasks.evaluate(recipe, prepared, trainer.model, trainer.args.device)
    history = trainer.state.log_history
    evaluations = [{"step": h["step"], "eval_loss": h["eval_loss"]} for h in history if "eval_loss" in h]
    summary = {
        "steps": trainer.state.global_step,
        "seconds": sum(h.get("train_runtime", 0) for h in history),
        **{k: v for k, v in prepared.notes.items() if k.startswith("train_")},
        **measured,
    }
    if trainer.is_world_process_zero():
        if generates:
            tasks.set_decoding(trainer.model, recipe)  # Trainer left its fixed length in the generation config
        trainer.save_model(str(output_dir))
        (output_dir / "training_args.bin").unlink(missing_ok=True)  # a pickle: the recipe.json says the same
        losses = [h["loss"] for h in history if "loss" in h]
        curve = {"losses": losses, "evaluations": evaluations, "steps": [h["step"] for h in history if "loss" in h]}
        save_run_files(recipe, output_dir, tokenizer, model.config, summary, {"log_history": history}, curve)
    device = trainer.args.device
    return RunResult(trainer.model.eval(), tokenizer, evaluations, summary, output_dir, device, prepared, recipe)


def trainer_arguments(recipe: Recipe, per_device: int, generates: bool) -> TrainingArguments:
    """The recipe's training section as Trainer's arguments (Seq2SeqTrainer's, decoding at every evaluation, for a
    task that generates)."""
    t = recipe.training
    arguments_class = Seq2SeqTrainingArguments if generates else TrainingArguments
    # Seq2SeqTrainer takes one total length (the start token, the output, EOS); with the source-relative rule it is
    # the rule's limit at the longest source kept, data.block_size
    a, b = t.generation_max_length_a, t.generation_max_length_b
    longest = t.generation_max_new_tokens or math.ceil(a * recipe.data.block_size + b) + 1
    extra = {"predict_with_generate": True, "generation_max_length": longest + 1} if generates else {}
    extra |= {"generation_num_beams": t.generation_num_beams} if generates else {}
    return arguments_class(
        output_dir=str(Path(t.output_dir) / "checkpoints"),
        max_steps=t.max_steps,
        per_device_train_batch_size=per_device,
        per_device_eval_batch_size=per_device,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        learning_rate=t.learning_rate,
        weight_decay=t.weight_decay,
        adam_beta2=t.adam_beta2,
        warmup_steps=t.warmup_steps,
        # transformers' warmup_stable_decay is wsd in steps (its decay is cosine by default; hf-seq's is 1 - sqrt)
        lr_scheduler_type="warmup_stable_decay" if t.scheduler == "wsd" else t.scheduler,
        lr_scheduler_kwargs={"num_decay_steps": round(t.decay_fraction * t.max_steps), "decay_type": "1-sqrt"}
        if t.scheduler == "wsd"
        else {},
        max_grad_norm=t.max_grad_norm,
        eval_strategy="steps",
        eval_steps=t.eval_every,
        save_steps=t.save_every,
        save_total_limit=t.keep_checkpoints,
        logging_steps=max(1, min(10, t.eval_every)),
        logging_nan_inf_filter=False,  # a NaN loss is reported as it is, so that DivergenceStop sees it
        seed=t.seed,
        bf16=t.mixed_precision == "bf16",
        fp16=t.mixed_precision == "fp16",
        report_to=resolve_tracker(t.log_with) or "none",
        dataloader_pin_memory=torch.cuda.is_available(),
        torch_compile=t.compile,
        **extra,
    )
