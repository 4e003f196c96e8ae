"""Fine-tuning with transformers' `Trainer` / `Seq2SeqTrainer`: sequence classification, token classification and
translation, from a recipe, with the metric each task needs (accuracy and macro F1; token accuracy and entity F1;
BLEU). The model starts from a saved checkpoint (`model.from_pretrained: FOLDER`) or from scratch (config keys)."""

import dataclasses
import json
import os
from pathlib import Path

import datasets
import torch
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
    TrainingArguments,
)

from hf_seq import data as data_lib
from hf_seq.evaluation import bleu_metrics, classification_metrics, token_classification_metrics
from hf_seq.recipes import TASKS, Recipe, resolve_tracker
from hf_seq.registry import family as get_family
from hf_seq.training import build_config, plot_loss_curve


def load_rows(recipe: Recipe) -> tuple[list[dict], list[dict]]:
    d = recipe.data
    n = d.max_examples
    if d.dataset in data_lib.FINETUNE_TASKS:
        make, task = data_lib.FINETUNE_TASKS[d.dataset]
        if task != recipe.task:
            raise ValueError(f"data.dataset={d.dataset!r} is a {task} task, but the recipe's task is {recipe.task!r}")
        rows = make(n, seed=1234) if n else make(seed=1234)
    elif d.dataset == "gettext":
        rows = data_lib.gettext_pairs(d.target_language, max_pairs=n)
    elif d.dataset in getattr(data_lib, "SYNTHETIC_TASKS", {}):
        rows = data_lib.SYNTHETIC_TASKS[d.dataset](num_examples=n or 20000, seed=1234)
    else:
        rows = list(data_lib.load_text_dataset(d.dataset, text_column=_first_column(recipe)))[:n]
    n_eval = max(1, int(len(rows) * d.eval_fraction))
    return rows[n_eval:], rows[:n_eval]


def _first_column(recipe: Recipe) -> str:
    d = recipe.data
    return {"sequence_classification": d.text_column, "token_classification": d.tokens_column}.get(
        recipe.task, d.source_column
    )


def _columns(recipe: Recipe, row: dict) -> dict:
    d = recipe.data
    if recipe.task == "sequence_classification":
        return {"text": row.get(d.text_column, row.get("text")), "label": row.get(d.label_column, row.get("label"))}
    if recipe.task == "token_classification":
        return {"tokens": row.get(d.tokens_column, row.get("tokens")), "tags": row.get(d.tags_column, row.get("tags"))}
    return {
        "source": row.get(d.source_column, row.get("source")),
        "target": row.get(d.target_column, row.get("target")),
    }


def label_names(recipe: Recipe, rows: list[dict]) -> list[str] | None:
    if recipe.task == "sequence_classification":
        return sorted({str(r["label"]) for r in rows})
    if recipe.task == "token_classification":
        if recipe.data.dataset == "python-tokens":
            return list(data_lib.PYTHON_TAGS)
        return sorted({t for r in rows for t in r["tags"]})
    return None


def tokenize_rows(recipe: Recipe, rows: list[dict], tokenizer, label2id: dict | None) -> datasets.Dataset:
    max_length = recipe.data.block_size
    if recipe.task == "sequence_classification":
        enc = tokenizer([r["text"] for r in rows], truncation=True, max_length=max_length)
        enc["labels"] = [label2id[str(r["label"])] for r in rows]
        return datasets.Dataset.from_dict(dict(enc))
    if recipe.task == "token_classification":
        enc = tokenizer([r["tokens"] for r in rows], is_split_into_words=True, truncation=True, max_length=max_length)
        labels = []
        for i, row in enumerate(rows):
            previous, row_labels = None, []
            for word in enc.word_ids(i):  # the first piece of each word carries its tag; the rest are ignored
                row_labels.append(-100 if word is None or word == previous else label2id[row["tags"][word]])
                previous = word
            labels.append(row_labels)
        enc["labels"] = labels
        return datasets.Dataset.from_dict(dict(enc))
    eos = tokenizer.eos_token_id
    return datasets.Dataset.from_dict(
        {
            "input_ids": [tokenizer(r["source"], add_special_tokens=False)["input_ids"][:max_length] for r in rows],
            "labels": [
                tokenizer(r["target"], add_special_tokens=False)["input_ids"][: max_length - 1] + [eos] for r in rows
            ],
        }
    )


