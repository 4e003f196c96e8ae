"""`hf-seq studio`: the page serves every view on tiny models through Gradio's own client, with the numbers the view
functions give; which models a view offers comes from the registry (Mamba and S4D told apart by their config); a
lineage folder opens with every member; a missing extra, a bad folder and a port in use are one line each."""

import os
import socket
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hf_seq.cli import main
from hf_seq.data.tokenization import train_bpe_tokenizer
from hf_seq.registry import family
from hf_seq.studio import Loaded, inside, to_csv, tokens

TEXT = "def read(path):\n    return open(path).read()\n"


def tiny(tokenizer, fam_name: str, auto: str, **keys):
    fam = family(fam_name)
    torch.manual_seed(0)
    specials = {f"{k}_token_id": getattr(tokenizer, f"{k}_token_id") for k in ("pad", "bos", "eos")}
    if auto == "AutoModelForSeq2SeqLM":
        specials["decoder_start_token_id"] = tokenizer.bos_token_id
    config = fam.config_class(vocab_size=len(tokenizer), **specials, **keys)
    return fam.model_class(auto)(config).eval()


@pytest.fixture(scope="module")
def models():
    from hf_seq.baselines.ngram import KneserNeyLM

    texts = [TEXT * 3, "def write(path, text):\n    open(path, 'w').write(text)\n" * 3, "Thu, Mar 5, 1998 1998-03-05"]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=300, style="byte_level", show_progress=False)
    ids = [i for text in texts for i in tokenizer(text)["input_ids"]]
    bert = train_bpe_tokenizer(texts, vocab_size=300, style="bert", show_progress=False)
    small = dict(hidden_size=16, num_hidden_layers=1)
    return [
        Loaded("5-gram", None, tokenizer, "ngram", ngram=KneserNeyLM(len(tokenizer), order=3).fit(ids)),
        Loaded("lstm", tiny(tokenizer, "rnn", "AutoModelForCausalLM", cell_type="lstm", **small), tokenizer, "rnn"),
        Loaded("gpt", tiny(tokenizer, "gpt", "AutoModelForCausalLM", num_attention_heads=2, **small), tokenizer, "gpt"),
        Loaded("mamba", tiny(tokenizer, "ssm", "AutoModelForCausalLM", ssm_type="mamba", state_size=4, **small),
               tokenizer, "ssm"),
        Loaded("conv", tiny(tokenizer, "conv", "AutoModelForCausalLM", hidden_size=16, dilation_cycle=2, num_blocks=1,
                            skip_channels=8), tokenizer, "conv"),
        Loaded("bahdanau", tiny(tokenizer, "bahdanau", "AutoModelForSeq2SeqLM", hidden_size=16, embedding_size=16,
                                num_hidden_layers=1), tokenizer, "bahdanau"),
        Loaded("transformer", tiny(tokenizer, "transformer", "AutoModelForSeq2SeqLM", hidden_size=16, encoder_layers=1,
                                   decoder_layers=1, num_attention_heads=2, intermediate_size=32), tokenizer,
               "transformer"),
        Loaded("s4d", tiny(tokenizer, "ssm", "AutoModelForCausalLM", ssm_type="s4d", state_size=4, **small), tokenizer,
               "ssm"),
        Loaded("bert", tiny(bert, "bert", "AutoModelForMaskedLM", num_attention_heads=2, intermediate_size=32, **small),
               bert, "bert"),
        Loaded("mamba2", tiny(tokenizer, "ssm", "AutoModelForCausalLM", ssm_type="mamba2", head_dim=8, state_size=4,
                              chunk_size=4, **small), tokenizer, "ssm"),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def served(models):
    pytest.importorskip("gradio")
    os.environ.update({"GRADIO_ANALYTICS_ENABLED": "False", "NO_PROXY": "localhost,127.0.0.1"})
    from gradio_client import Client

    from hf_seq.studio.app import build

    app = build(models)
    _, url, _ = app.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, ssr_mode=False)
    yield url, Client(url, analytics_enabled=False, download_files=False, verbose=False)
    app.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def downloaded(value) -> str:
    """A DownloadButton's file, as the client returns it (a path, or a dict holding one)."""
    path = value.get("path") if isinstance(value, dict) else value
    return open(path, newline="").read()


def test_every_view_answers_through_the_page(models, served):
    _, client = served
    calls = {
        "surprisal": ("lstm", TEXT), "compare": ("5-gram", TEXT, "gpt"), "lineage": (TEXT,),
        "recurrent": ("lstm", TEXT), "attention": ("gpt", TEXT), "alignment": ("bahdanau", "Thu, Mar 5, 1998", 6, 1),
        "ssm": ("mamba", TEXT), "reach": ("conv", TEXT, 5), "ngram": ("5-gram", TEXT),
        "sampling": ("gpt", TEXT, 1.0, 0, 1.0, 0), "fill": ("bert", "def [MASK](path):"),
        "cross": ("transformer", "Thu, Mar 5, 1998"), "scan": ("s4d", TEXT), "mamba2": ("mamba2", TEXT, -1, "gpt"),
    }  # fmt: skip
    for name, args in calls.items():
        out = client.predict(*args, api_name=f"/{name}")
        plot = out[-3]
        assert plot["type"] == "matplotlib" and plot["plot"].startswith("data:image/"), name


