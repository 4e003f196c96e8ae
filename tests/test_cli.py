import json
import subprocess
import sys
from pathlib import Path

import pytest

from hf_seq.cli import main

TINY_DEMO = [
    "training.max_steps=4",
    "training.eval_every=2",
    "data.max_chars=300000",
    "tokenizer.vocab_size=400",
    "model.hidden_size=32",
    "model.num_hidden_layers=1",
    "data.block_size=32",
    "model.max_position_embeddings=64",
]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "demo"
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["demo", "--output-dir", str(out), "--new-tokens", "4", *TINY_DEMO]) == 0
    return out, printed.getvalue()


def test_demo_trains_saves_reloads_and_generates(demo_run):
    out, printed = demo_run
    from hf_seq.cli import DEMO_PROMPTS

    assert "held-out perplexity" in printed and "bits per byte" in printed
    assert printed.count("-" * 60) == len(DEMO_PROMPTS) + 1
    assert not any(prompt.endswith(" ") for prompt in DEMO_PROMPTS)  # a trailing space token makes odd completions
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "hf_seq_gpt" and "AutoModelForCausalLM" in config["auto_map"]
    for name in ("model.safetensors", "tokenizer.json", "modeling_gpt.py", "README.md", "loss_curve.png"):
        assert (out / name).exists(), name
    metrics = json.loads((out / "metrics.json").read_text())
    card = (out / "README.md").read_text()
    for key in ("eval_perplexity", "eval_bits_per_byte"):
        assert f"{metrics[key]:.4g}" in card  # the card states the measured numbers


def test_evaluate_measures_what_training_reported(demo_run, capsys):
    out, _ = demo_run
    main(["evaluate", str(out), "--json"])
    measured = json.loads(capsys.readouterr().out)
    reported = json.loads((out / "metrics.json").read_text())
    for key in ("eval_loss", "eval_perplexity", "eval_bits_per_byte"):
        assert measured[key] == pytest.approx(reported[key], rel=1e-5)
    assert measured["eval_tokens"] == reported["eval_tokens"] and measured["eval_bytes"] == reported["eval_bytes"]


def test_generate_with_a_seed_repeats_its_samples(demo_run, capsys):
    out, _ = demo_run
    args = ["generate", str(out), "--prompt", "def ", "--max-new-tokens", "12", "--do-sample", "--top-k", "50"]
    outputs = []
    for seed in (1, 1, 2):
        main([*args, "--seed", str(seed)])
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0] != outputs[2]


def test_generate_from_prompt_and_file(demo_run, tmp_path, capsys):
    out, _ = demo_run
    main(["generate", str(out), "--prompt", "def ", "--max-new-tokens", "3"])
    assert capsys.readouterr().out.startswith("def ")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("import \nclass \n")
    main(["generate", str(out), "--file", str(prompts), "--max-new-tokens", "3", "--do-sample", "--top-k", "5"])
    lines = capsys.readouterr().out
    assert "import " in lines and "class " in lines


def test_push_dry_run_checks_the_folder_loads_without_hf_seq(demo_run, capsys):
    out, _ = demo_run
    main(["push", str(out), "someone/tiny-gpt", "--dry-run"])
    printed = capsys.readouterr().out
    assert "nothing uploaded" in printed and "'AutoModelForCausalLM': 'GPTForCausalLM'" in printed
    assert "checkpoints/" not in printed  # run state stays local
    assert "README.md" in printed and "loss_curve.png" in printed


