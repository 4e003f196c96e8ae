"""`training.run` hands back the run as a value: the model it kept (the selected weights, not the last step's), on
the device it trained on, in eval mode, with the evaluations and summary metrics.json holds; and `runs.finished_run`
reads the same value back from the folder, through `open_run`, the one way a run folder is opened (its refusals are
one line each)."""

import copy
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hf_seq.errors import InvalidValueError, MissingFileError
from hf_seq.hub.checksums import ChecksumError
from hf_seq.training.pretraining import run
from hf_seq.training.recipes import load_recipe
from hf_seq.training.runs import RunResult, finished_run, open_run
from tests.test_training import TINY_GPT


def test_the_run_returns_the_selected_model_its_evaluations_and_summary(tmp_path):
    tree = copy.deepcopy(TINY_GPT)
    overrides = [f"training.output_dir={tmp_path / 'run'}", "training.threads=1", "training.log_with=none"]
    # a learning rate far too high: the held-out loss rises after the first steps, so the best is not the last
    overrides += ["training.select_by=loss", "training.patience=2", "training.eval_every=1", "training.max_steps=16"]
    overrides += ["training.learning_rate=0.3", "training.warmup_steps=0", "training.scheduler=constant"]
    overrides += ["training.save_every=100"]
    overrides += ["model.embedding_dropout=0.0", "model.hidden_dropout=0.0"]
    recipe = load_recipe(tree, overrides)
    result = run(recipe, progress=False)

    assert isinstance(result, RunResult) and result.folder == tmp_path / "run"
    metrics = json.loads((result.folder / "metrics.json").read_text())
    evaluations, rates = metrics.pop("evaluations"), metrics.pop("learning_rates")  # the history beside the summary
    assert result.evaluations == evaluations and result.summary == metrics and len(rates) == result.summary["steps"]
    assert result["eval_loss"] == metrics["eval_loss"]  # it still reads as the summary dict it replaced
    losses = {e["step"]: e["eval_loss"] for e in result.evaluations}
    assert result.summary["best_step"] == min(losses, key=losses.get) < max(losses), losses
    saved = load_file(str(result.folder / "model.safetensors"))
    weights = result.model.state_dict()
    assert all(torch.equal(weights[name], tensor) for name, tensor in saved.items())  # the selected weights
    assert not result.model.training and result.device == torch.device("cpu")
    assert result.tokenizer is result.prepared.tokenizer and result.recipe == recipe

    again = finished_run(recipe)  # the same run, read back from its folder
    assert again.summary == result.summary and again.evaluations == result.evaluations
    assert all(torch.equal(again.model.state_dict()[name], tensor) for name, tensor in saved.items())


def test_a_run_takes_data_already_prepared(tmp_path):
    """A study prepares its data once; the run trains on it exactly as on data it prepares itself."""
    from hf_seq.data import tasks

    tree = copy.deepcopy(TINY_GPT)
    common = ["training.threads=1", "training.log_with=none", "training.max_steps=3", "training.eval_every=3"]
    first = run(load_recipe(tree, [f"training.output_dir={tmp_path / 'a'}", *common]), progress=False)
    recipe = load_recipe(tree, [f"training.output_dir={tmp_path / 'b'}", f"tokenizer.path={tmp_path / 'a'}", *common])
    prepared = tasks.prepare(recipe)
    second = run(recipe, progress=False, prepared=prepared)
    assert second.prepared is prepared
    assert second.summary["eval_loss"] == first.summary["eval_loss"]
    assert all(torch.equal(second.model.state_dict()[k], v) for k, v in first.model.state_dict().items())


