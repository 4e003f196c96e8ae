import json

from hf_seq.cli import main


def test_demo_trains_saves_reloads_and_generates(tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["demo", "--output-dir", str(out), "--steps", "4", "--corpus-chars", "300000", "--vocab-size", "400"]
    argv += ["--hidden-size", "32", "--layers", "1", "--heads", "2", "--block-size", "32", "--new-tokens", "4"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "held-out perplexity" in printed and printed.count("-" * 60) == 5
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "hf_seq_gpt" and "AutoModelForCausalLM" in config["auto_map"]
    for name in ("model.safetensors", "tokenizer.json", "modeling_gpt.py", "configuration_gpt.py"):
        assert (out / name).exists(), name
