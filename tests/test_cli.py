import json

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

    from hf_seq.hub import check_folder, push

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
