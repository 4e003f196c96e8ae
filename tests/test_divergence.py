"""No run ends in silence: a diverging run stops with its reason and keeps its last finite weights; numbers a recipe
cannot mean (NaN, infinities, integers beyond a tensor's index) are refused naming the key; a model that cannot fit
in memory is refused before any data is read or any weight allocated."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from hf_seq.cli import main
from hf_seq.errors import UserError
from hf_seq.training import memory, pretraining
from hf_seq.training.checkpointing import checkpoints
from hf_seq.training.divergence import DivergenceError
from hf_seq.training.pretraining import run
from hf_seq.training.recipes import RecipeError, load_recipe
from tests.test_training import TINY_GPT


def _recipe(out, *overrides):
    return load_recipe(TINY_GPT, [f"training.output_dir={out}", "training.log_with=none", "data.max_chars=40000",
                                  "training.threads=1", *overrides])  # fmt: skip


@pytest.mark.parametrize(
    "override",
    ["training.weight_decay=nan", "training.weight_decay=.nan", "training.learning_rate=inf",
     "training.max_seconds=-.inf", "model.initializer_range=.nan", "data.eval_fraction=NaN"],
)  # fmt: skip
def test_non_finite_numbers_are_refused_naming_the_key(tmp_path, override):
    key = override.split("=")[0]
    with pytest.raises(RecipeError, match=rf"recipe key '{key}': -?(nan|inf) is not a finite number"):
        _recipe(tmp_path, override)


@pytest.mark.parametrize("override", ["model.hidden_size=100000000000000000000", "training.max_steps=10000000000000000000000"])
def test_integers_beyond_a_tensor_index_are_refused(tmp_path, override):
    with pytest.raises(RecipeError, match=r"beyond what a tensor can index \(at most 2\*\*63 - 1"):
        _recipe(tmp_path, override)


def test_a_number_written_without_a_dot_is_a_number(tmp_path):
    """YAML 1.1 reads 1e-2 as a string; recipes and overrides read it as the number it is, in every section."""
    recipe = _recipe(tmp_path, "model.initializer_range=1e-2")
    assert recipe.model["initializer_range"] == 0.01
    path = tmp_path / "recipe.yaml"
    path.write_text("family: gpt\nmodel: {hidden_size: 32, num_attention_heads: 2, initializer_range: 2e-2}\n"
                    "training: {learning_rate: 3e-4, output_dir: out}\n")  # fmt: skip
    recipe = load_recipe(path)
    assert recipe.model["initializer_range"] == 0.02 and recipe.training.learning_rate == 3e-4


def _no_data(*args, **kwargs):
    raise AssertionError("the data was read before the size was checked")


@pytest.mark.parametrize(
    "override, message",
    [("model.num_hidden_layers=1e30", r"num_hidden_layers must be an integer, got 1e\+30"),
     ("model.max_position_embeddings=1e30", r"max_position_embeddings must be an integer, got 1e\+30"),
     ("model.num_hidden_layers=1000000000000", r"num_hidden_layers=1000000000000\) has [0-9.e+]+ parameters and needs"),
     ("model.hidden_size=100000", "needs at least .* GiB to train one step of 256 tokens, but this machine has")],
)  # fmt: skip
def test_absurd_sizes_are_one_line_errors_before_any_allocation(tmp_path, monkeypatch, capsys, override, message):
    monkeypatch.setattr(pretraining, "prepare_data", _no_data)
    monkeypatch.setattr(pretraining, "build_model", _no_data)
    recipe = tmp_path / "tiny.json"
    recipe.write_text(json.dumps(TINY_GPT))
    with pytest.raises(SystemExit) as exit:
        main(["train", str(recipe), f"training.output_dir={tmp_path / 'out'}", "training.log_with=none", override])
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hf-seq: error: ") and "\n" not in err and "Traceback" not in err
    assert __import__("re").search(message, err), err
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_the_size_estimate_counts_what_a_model_holds():
    """On the meta device, and extrapolated past DIRECT_LAYERS layers: equal to the parameters of the real model."""
    from hf_seq import GPTConfig, GPTForCausalLM

    config = GPTConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2)
    real = sum(p.numel() for p in GPTForCausalLM(config).parameters())
    assert memory.count_parameters(GPTForCausalLM, config) == real
    deep = GPTConfig(vocab_size=50, hidden_size=16, num_hidden_layers=memory.DIRECT_LAYERS + 6, num_attention_heads=2)
    assert memory.count_parameters(GPTForCausalLM, deep) == sum(p.numel() for p in GPTForCausalLM(deep).parameters())


def test_a_model_that_fits_is_not_refused(monkeypatch):
    from hf_seq import GPTConfig, GPTForCausalLM

    config = GPTConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2)
    needed = memory.step_bytes(config, memory.count_parameters(GPTForCausalLM, config), 64)
    monkeypatch.setattr(memory, "available_bytes", lambda device: needed)
    assert memory.check_fits(GPTForCausalLM, config, 64, torch.device("cpu")) > 0
    monkeypatch.setattr(memory, "available_bytes", lambda device: needed - 1)
    with pytest.raises(memory.OutOfMemoryError, match="needs at least"):
        memory.check_fits(GPTForCausalLM, config, 64, torch.device("cpu"))


@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    """A tiny GPT with an absurd learning rate: the first full-rate step blows the weights up."""
    out = tmp_path_factory.mktemp("diverged") / "run"
    recipe = _recipe(out, "training.learning_rate=1e30", "training.warmup_steps=1", "training.max_grad_norm=0",
                     "training.save_every=1", "training.max_steps=20", "training.eval_every=100")  # fmt: skip
    with pytest.raises(DivergenceError) as error:
        run(recipe, progress=False)
    return out, str(error.value)


def test_a_diverging_run_stops_with_the_step_the_loss_and_the_causes(diverged):
    out, message = diverged
    assert message.startswith("training diverged at step ")
    assert "learning rate (training.learning_rate=1e+30)" in message and "initialisation" in message
    assert "precision" in message and str(out / "metrics.json") in message
    assert isinstance(DivergenceError(""), UserError)  # the command prints it in one line and exits 2
    metrics = json.loads((out / "metrics.json").read_text())
    stopped = metrics["stopped"]
    assert stopped["reason"] == "diverged" and f"step {stopped['step']}:" in message
    assert not math.isfinite(stopped["training_loss"]) or stopped["training_loss"] > 1e4
    assert all(math.isfinite(loss) for loss in metrics["losses"])  # the step that diverged was not applied
    assert not (out / "model.safetensors").exists()  # no model is saved as if the run had succeeded


def test_the_last_finite_checkpoint_is_named_and_loads(diverged):
    out, message = diverged
    kept = checkpoints(out)
    named = message.split("the last finite weights are in ")[1].split(",")[0]
    assert named in {str(folder) for folder in kept}
    weights = load_file(f"{named}/model.safetensors")
    assert weights and all(bool(torch.isfinite(v).all()) for v in weights.values())
    from hf_seq import GPTConfig, GPTForCausalLM

    vocab_size = weights["model.embed_tokens.weight"].shape[0]
    model = GPTForCausalLM(GPTConfig(vocab_size=vocab_size, **TINY_GPT["model"]))
    model.load_state_dict(weights, strict=False)  # the tied head is stored once
    assert torch.equal(model.model.embed_tokens.weight, weights["model.embed_tokens.weight"])


def test_the_command_says_it_in_one_line_and_exits_non_zero(tmp_path, capsys):
    recipe = tmp_path / "tiny.json"
    recipe.write_text(json.dumps(TINY_GPT))
    with pytest.raises(SystemExit) as exit:
        main(["train", str(recipe), f"training.output_dir={tmp_path / 'out'}", "training.log_with=none",
              "data.max_chars=40000", "training.threads=1", "training.learning_rate=1e30", "training.warmup_steps=1",
              "training.max_grad_norm=0", "training.max_steps=20"])  # fmt: skip
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hf-seq: error: training diverged at step "), err[-3:]


def test_a_diverging_finetune_stops_with_its_reason(tmp_path):
    """The Trainer runner checks its logged losses the same way: a NaN loss stops it with the one-line error."""
    from hf_seq.training.finetuning import finetune

    recipe = load_recipe(
        {
            "family": "gpt",
            "task": "sequence_classification",
            "model": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                      "max_position_embeddings": 32, "initializer_range": 1e30},  # fmt: skip
            "tokenizer": {"vocab_size": 300, "min_frequency": 1},
            "data": {"dataset": "parentheses", "block_size": 32, "max_examples": 100, "eval_examples": 20},
            "training": {"max_steps": 6, "batch_size": 8, "warmup_steps": 0, "eval_every": 6, "save_every": 6,
                         "output_dir": str(tmp_path / "run"), "log_with": "none"},  # fmt: skip
        },
        command="finetune",
    )
    with pytest.raises(DivergenceError, match=r"training diverged at step \d+: the training loss nan is not finite"):
        finetune(recipe)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["stopped"]["reason"] == "diverged"


def test_a_lineage_trial_that_diverges_is_reported_and_never_chosen(tmp_path, monkeypatch):
    from hf_seq.experiments import lineage, study
    from tests.test_corpus_layout import sentence_files

    grid = study.trial_grid

    def with_a_diverging_trial(count, s, past_epoch):
        trials = grid(count, s, past_epoch)
        return [trials[0] | {"learning_rate": 1e30}, *trials[1:]]

    monkeypatch.setattr(study, "trial_grid", with_a_diverging_trial)
    train, valid, test = sentence_files(tmp_path, lines=(400, 40, 40))
    result = lineage.run(quick=True, output_dir=tmp_path / "out", corpus=str(train), validation=str(valid),
                         test=str(test), members=("gpt",), tune=2, progress=False)  # fmt: skip
    (record,) = [r for r in result["members"] if r["name"] == "gpt"]
    failed, finished = record["trials"]
    assert failed["diverged"].startswith("training diverged at step ") and failed["eval_loss"] is None
    assert "diverged" not in finished and math.isfinite(finished["eval_loss"])
    assert record["learning_rate"] == finished["learning_rate"] != 1e30
    assert math.isfinite(record["final_eval_loss"])