def test_the_page_shows_the_views_numbers(models, served):
    """The token strip holds the text's tokens, scaled bits of the view; the CSV download is the view's own."""
    _, client = served
    marks, _, _, csv = client.predict("lstm", TEXT, api_name="/surprisal")
    lstm = next(m for m in models if m.name == "lstm")
    expected = tokens.surprisal(lstm, TEXT)
    assert [m["token"] for m in marks] == expected["tokens"]
    assert marks[0]["class_or_confidence"] is None  # the first token has no prediction
    assert downloaded(csv) == to_csv(expected)
    *_, csv = client.predict("mamba", TEXT, api_name="/ssm")
    assert downloaded(csv) == to_csv(inside.ssm_inside(next(m for m in models if m.name == "mamba"), TEXT))


def test_the_mamba2_tab_draws_its_layer_beside_a_gpt_and_offers_only_mamba2(models, served):
    """The tab's click renders a PNG of the view's figure and downloads the view's own CSV; its menus come from the
    registry: the Mamba-2 models, and the GPTs (or none) to set beside it."""
    from hf_seq.studio.app import NOTHING_BESIDE, _names

    _, client = served
    assert _names(models, "mamba2_attention") == ["mamba2"] and "mamba2" not in _names(models, "ssm")
    by_name, heights = {m.name: m for m in models}, []
    for beside in ("gpt", NOTHING_BESIDE):
        plot, png, csv = client.predict("mamba2", TEXT, 0, beside, api_name="/mamba2")
        assert plot["type"] == "matplotlib"
        with open(png.get("path") if isinstance(png, dict) else png, "rb") as image:
            header = image.read(24)
        assert header[:8] == b"\x89PNG\r\n\x1a\n"
        heights.append(int.from_bytes(header[20:24], "big"))  # the IHDR chunk: width, then height
        expected = inside.mamba2_attention(by_name["mamba2"], TEXT, 0, by_name["gpt"] if beside == "gpt" else None)
        assert downloaded(csv) == to_csv(expected)
    assert heights[0] > 1.5 * heights[1]  # the GPT's heads drawn under Mamba-2's


def test_a_view_error_is_a_message_not_a_crash(served):
    _, client = served
    with pytest.raises(Exception, match="type some text first"):
        client.predict("lstm", "   ", api_name="/surprisal")


def studio_error(capsys, *args) -> str:
    """`hf-seq studio ARGS` in this process: it must exit 2 with one `hf-seq: error:` line (any other exception, a
    bug, fails the test), which is returned."""
    with pytest.raises(SystemExit) as exit:
        main(["studio", *args])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.startswith("hf-seq: error: ") and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_a_bad_folder_and_no_model_are_one_line_before_gradio_is_imported(tmp_path, capsys, monkeypatch):
    """Gradio made unimportable: were it imported first, the error would name the missing extra instead."""
    monkeypatch.setitem(sys.modules, "gradio", None)
    (tmp_path / "empty").mkdir()
    for args, message in (
        ([str(tmp_path / "empty")], "holds no config.json: give the output_dir of a run"),
        ([str(tmp_path / "missing")], "does not exist (give a run folder or a Hub name user/model)"),
        ([], "give run folders or lineage folders (hf-seq studio RUN_DIR ...) or --demo"),
    ):
        assert message in studio_error(capsys, *args)


def test_a_missing_extra_is_one_line(capsys, monkeypatch):
    """Without Gradio installed (an import that fails), the command names the extra to install, before training
    the demo's models."""
    monkeypatch.setitem(sys.modules, "gradio", None)
    assert studio_error(capsys, "--demo") == (
        'hf-seq: error: hf-seq studio needs Gradio, an optional extra: pip install "hf-seq[studio]"'
    )


def test_a_port_in_use_is_one_line(tmp_path):
    pytest.importorskip("gradio")
    from hf_seq.studio.app import serve

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match=f"studio: cannot serve on 127.0.0.1:{port}"):
            serve([], False, "127.0.0.1", port, None, models=[Loaded("x", None, None, "ngram")])


# ---------------------------------------------------------------------------------------------- kinds from the registry
def test_a_family_row_is_all_the_studio_needs(models, monkeypatch):
    """The studio keeps no family list: a row added to the registry shows up in the views' model menus."""
    from hf_seq import registry
    from hf_seq.studio.app import _names
    from hf_seq.studio.views import LANGUAGE_MODEL

    toy = registry.Family("toy", "hf_seq_toy", "ToyConfig", {"AutoModelForCausalLM": "ToyForCausalLM"},
                          studio_views={"toy": ("attention",)})  # fmt: skip
    shown = [*models, Loaded("toy-model", None, None, "toy")]
    assert "toy-model" not in _names(shown, "attention") + _names(shown, LANGUAGE_MODEL)
    monkeypatch.setattr(registry, "FAMILIES", (*registry.FAMILIES, toy))
    assert _names(shown, "attention") == ["gpt", "transformer", "bert", "toy-model"]
    assert _names(shown, LANGUAGE_MODEL)[-1] == "toy-model" and "toy" in Loaded.view_kinds(LANGUAGE_MODEL)
    pytest.importorskip("gradio")
    from hf_seq.studio.app import build

    choices = {value for block in build(shown).blocks.values() if hasattr(block, "choices")
               for _, value in block.choices}  # fmt: skip
    assert "toy-model" in choices


