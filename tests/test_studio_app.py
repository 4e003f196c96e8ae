"""`hf-seq studio`: the page serves every view on tiny models through Gradio's own client, with the numbers the view
functions give; a missing extra, a bad folder and a port in use are one line each."""

import os
import socket
import sys

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
        "cross": ("transformer", "Thu, Mar 5, 1998"), "scan": ("s4d", TEXT),
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
        ([], "give run folders (hf-seq studio RUN_DIR ...) or --demo"),
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