def test_push_refuses_a_broken_folder(demo_run, tmp_path):
    import shutil

    from hf_seq.hub.publish import check_folder, push

    broken = tmp_path / "broken"
    shutil.copytree(demo_run[0], broken)
    (broken / "README.md").unlink()
    with pytest.raises(FileNotFoundError, match="hf-seq card"):
        push(broken, "someone/x", dry_run=True)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(RuntimeError, match="does not load without hf-seq"):
        check_folder(broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        check_folder(broken)


def test_unknown_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--no-such-flag"])
    assert "unrecognized arguments" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- user errors
GPT_TINY = str(Path(__file__).resolve().parents[1] / "recipes" / "gpt-tiny.yaml")


# (argv, the start of the one line printed after `hf-seq: error: `) for errors in what the user gave; {tmp} is a
# fresh folder holding `not-a-model/` (an empty folder) and `earlier/config.json` (an earlier run)
USER_ERRORS = [
    (["train", "{tmp}/nope.yaml"], "recipe not found: {tmp}/nope.yaml"),
    (["train", GPT_TINY, "training.no_such_key=1"], "unknown recipe key(s) ['training.no_such_key']"),
    (["train", GPT_TINY, "training.max_steps=many"], "recipe key 'training.max_steps': expected int"),
    (["train", GPT_TINY, "training.max_steps=[1"], "override training.max_steps=[1: the value is not valid YAML"),
    (["train", GPT_TINY, "training.output_dir={tmp}/run", "data.dataset=/no-such-dir/a.txt"], "data.dataset: file "),
    (["train", GPT_TINY, "training.output_dir={tmp}/earlier"], "{tmp}/earlier holds an earlier run"),
    (["train", GPT_TINY, "training.output_dir={tmp}/run", "--resume"], "--resume: {tmp}/run holds no run to resume"),
    (["train", GPT_TINY, "training.output_dir={tmp}/run", "tokenizer.path={tmp}/not-a-model"], "tokenizer.path: "),
    (["evaluate", "{tmp}/not-a-model"], "{tmp}/not-a-model holds no config.json"),
    (["evaluate", "{tmp}/not-a-model", "--recipe", GPT_TINY], "{tmp}/not-a-model holds no config.json"),
    (["generate", "{tmp}/not-a-model", "--prompt", "def"], "{tmp}/not-a-model holds no config.json"),
    (["generate", "{tmp}/no-such-run", "--prompt", "def"], "{tmp}/no-such-run does not exist"),
    (["card", "{tmp}/not-a-model"], "{tmp}/not-a-model holds no config.json"),
    (["push", "{tmp}/not-a-model", "someone/x", "--dry-run"], "{tmp}/not-a-model is not a saved model"),
    (["train-tokenizer", "--files", "{tmp}/nope.txt", "--output-dir", "{tmp}/tok"], "--files: file not found"),
    (["lineage", "--members", "rnn", "--output-dir", "{tmp}/lineage"], "lineage: unknown member 'rnn'"),
    (["experiment", "nope"], "unknown experiment 'nope'"),
]


@pytest.mark.parametrize(
    "argv, message", USER_ERRORS, ids=[" ".join(argv).replace(GPT_TINY, "gpt-tiny.yaml") for argv, _ in USER_ERRORS]
)
def test_a_user_error_prints_one_line_and_exits_2(argv, message, tmp_path, capsys):
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "config.json").write_text("{}")  # a finished run's model
    with pytest.raises(SystemExit) as exit_info:
        main([item.format(tmp=tmp_path) for item in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith(f"hf-seq: error: {message.format(tmp=tmp_path)}") and err.count("\n") == 1, err


def test_fp16_on_a_cpu_is_a_user_error(tmp_path, capsys):
    import torch

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("fp16 is allowed here")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", GPT_TINY, f"training.output_dir={tmp_path}", "training.mixed_precision=fp16"])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr().err
        == "hf-seq: error: training.mixed_precision='fp16' needs a GPU; on a CPU use 'bf16' (or 'no')\n"
    )


def test_a_message_of_several_lines_follows_the_error_line(tmp_path, capsys):
    """--resume with a changed recipe lists the keys, one per line, under the error line."""
    from hf_seq.training.recipes import load_recipe

    interrupted = load_recipe(GPT_TINY, [f"training.output_dir={tmp_path}", "training.learning_rate=0.1"])
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "recipe.json").write_text(json.dumps(interrupted.to_dict()))
    with pytest.raises(SystemExit) as exit_info:
        main(["train", GPT_TINY, f"training.output_dir={tmp_path}", "--resume"])
    lines = capsys.readouterr().err.splitlines()
    assert exit_info.value.code == 2
    assert lines[0] == "hf-seq: error: --resume with a different recipe; these keys may not change on resume:"
    assert lines[1] == "  training.learning_rate: 0.1 -> 0.002"


def hf_seq_command(*argv: str, before: str = "") -> subprocess.CompletedProcess:
    """`python -m hf_seq.cli ARGV` in a fresh process (`before`: Python run first, e.g. to plant a bug)."""
    code = f"import sys\n{before}\nfrom hf_seq.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)


def test_the_command_prints_no_traceback_for_a_user_error_and_one_with_debug(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    result = hf_seq_command("train", missing, "training.max_steps=3")
    assert (result.returncode, result.stderr) == (2, f"hf-seq: error: recipe not found: {missing}\n")
    for argv in (["--debug", "train", missing], ["train", missing, "--debug", "training.max_steps=3"]):
        result = hf_seq_command(*argv)
        assert result.returncode == 1, argv
        assert "Traceback" in result.stderr and f"MissingFileError: recipe not found: {missing}" in result.stderr


@pytest.mark.parametrize("error", ["RuntimeError", "ValueError", "FileNotFoundError"])
def test_a_failure_inside_keeps_its_traceback(error):
    """A bug is told from a user error by its type, never by its message: an exception that is not a UserError,
    even one whose message reads like a recipe error, prints its traceback and exits with status 1."""
    bug = f"import hf_seq.training.pretraining\ndef run(*a, **k): raise {error}('data.dataset: planted')\nhf_seq.training.run = run"
    result = hf_seq_command("train", GPT_TINY, before=bug)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and f"{error}: data.dataset: planted" in result.stderr
    assert "hf-seq: error" not in result.stderr


# ---------------------------------------------------------------------------------------------- one way to open a run
def one_line_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("hf-seq: error: ") and err.count("\n") == 1, err
    return err.strip()


def test_generate_and_card_open_a_run_folder_as_every_command_does(tmp_path, capsys):
    """`generate` and `card` read a folder through `open_run`: a model generate cannot use is refused before its
    weights are read, naming its class and what generate reads; damaged weights get no card."""
    from hf_seq.data.tokenization import train_bpe_tokenizer
    from tests.test_run_result import save_tiny

    tokenizer = train_bpe_tokenizer(["def f(x):\n    return x\n"] * 20, vocab_size=300, show_progress=False)
    keys = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    classifier = save_tiny(tmp_path / "classifier", "gpt", "AutoModelForSequenceClassification", tokenizer, **keys)
    capsys.readouterr()  # the saving's progress bars
    assert one_line_error(capsys, "generate", str(classifier), "--prompt", "def").endswith(
        "holds a GPTForSequenceClassification (AutoModelForSequenceClassification); what can be read here: "
        "AutoModelForCausalLM, AutoModelForSeq2SeqLM"
    )
    main(["card", str(classifier)])
    assert capsys.readouterr().out == f"wrote {classifier / 'README.md'}\n"
    weights = classifier / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + bytes(8))
    assert f"{weights} does not match" in one_line_error(capsys, "card", str(classifier))
    assert one_line_error(capsys, "card", "someone/model") == (
        "hf-seq: error: someone/model does not exist (give a run folder)"  # a card is written into a local folder
    )