def test_mamba_and_s4d_are_told_apart_by_their_config(models):
    from hf_seq.studio.app import _names

    mamba, s4d = (next(m for m in models if m.name == name) for name in ("mamba", "s4d"))
    assert (mamba.kind, s4d.kind) == (mamba.model.config.ssm_type, s4d.model.config.ssm_type) == ("mamba", "s4d")
    assert _names(models, "scan") == ["s4d"] and _names(models, "ssm") == ["mamba", "s4d"]
    assert next(m for m in models if m.name == "mamba2").kind == "mamba2"
    with pytest.raises(ValueError, match="scan_vs_convolution: mamba is a 'mamba' model; this view reads s4d"):
        inside.scan_vs_convolution(mamba, TEXT)
    with pytest.raises(ValueError, match="Loaded 'x': kind='s4d', but its model is of kind 'mamba'"):
        Loaded("x", mamba.model, mamba.tokenizer, "s4d")


# ---------------------------------------------------------------------------------------------- a lineage folder
def save_member(folder, loaded: Loaded):
    """A member's folder as a run leaves it: the model, its tokenizer and checksums.json."""
    from hf_seq.hub.checksums import record_checksums

    (loaded.ngram if loaded.ngram is not None else loaded.model).save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    record_checksums(folder)


def write_lineage(folder, members: list[tuple[str, str | None]], sizes: list, seeds: int = 1):
    """lineage.json as the lineage writes it (the fields the studio reads): a `Record` per member, size and seed."""
    import json

    from hf_seq.experiments.study import Record

    records = [Record(name, name, fam).to_dict({}) | {"target": size, "seed": seed} for size in sizes
               for name, fam in members for seed in (range(seeds) if fam else [0])]  # fmt: skip
    (folder / "lineage.json").write_text(json.dumps({"task": "language_model", "sizes": sizes, "seeds": seeds,
                                                     "members": records}))  # fmt: skip


def test_a_lineage_folder_opens_with_every_member(models, tmp_path, monkeypatch):
    """`hf-seq studio LINEAGE_DIR`: each member's folder opened as a run folder, the n-gram's counts too."""
    pytest.importorskip("gradio")
    from hf_seq.studio import app

    lineage = tmp_path / "lineage"
    by_name = {m.name: m for m in models}
    for name, member in (("ngram", "5-gram"), ("lstm", "lstm"), ("gpt", "gpt")):
        save_member(lineage / name, by_name[member])
    write_lineage(lineage, [("ngram", None), ("lstm", "rnn"), ("gpt", "gpt")], sizes=[4000])
    shown = []

    def build(loaded: list[Loaded]):  # the page, without a server: what it was given is what it would show
        shown.extend(loaded)
        return SimpleNamespace(launch=lambda **options: None)

    monkeypatch.setattr(app, "build", build)
    main(["studio", str(lineage)])
    assert [(m.name, m.kind) for m in shown] == [("ngram", "ngram"), ("lstm", "rnn"), ("gpt", "gpt")]
    ngram, _, gpt = shown
    ids = gpt.tokenizer(TEXT)["input_ids"]
    assert torch.equal(gpt.model(torch.tensor([ids])).logits, by_name["gpt"].model(torch.tensor([ids])).logits)
    assert np.array_equal(ngram.ngram.token_nll(ids), by_name["5-gram"].ngram.token_nll(ids))  # the saved counts


def test_a_lineage_of_several_sizes_names_each_members_folders(tmp_path, capsys):
    """Several sizes or seeds: a trained member's folders are <name>-<size>-seed<seed>; the n-gram's is its name, once;
    a folder the record lists but the lineage does not hold is one line."""
    from hf_seq.studio.app import run_folders

    lineage = tmp_path / "lineage"
    lineage.mkdir()
    write_lineage(lineage, [("ngram", None), ("gru", "rnn")], sizes=[1000, 2000], seeds=2)
    expected = ["ngram", "gru-1000-seed0", "gru-1000-seed1", "gru-2000-seed0", "gru-2000-seed1"]
    for name in expected:
        (lineage / name).mkdir()
    assert run_folders(str(lineage)) == [lineage / name for name in expected]
    (lineage / "gru-2000-seed1").rmdir()
    assert f"lists the member 'gru-2000-seed1', but {lineage / 'gru-2000-seed1'} does not exist" in studio_error(
        capsys, str(lineage)
    )
    (lineage / "lineage.json").write_text("{}")
    assert "lineage.json is not a lineage record" in studio_error(capsys, str(lineage))