# ---------------------------------------------------------------------------------------------- open_run
def save_tiny(folder, family_name: str, auto_class: str, tokenizer, **keys):
    """A tiny untrained model saved as a run saves one: weights, tokenizer and checksums.json."""
    from hf_seq.hub.checksums import record_checksums
    from hf_seq.registry import family

    torch.manual_seed(0)
    fam = family(family_name)
    config = fam.config_class(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **keys)
    fam.model_class(auto_class)(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record_checksums(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer():
    from hf_seq.data.tokenization import train_bpe_tokenizer

    return train_bpe_tokenizer(["def f(x):\n    return x\n"] * 20, vocab_size=300, show_progress=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tokenizer):
    """A tiny GPT classifier's folder with the metrics.json a run writes."""
    folder = save_tiny(tmp_path_factory.mktemp("open") / "classifier", "gpt", "AutoModelForSequenceClassification",
                       tokenizer, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)  # fmt: skip
    (folder / "metrics.json").write_text(json.dumps({"eval_loss": 1.5, "evaluations": [{"step": 3, "eval_loss": 2.0}]}))
    return folder


def test_open_run_gives_the_saved_class_its_tokenizer_and_metrics(saved, tokenizer):
    run = open_run(saved)
    assert type(run.model).__name__ == "GPTForSequenceClassification" and not run.model.training
    assert run.tokenizer.get_vocab() == tokenizer.get_vocab()
    assert run.summary == {"eval_loss": 1.5} and run.evaluations == [{"step": 3, "eval_loss": 2.0}]
    assert run.folder == saved and run.device == torch.device("cpu") and run.recipe is None
    assert run["eval_loss"] == 1.5


def copy_of(folder, tmp_path):
    return Path(shutil.copytree(folder, tmp_path / "copy"))


def test_open_run_refuses_in_one_line(saved, tmp_path):
    """Each refusal is a UserError (one line, `hf-seq: error: ...`) naming the folder and what is allowed."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingFileError, match=f"{tmp_path / 'missing'} does not exist"):
        open_run(tmp_path / "missing")
    with pytest.raises(MissingFileError, match="holds no config.json: give the output_dir of a run"):
        open_run(tmp_path / "empty")
    with pytest.raises(MissingFileError, match=r"someone/model does not exist \(give a run folder\)$"):
        open_run("someone/model", hub=False)  # a Hub name where only a local folder will do
    message = (
        "holds a GPTForSequenceClassification (AutoModelForSequenceClassification); what can be read here: "
        "AutoModelForCausalLM, AutoModelForSeq2SeqLM"
    )
    with pytest.raises(InvalidValueError, match=re.escape(message)):
        open_run(saved, accept=("AutoModelForCausalLM", "AutoModelForSeq2SeqLM"))
    damaged = copy_of(saved, tmp_path)
    weights = damaged / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + bytes(8))
    with pytest.raises(ChecksumError, match=f"{weights} does not match"):
        open_run(damaged)


def test_open_run_refuses_a_model_that_is_not_an_hf_seq_family(saved, tmp_path):
    other = copy_of(saved, tmp_path)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"architectures": ["GPTForQuestionAnswering"]}))
    with pytest.raises(InvalidValueError, match="names the model class 'GPTForQuestionAnswering', which is not one of"):
        open_run(other)
    (other / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(InvalidValueError, match="holds a 'bert' model, not one of hf-seq's families .hf_seq_rnn, "):
        open_run(other)
    (other / "config.json").write_text("{}")
    with pytest.raises(MissingFileError, match="config.json does not load"):
        open_run(other)


def test_open_run_reads_a_saved_ngram_only_where_asked(tmp_path, tokenizer):
    from hf_seq.baselines.ngram import KneserNeyLM
    from hf_seq.hub.checksums import record_checksums

    ids = tokenizer("def f(x):\n    return x\n" * 4)["input_ids"]
    lm = KneserNeyLM(len(tokenizer), order=3).fit(ids)
    lm.save_pretrained(tmp_path / "ngram")
    tokenizer.save_pretrained(tmp_path / "ngram")
    record_checksums(tmp_path / "ngram")
    run = open_run(tmp_path / "ngram", accept=("AutoModelForCausalLM", "KneserNeyLM"))
    assert isinstance(run.model, KneserNeyLM) and run.tokenizer is not None
    assert np.array_equal(run.model.token_nll(ids), lm.token_nll(ids))
    with pytest.raises(InvalidValueError, match="holds an n-gram .KneserNeyLM.; only a model of an hf-seq family"):
        open_run(tmp_path / "ngram")
