"""`training.run` hands back the run as a value: the model it kept (the selected weights, not the last step's), on
the device it trained on, in eval mode, with the evaluations and summary metrics.json holds; and `runs.finished_run`
reads the same value back from the folder."""

import copy
import json

import torch
from safetensors.torch import load_file

from hf_seq.training.pretraining import run
from hf_seq.training.recipes import load_recipe
from hf_seq.training.runs import RunResult, finished_run
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
    assert result.evaluations == metrics.pop("evaluations") and result.summary == metrics
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
