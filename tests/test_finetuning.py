"""hf-seq finetune: Trainer / Seq2SeqTrainer recipes for classification, token classification and translation."""

import json

import pytest

from hf_seq.training.finetuning import finetune
from hf_seq.training.recipes import RecipeError, load_recipe

TINY = {"embedding_dropout": 0.0, "hidden_dropout": 0.0}
SCHEDULE = {
    "max_steps": 12,
    "batch_size": 8,
    "learning_rate": 3e-3,
    "warmup_steps": 0,
    "eval_every": 12,
    "save_every": 12,
}


def recipe(family, task, model, dataset, tmp_path, **data):
    return load_recipe(
        {
            "family": family,
            "task": task,
            "model": model,
            "tokenizer": {"vocab_size": 300, "min_frequency": 1},
            "data": {"dataset": dataset, "block_size": 32, "max_examples": 400, "eval_examples": 40, **data},
            "training": {**SCHEDULE, "output_dir": str(tmp_path / family)},
        },
        command="finetune",
    )


def test_sequence_classification_from_scratch_reports_accuracy_and_f1(tmp_path):
    r = recipe(
        "gpt",
        "sequence_classification",
        {
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 32,
            "attention_dropout": 0.0,
            **TINY,
        },
        "parentheses",
        tmp_path,
    )
    summary = finetune(r)
    assert summary["steps"] == 12 and summary["eval_examples"] == 20  # 5% of 400 rows, all scored
    # hf-seq evaluate on a fine-tuned run measures what the run reported (the same task evaluation)
    from hf_seq.training.pretraining import evaluate_folder

    again = evaluate_folder(tmp_path / "gpt")
    assert again["eval_accuracy"] == pytest.approx(summary["eval_accuracy"]) and again["eval_f1"] == pytest.approx(
        summary["eval_f1"]
    )
    out = tmp_path / "gpt"
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "0", "1": "1"} and config["architectures"] == ["GPTForSequenceClassification"]
    card = (out / "README.md").read_text()
    assert "pipeline_tag: text-classification" in card and f"{summary['eval_accuracy']:.4g}" in card
    assert not (out / "training_args.bin").exists()
    from hf_seq.hub.checksums import verify_checksums

    assert verify_checksums(out) == ["model.safetensors"]  # the weights' SHA-256, for hf-seq evaluate / push


def test_token_classification_continues_from_a_saved_model(tmp_path):
    from hf_seq import RNNConfig, RNNForCausalLM
    from hf_seq.data.corpora import python_token_tagging
    from hf_seq.data.tokenization import train_bpe_tokenizer

    texts = [" ".join(r["tokens"]) for r in python_token_tagging(300)]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=300, min_frequency=1, style="bert")
    pretrained = tmp_path / "lm"
    RNNForCausalLM(
        RNNConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=1,
            pad_token_id=0,
            cell_type="gru",
            **TINY,
            output_dropout=0.0,
        )
    ).save_pretrained(pretrained)
    tokenizer.save_pretrained(pretrained)
    r = recipe("rnn", "token_classification", {"from_pretrained": str(pretrained)}, "python-tokens", tmp_path)
    summary = finetune(r)
    assert {"eval_accuracy", "eval_precision", "eval_recall", "eval_f1"} <= set(summary)
    config = json.loads((tmp_path / "rnn" / "config.json").read_text())
    assert config["label2id"]["B-KEYWORD"] == 1 and config["hidden_size"] == 32  # the saved body was reused


def test_translation_with_seq2seq_trainer_reports_bleu(tmp_path):
    r = recipe(
        "transformer",
        "translation",
        {
            "hidden_size": 32,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 64,
        },
        "gettext",
        tmp_path,
    )
    r.training.generation_max_new_tokens = 8
    summary = finetune(r)
    assert summary["steps"] == 12 and {"eval_bleu", "eval_loss", "eval_bits_per_byte"} <= set(summary)
    card = (tmp_path / "transformer" / "README.md").read_text()
    assert "BLEU" in card and "pipeline_tag: translation" in card


def test_finetune_recipes_are_checked_for_their_command():
    base = {"family": "gpt", "model": {}, "data": {"dataset": "parentheses"}}
    with pytest.raises(RecipeError, match="is a task of `hf-seq finetune`"):
        load_recipe({**base, "task": "sequence_classification"}, command="train")
    with pytest.raises(RecipeError, match="cannot do task 'token_classification'"):
        load_recipe({**base, "task": "token_classification"}, command="finetune")
    with pytest.raises(RecipeError, match="from_pretrained"):
        load_recipe({**base, "task": "causal_lm", "model": {"from_pretrained": "x"}}, command="train")
