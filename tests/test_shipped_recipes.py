"""The recipes shipped in the package (hf_seq/recipe_files/, which a checkout's recipes/ links to): each validates
for the command it is for, `hf-seq recipes` lists every one, `hf-seq recipes show NAME` prints one, and
`hf-seq train NAME` / `hf-seq finetune NAME` find one by name when no file of that name exists."""

import types
from pathlib import Path, PurePosixPath

import pytest
import yaml

from hf_seq.cli import main, recipe_parameters
from hf_seq.training.recipes import SHIPPED, load_recipe, recipe_command, shipped_files, shipped_recipes

ROOT = Path(__file__).resolve().parents[1]
NAMES = list(shipped_recipes())


def test_the_checkout_recipes_folder_is_the_shipped_one():
    assert (ROOT / "recipes").resolve() == SHIPPED.resolve()
    assert {"gpt-tiny", "lstm-tiny", "bert-mlm-tiny", "transformer-gettext-tiny", "gpt2-small"} <= set(NAMES)
    assert {"accelerate/cpu", "accelerate/fsdp", "slurm/train-multinode"} <= set(shipped_files())


def test_pyproject_ships_every_file_of_the_folder():
    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["hf_seq"]
    package = SHIPPED.parent
    unshipped = [
        str(path.relative_to(package))
        for path in SHIPPED.rglob("*")
        if path.is_file() and not any(PurePosixPath(path.relative_to(package).as_posix()).match(p) for p in patterns)
    ]
    assert not unshipped, f"add them to [tool.setuptools.package-data] in pyproject.toml: {unshipped}"


@pytest.mark.parametrize("name", NAMES)
def test_every_shipped_recipe_validates(name):
    command = recipe_command(yaml.safe_load(shipped_recipes()[name].read_text()))
    recipe = load_recipe(name, command=command)
    minutes = recipe.card.get("cpu_minutes")
    assert minutes is None or (isinstance(minutes, (int, float)) and minutes > 0)
    if name.endswith("-tiny"):
        assert minutes, f"{name}: a CPU recipe states card.cpu_minutes, for `hf-seq recipes`"


def test_recipes_lists_every_one_with_its_command_family_task_and_size(capsys):
    main(["recipes"])
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.strip()}
    for name in NAMES:
        assert name in rows, f"`hf-seq recipes` does not list {name}"
    assert rows["gpt-tiny"][1:5] == ["train", "gpt", "causal_lm", "1.3M"]
    assert rows["gpt-parentheses-tiny"][1:4] == ["finetune", "gpt", "sequence_classification"]
    assert rows["gpt2-small"][4:] == ["110M", "GPU-sized"]
    assert rows["bahdanau-reversal-tiny"][5].startswith("~")


def test_the_size_is_the_model_the_recipe_builds():
    # GPT-2 small's 124,439,808 parameters, less (50,257 - 32,000) x 768 for the recipe's smaller vocabulary
    assert recipe_parameters(load_recipe("gpt2-small")) == 124_439_808 - (50_257 - 32_000) * 768


@pytest.mark.parametrize("name", ["gpt-tiny", "gpt-tiny.yaml", "accelerate/fsdp"])
def test_recipes_show_prints_the_file(capsys, name):
    main(["recipes", "show", name])
    assert capsys.readouterr().out == shipped_files()[name.removesuffix(".yaml")].read_text()


def test_recipes_show_an_unknown_name_lists_the_allowed_ones(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["recipes", "show", "gpt-huge"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("hf-seq: error: recipes show: no shipped file 'gpt-huge'; allowed names: ")
    assert "gpt-tiny" in err and "accelerate/fsdp" in err


@pytest.fixture
def trained(monkeypatch, tmp_path):
    """Stop `hf-seq train` / `finetune` before training: the recipe each was given, from a folder outside the
    checkout."""
    given = []

    def run(recipe, **kwargs):
        given.append(recipe)
        return types.SimpleNamespace(summary={})

    monkeypatch.setattr("hf_seq.training.run", run)
    monkeypatch.setattr("hf_seq.training.finetuning.finetune", run)
    monkeypatch.chdir(tmp_path)
    return given


def test_train_takes_a_shipped_recipe_by_name(trained):
    main(["train", "gpt-tiny", "training.max_steps=5"])
    main(["finetune", "gpt-parentheses-tiny"])
    gpt, classifier = trained
    assert (gpt.family, gpt.task, gpt.training.max_steps, gpt.model["hidden_size"]) == ("gpt", "causal_lm", 5, 128)
    assert classifier.task == "sequence_classification"


def test_a_file_that_exists_wins_over_the_shipped_name(trained):
    Path("gpt-tiny").write_text(yaml.safe_dump({"family": "rnn", "model": {"hidden_size": 8}}))
    main(["train", "gpt-tiny"])
    assert trained[0].family == "rnn"


def test_an_unknown_recipe_name_is_one_line_naming_the_shipped_ones(trained, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "gpt-huge"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("hf-seq: error: recipe not found: gpt-huge is neither a file nor a shipped recipe")
    assert all(name in err for name in NAMES)
    assert not trained
