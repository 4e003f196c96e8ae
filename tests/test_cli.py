import json

import pytest

from hf_seq.cli import main


def test_demo_trains_saves_reloads_and_generates(tmp_path, capsys):
    out = tmp_path / "demo"
    overrides = [
        "training.max_steps=4",
        "training.eval_every=2",
        "data.max_chars=300000",
        "tokenizer.vocab_size=400",
        "model.hidden_size=32",
        "model.num_hidden_layers=1",
        "data.block_size=32",
        "model.max_position_embeddings=64",
    ]
    assert main(["demo", "--output-dir", str(out), "--new-tokens", "4", *overrides]) == 0
    printed = capsys.readouterr().out
    assert "held-out perplexity" in printed and printed.count("-" * 60) == 5
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "hf_seq_gpt" and "AutoModelForCausalLM" in config["auto_map"]
    for name in ("model.safetensors", "tokenizer.json", "modeling_gpt.py", "README.md", "loss_curve.png"):
        assert (out / name).exists(), name
    metrics = json.loads((out / "metrics.json").read_text())
    card = (out / "README.md").read_text()
    assert f"{metrics['perplexity']:.4g}" in card  # the card states the measured number


def test_unknown_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--no-such-flag"])
    assert "unrecognized arguments" in capsys.readouterr().err