def finetune(recipe: Recipe, resume: bool = False) -> dict:
    t, fam = recipe.training, get_family(recipe.family)
    output_dir = Path(t.output_dir)
    train_rows, eval_rows = load_rows(recipe)
    train_rows = [_columns(recipe, r) for r in train_rows]
    eval_rows = [_columns(recipe, r) for r in eval_rows]
    names = label_names(recipe, train_rows + eval_rows)
    label2id = {name: i for i, name in enumerate(names)} if names else None
    label_kwargs = {"num_labels": len(names), "id2label": dict(enumerate(names)), "label2id": label2id} if names else {}

    model_kwargs = dict(recipe.model)
    source = model_kwargs.pop("from_pretrained", None)
    auto_class = TASKS[recipe.task]
    tokenizer_path = recipe.tokenizer.path or source
    if tokenizer_path:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    else:
        from hf_seq.tokenization import train_bpe_tokenizer

        texts = [
            " ".join(r["tokens"]) if "tokens" in r else r.get("text") or f"{r['source']}\n{r['target']}"
            for r in train_rows
        ]
        style = recipe.tokenizer.style or ("bert" if fam.name == "bert" else "byte_level")
        tokenizer = train_bpe_tokenizer(
            texts, vocab_size=recipe.tokenizer.vocab_size, style=style, min_frequency=recipe.tokenizer.min_frequency
        )
    model_class = fam.model_class(auto_class)
    if source:
        model = model_class.from_pretrained(source, **label_kwargs, **model_kwargs)
    else:
        model = model_class(
            build_config(dataclasses.replace(recipe, model={**model_kwargs, **label_kwargs}), tokenizer)
        )

    train_set = tokenize_rows(recipe, train_rows, tokenizer, label2id)
    eval_set = tokenize_rows(recipe, eval_rows[: recipe.data.eval_examples], tokenizer, label2id)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_device = t.batch_size // (t.gradient_accumulation_steps * world)
    if per_device < 1 or per_device * t.gradient_accumulation_steps * world != t.batch_size:
        raise ValueError(
            f"training.batch_size ({t.batch_size}) must be divisible by gradient_accumulation_steps x processes "
            f"({t.gradient_accumulation_steps} x {world})"
        )
    seq2seq = recipe.task == "translation"
    common = dict(
        output_dir=str(output_dir / "checkpoints"),
        max_steps=t.max_steps,
        per_device_train_batch_size=per_device,
        per_device_eval_batch_size=per_device,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        learning_rate=t.learning_rate,
        weight_decay=t.weight_decay,
        adam_beta2=t.adam_beta2,
        warmup_steps=t.warmup_steps,
        lr_scheduler_type=t.scheduler,
        max_grad_norm=t.max_grad_norm,
        eval_strategy="steps",
        eval_steps=t.eval_every,
        save_steps=t.save_every,
        save_total_limit=t.keep_checkpoints,
        logging_steps=max(1, min(10, t.eval_every)),
        seed=t.seed,
        bf16=t.mixed_precision == "bf16",
        fp16=t.mixed_precision == "fp16",
        report_to=resolve_tracker(t.log_with) or "none",
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    if seq2seq:
        args = Seq2SeqTrainingArguments(
            **common,
            predict_with_generate=True,
            generation_max_length=t.generation_max_new_tokens,
            generation_num_beams=t.generation_num_beams,
        )
        collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
        metrics_fn = bleu_metrics(tokenizer)
    else:
        args = TrainingArguments(**common)
        collator = (
            DataCollatorWithPadding(tokenizer)
            if recipe.task == "sequence_classification"
            else DataCollatorForTokenClassification(tokenizer)
        )
        metrics_fn = (
            classification_metrics
            if recipe.task == "sequence_classification"
            else token_classification_metrics(model.config.id2label)
        )
    trainer_class = Seq2SeqTrainer if seq2seq else Trainer
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=metrics_fn,
    )
    trainer.train(resume_from_checkpoint=True if resume else None)
    measured = trainer.evaluate()
    history = trainer.state.log_history
    summary = {
        "steps": trainer.state.global_step,
        **{k.removeprefix("eval_"): v for k, v in measured.items() if not k.endswith(("runtime", "per_second"))},
    }
    if "loss" in summary:
        summary["eval_loss"] = summary.pop("loss")
    if trainer.is_world_process_zero():
        trainer.save_model(str(output_dir))
        (output_dir / "training_args.bin").unlink(missing_ok=True)  # a pickle: the recipe.json says the same
        tokenizer.save_pretrained(output_dir)
        (output_dir / "metrics.json").write_text(json.dumps({**summary, "log_history": history}, indent=2))
        (output_dir / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2))
        losses = [h["loss"] for h in history if "loss" in h]
        evaluations = [{"step": h["step"], "eval_loss": h["eval_loss"]} for h in history if "eval_loss" in h]
        if losses:
            steps = [h["step"] for h in history if "loss" in h]
            plot_loss_curve(losses, evaluations, output_dir / "loss_curve.png", steps=steps)
        from hf_seq.cards import write_card

        write_card(output_dir, recipe=recipe.to_dict(), metrics=summary)
    return summary
