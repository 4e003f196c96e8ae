"""The catalogue of bad inputs and faults outside the training loop (configs, model inputs, generate, tokenizers,
checkpoints, publishing, the CLI): each one is answered either by the right behaviour or by an error of the right
type whose message names the offending parameter or file. Training and interruption faults are in
tests/test_interruption.py."""

import json
import shutil

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

import hf_seq  # noqa: F401  (registers the families)
from hf_seq import (
    BahdanauConfig,
    BERTConfig,
    GPTConfig,
    RNNConfig,
    TransformerConfig,
)
from hf_seq.cli import main
from hf_seq.data.tokenization import check_special_tokens, train_bpe_tokenizer
from hf_seq.registry import family as get_family

V = 40  # vocabulary of the tiny models
IDS = dict(vocab_size=V, pad_token_id=0, bos_token_id=1, eos_token_id=2)
TINY = {
    "hf_seq_gpt": dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=32),
    "hf_seq_rnn": dict(hidden_size=16, num_hidden_layers=1, cell_type="gru"),
    "hf_seq_bert": dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=32),
    "hf_seq_transformer": dict(
        hidden_size=16, encoder_layers=1, decoder_layers=1, num_attention_heads=2, intermediate_size=32
    ),
    "hf_seq_bahdanau": dict(hidden_size=8, embedding_size=8, attention_size=8, deep_output_size=8, num_hidden_layers=1),
    "hf_seq_window": dict(context_size=3, embedding_size=8, hidden_size=8),
    "hf_seq_conv": dict(hidden_size=8, dilation_cycle=2, num_blocks=1, skip_channels=8),
    "hf_seq_ssm": dict(hidden_size=8, num_hidden_layers=1, ssm_type="mamba", state_size=4),
    "hf_seq_hmm": dict(num_states=8),
}


def tiny_model(model_type: str, auto: str = "AutoModel", **overrides):
    fam = get_family(model_type)
    torch.manual_seed(0)
    config = fam.config_class(**IDS, **TINY[model_type], **overrides)
    return fam.model_class(auto)(config).eval()


def seq2seq(model_type: str) -> bool:
    return model_type in ("hf_seq_transformer", "hf_seq_bahdanau")


def forward(model, input_ids, **kwargs):
    if model.config.is_encoder_decoder and "decoder_input_ids" not in kwargs:
        kwargs["decoder_input_ids"] = torch.tensor([[1]])
    with torch.no_grad():
        return model(input_ids=input_ids, **kwargs)


# ------------------------------------------------------------------------------------------------------- configs
CONFIG_FAULTS = [
    (GPTConfig, dict(tie_word_embeddings="no"), "tie_word_embeddings"),  # a non-empty string would tie
    (GPTConfig, dict(use_cache=1), "use_cache"),
    (GPTConfig, dict(hidden_size="64"), "hidden_size"),
    (GPTConfig, dict(hidden_dropout="0.1"), "hidden_dropout"),
    (GPTConfig, dict(hidden_dropout=1.0), "hidden_dropout"),
    (GPTConfig, dict(attention_dropout=-0.1), "attention_dropout"),
    (GPTConfig, dict(dropout=1.5), "dropout"),
    (GPTConfig, dict(IDS, pad_token_id=V), "pad_token_id"),
    (GPTConfig, dict(IDS, bos_token_id=-1), "bos_token_id"),
    (GPTConfig, dict(IDS, eos_token_id=[2, V + 3]), "eos_token_id"),
    (GPTConfig, dict(layer_norm_eps=-1e-5), "layer_norm_eps"),
    (GPTConfig, dict(layer_norm_epsilon=0.0), "layer_norm_eps"),
    (GPTConfig, dict(position_embedding_type="rope", rope_theta=0.0), "rope_theta"),
    (GPTConfig, dict(initializer_range=-0.02), "initializer_range"),
    (GPTConfig, dict(num_labels=0), "num_labels"),
    (GPTConfig, dict(num_labels="3"), "num_labels"),
    (GPTConfig, dict(is_causal=False), "is_causal"),
    (GPTConfig, dict(n_head=4, num_attention_heads=8), "n_head"),
    (GPTConfig, dict(num_attention_heads=5), "num_attention_heads"),
    (GPTConfig, dict(position_embedding_type="rotary"), "position_embedding_type"),
    (GPTConfig, dict(num_hiden_layers=2), "num_hidden_layers"),
    (RNNConfig, dict(cell="transformer"), "cell_type"),
    (RNNConfig, dict(bidirectional="yes"), "bidirectional"),
    (RNNConfig, dict(num_hidden_layers=0), "num_hidden_layers"),
    (RNNConfig, dict(IDS, eos_token_id=V), "eos_token_id"),
    (BERTConfig, dict(type_vocab_size=0), "type_vocab_size"),
    (BERTConfig, dict(hidden_dropout_prob=1.2), "hidden_dropout"),
    (TransformerConfig, dict(num_hidden_layers=2, decoder_layers=3), "num_hidden_layers"),
    (TransformerConfig, dict(label_smoothing=1.0), "label_smoothing"),
    (TransformerConfig, dict(IDS, decoder_start_token_id=V), "decoder_start_token_id"),
    (TransformerConfig, dict(scale_embedding="true"), "scale_embedding"),
    (BahdanauConfig, dict(attention_type="luong"), "attention_type"),
    (BahdanauConfig, dict(scheduled_sampling=1.0), "scheduled_sampling"),
    (BahdanauConfig, dict(maxout="false"), "maxout"),
]


@pytest.mark.parametrize(
    "config_class, kwargs, name", CONFIG_FAULTS, ids=[f"{c.__name__}-{n}" for c, _, n in CONFIG_FAULTS]
)
def test_config_refuses(config_class, kwargs, name):
    with pytest.raises(ValueError, match=name):
        config_class(**kwargs)


def test_common_names_set_the_fields_they_name():
    gpt = GPTConfig(n_embd=64, n_layer=3, n_head=4, n_positions=128, layer_norm_epsilon=1e-6, num_heads=4)
    assert (gpt.hidden_size, gpt.num_hidden_layers, gpt.num_attention_heads) == (64, 3, 4)
    assert (gpt.max_position_embeddings, gpt.layer_norm_eps) == (128, 1e-6)
    assert gpt.intermediate_size == 4 * 64  # derived from the aliased width, not from the default
    dropped = GPTConfig(dropout=0.3)
    assert dropped.embedding_dropout == dropped.attention_dropout == dropped.hidden_dropout == 0.3
    both = TransformerConfig(num_hidden_layers=2)
    assert (both.encoder_layers, both.decoder_layers) == (2, 2)
    both.num_hidden_layers = 3
    assert (both.encoder_layers, both.decoder_layers) == (3, 3)
    shape = dict(hidden_size=16, num_attention_heads=2, intermediate_size=32)
    transformer = get_family("hf_seq_transformer").model_class("AutoModel")(
        TransformerConfig(**IDS, **shape, num_hidden_layers=3)
    )
    assert len(transformer.encoder.layers) == len(transformer.decoder.layers) == 3
    assert BERTConfig(layer_norm_epsilon=1e-7, num_heads=4).num_attention_heads == 4
    rnn = get_family("hf_seq_rnn").model_class("AutoModel")(RNNConfig(**IDS, hidden_size=8, cell="gru"))
    assert rnn.config.cell_type == "gru"
    assert rnn.state_dict()["rnn.layers.0.rnn.weight_hh_l0"].shape == (3 * 8, 8)  # GRU: 3 gates (an LSTM has 4)
    assert BahdanauConfig(cell="lstm").cell_type == "lstm"


def test_gpt2_default_special_ids_are_unset_for_a_smaller_vocabulary():
    config = GPTConfig(vocab_size=V)  # GPT-2's 50256 names no token of this vocabulary
    assert config.bos_token_id is None and config.eos_token_id is None


# -------------------------------------------------------------------------------------------------- model inputs
FAMILIES = list(TINY)
INPUT_FAULTS = {
    "id-at-vocab-size": (lambda: torch.tensor([[3, V]]), rf"input_ids.*{V}\b.*vocab_size={V}"),
    "negative-id": (lambda: torch.tensor([[3, -1]]), rf"input_ids.*-1.*vocab_size={V}"),
    "1-d": (lambda: torch.tensor([3, 4]), r"input_ids.*\(2,\).*input_ids\[None\]"),
    "empty-sequence": (lambda: torch.zeros(1, 0, dtype=torch.long), r"input_ids.*\(1, 0\).*empty"),
    "empty-batch": (lambda: torch.zeros(0, 3, dtype=torch.long), r"input_ids.*\(0, 3\).*batch of 0"),
    "float-ids": (lambda: torch.ones(1, 3), r"input_ids.*integer.*float32"),
}


@pytest.mark.parametrize("fault", list(INPUT_FAULTS))
@pytest.mark.parametrize("model_type", FAMILIES)
def test_model_refuses_bad_input_ids(model_type, fault):
    model = tiny_model(model_type)
    make, message = INPUT_FAULTS[fault]
    with pytest.raises(ValueError, match=message):
        forward(model, make())


@pytest.mark.parametrize("model_type", ["hf_seq_transformer", "hf_seq_bahdanau"])
def test_seq2seq_names_decoder_input_ids(model_type):
    model = tiny_model(model_type)
    with pytest.raises(ValueError, match=rf"decoder_input_ids.*{V + 5}"):
        forward(model, torch.tensor([[3, 4]]), decoder_input_ids=torch.tensor([[1, V + 5]]))


def test_bert_names_token_type_ids():
    model = tiny_model("hf_seq_bert")
    with pytest.raises(ValueError, match=r"token_type_ids.*\b2\b.*vocab_size=2"):
        forward(model, torch.tensor([[3, 4]]), token_type_ids=torch.tensor([[0, 2]]))


def test_inputs_embeds_shape_is_named():
    model = tiny_model("hf_seq_gpt")
    with pytest.raises(ValueError, match=r"inputs_embeds.*\(3, 16\)"):
        model(inputs_embeds=torch.zeros(3, 16))


# ------------------------------------------------------------------------------------------------------ generate
GENERATE_FAULTS = [
    (dict(num_beams=0), "num_beams"),
    (dict(num_beams=-2), "num_beams"),
    (dict(num_beams="2"), "num_beams"),
    (dict(num_return_sequences=0), "num_return_sequences"),
    (dict(do_sample=True, top_p=0.0), "top_p"),
    (dict(do_sample=True, top_p=1.5), "top_p"),
    (dict(compile_config={"fullgraph": True}), "compile_config must be a transformers.CompileConfig, got dict"),
]


@pytest.mark.parametrize(
    "kwargs, name", GENERATE_FAULTS, ids=[f"{n}={list(k.values())[-1]}" for k, n in GENERATE_FAULTS]
)
@pytest.mark.parametrize("model_type", ["hf_seq_gpt", "hf_seq_rnn", "hf_seq_transformer"])
def test_generate_refuses(model_type, kwargs, name):
    auto = "AutoModelForSeq2SeqLM" if seq2seq(model_type) else "AutoModelForCausalLM"
    model = tiny_model(model_type, auto)
    with pytest.raises(ValueError, match=name):
        model.generate(torch.tensor([[3, 4]]), max_new_tokens=2, **kwargs)


# ---------------------------------------------------------------------------------------------------- tokenizers
CORPUS = ["def f(x):\n    return x + 1\n", "class A:\n    pass\n"] * 20


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(vocab_size=100), "vocab_size"),
        (dict(min_frequency=0), "min_frequency"),
        (dict(style="wordpiece"), "style"),
        (dict(model_max_length=0), "model_max_length"),
        (dict(special_tokens="<sep>"), "special_tokens"),
        (dict(corpus=[]), "corpus is empty"),
        (dict(corpus=[1, 2]), "must hold strings"),
        (dict(corpus="missing-corpus.txt"), "missing-corpus.txt"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_tokenizer_training_refuses(kwargs, name):
    kwargs = {"corpus": CORPUS, "vocab_size": 300, **kwargs}
    with pytest.raises(ValueError, match=name):
        train_bpe_tokenizer(kwargs.pop("corpus"), **kwargs)


def test_seq2seq_tokenizer_without_eos_is_named():
    tokenizer = train_bpe_tokenizer(CORPUS, vocab_size=300, style="bert")  # BERT style has no EOS
    with pytest.raises(ValueError, match="eos_token.*sequence-to-sequence"):
        check_special_tokens(tokenizer, ("eos_token",), purpose="sequence-to-sequence targets")


def test_model_max_length_truncates_to_the_context():
    tokenizer = train_bpe_tokenizer(CORPUS, vocab_size=300, model_max_length=5)
    assert len(tokenizer(CORPUS[0] * 10, truncation=True)["input_ids"]) == 5


# ---------------------------------------------------------------------------------------------------- data files
DOCUMENTS = "\n\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(80)) + "\n"
DATA_RECIPE = {
    "family": "gpt",
    "model": TINY["hf_seq_gpt"],
    "tokenizer": {"vocab_size": 300},
    "data": {"block_size": 16},
    "training": {"max_steps": 2, "batch_size": 2, "log_with": "none", "threads": 1},
}
EMPTY_FILES = {  # fault -> (file name, content, what the error says of the file)
    "empty-txt": ("empty.txt", "", "is empty"),
    "blank-txt": ("blank.txt", "\n  \n\t\n\n", "holds only blank lines"),
    "empty-jsonl": ("rows.jsonl", "", "is empty"),
    "blank-jsonl": ("rows.jsonl", "\n\n", "holds only blank lines"),
    "empty-json-list": ("rows.json", "[]\n", "holds an empty JSON list"),
    "header-only-csv": ("rows.csv", "text\n", "holds a header line and no rows"),
}
SPLIT_KEYS = ("data.dataset", "data.validation", "data.test")


@pytest.fixture
def data_files(tmp_path):
    """A recipe file and good train / validation / test files for it."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(DATA_RECIPE))
    files = {}
    for key in SPLIT_KEYS:
        files[key] = tmp_path / f"{key.split('.')[1]}.txt"
        files[key].write_text(DOCUMENTS)
    return recipe, files


def _empty_file(tmp_path, fault):
    name, content, reason = EMPTY_FILES[fault]
    (tmp_path / "bad").mkdir(exist_ok=True)
    path = tmp_path / "bad" / name
    path.write_text(content)
    return path, reason


def _refused_in_one_line(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([str(item) for item in argv])
    err = capsys.readouterr().err
    last = err.splitlines()[-1]  # datasets' progress bars may come before it
    assert exit_info.value.code == 2 and last.startswith("hf-seq: error: ") and "Traceback" not in err, err
    return last


@pytest.mark.parametrize("key", SPLIT_KEYS)
@pytest.mark.parametrize("fault", list(EMPTY_FILES))
def test_train_names_a_data_file_without_rows(data_files, tmp_path, capsys, fault, key):
    recipe, files = data_files
    files[key], reason = _empty_file(tmp_path, fault)
    overrides = [f"{k}={v}" for k, v in files.items()]
    err = _refused_in_one_line(["train", recipe, *overrides, f"training.output_dir={tmp_path / 'run'}"], capsys)
    assert f"{key}: '{files[key]}' {reason}: give a file that holds" in err


def test_an_empty_file_among_files_with_rows_is_read_as_no_rows(tmp_path):
    from hf_seq.data.corpora import load_files

    (tmp_path / "__init__.py").write_text("")  # a corpus of code files often holds some
    (tmp_path / "code.py").write_text(DOCUMENTS)
    assert len(load_files([tmp_path / "__init__.py", tmp_path / "code.py"])) == 80
    (tmp_path / "blank.py").write_text("\n\n")
    with pytest.raises(ValueError, match=r"none of its 2 files holds a row \('.*__init__.py', '.*blank.py'\)"):
        load_files([tmp_path / "__init__.py", tmp_path / "blank.py"])
    (tmp_path / "rows.csv").write_text("text\nx\n")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match=r"'.*empty.csv' is empty"):  # datasets cannot read it even among others
        load_files([tmp_path / "rows.csv", tmp_path / "empty.csv"])


@pytest.mark.parametrize("fault", ["empty-txt", "blank-jsonl"])
@pytest.mark.parametrize("command", ["evaluate", "lineage", "streaming", "streaming-validation"])
def test_every_command_names_a_data_file_without_rows(run_folder, data_files, tmp_path, capsys, command, fault):
    recipe, files = data_files
    bad, reason = _empty_file(tmp_path, fault)
    train, validation = files["data.dataset"], files["data.validation"]
    run = f"training.output_dir={tmp_path / 'run'}"
    argv = {
        "evaluate": ["evaluate", run_folder[0], f"data.dataset={train}", f"data.validation={bad}"],
        "lineage": ["lineage", "--quick", "--corpus", train, "--validation", bad, "--output-dir", tmp_path / "out"],
        "streaming": ["train", recipe, f"data.dataset={bad}", f"data.validation={validation}", run],
        "streaming-validation": ["train", recipe, f"data.dataset={train}", f"data.validation={bad}", run],
    }[command]
    if command.startswith("streaming"):
        argv.append("data.streaming=true")
    err = _refused_in_one_line(argv, capsys)
    assert f"'{bad}' {reason}" in err


# --------------------------------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def saved_gpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved") / "gpt"
    tiny_model("hf_seq_gpt", "AutoModelForCausalLM").save_pretrained(folder)
    return folder


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    config = {key: value for key, value in config.items() if value is not None}
    (folder / "config.json").write_text(json.dumps(config))


def _poison(folder, value):
    weights = load_file(folder / "model.safetensors")
    weights["model.layers.1.mlp.up_proj.weight"][0, 0] = value
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def _truncate(folder):
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _pickle_only(folder):
    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(weights, folder / "pytorch_model.bin")


CHECKPOINT_FAULTS = {
    "truncated-safetensors": (_truncate, OSError, "model.safetensors.*truncated"),
    "empty-safetensors": (lambda f: (f / "model.safetensors").write_bytes(b""), OSError, "model.safetensors"),
    "pickled-bin-only": (_pickle_only, OSError, "pytorch_model.bin"),
    "other-family-model-type": (
        lambda f: _edit_config(f, model_type="hf_seq_rnn", auto_map=None),
        ValueError,
        r"backbone did not load.*model\.rnn\..*hf_seq_rnn",
    ),
    "added-layer": (lambda f: _edit_config(f, num_hidden_layers=3), ValueError, r"missing.*model\.layers\.2\."),
    "changed-width": (
        lambda f: _edit_config(f, intermediate_size=48),
        ValueError,
        r"model\.layers\.0\.mlp\.up_proj\.weight \(64, 16\) in the checkpoint, \(48, 16\)",
    ),
    "nan-weight": (lambda f: _poison(f, float("nan")), ValueError, r"NaN.*model\.layers\.1\.mlp\.up_proj\.weight"),
    "inf-weight": (lambda f: _poison(f, float("inf")), ValueError, r"infinite.*model\.layers\.1\.mlp\.up_proj\.weight"),
    "config-not-json": (lambda f: (f / "config.json").write_text("{not json"), OSError, "config.json"),
}


@pytest.mark.parametrize("fault", list(CHECKPOINT_FAULTS))
def test_loading_refuses(saved_gpt, tmp_path, fault):
    folder = tmp_path / "copy"
    shutil.copytree(saved_gpt, folder)
    damage, error, message = CHECKPOINT_FAULTS[fault]
    damage(folder)
    with pytest.raises(error, match=message):
        AutoModelForCausalLM.from_pretrained(folder)


def test_loading_warns_of_values_no_trained_weight_reaches(saved_gpt, tmp_path):
    """Most bytes flipped in a weight file leave the values finite but huge (a flipped exponent bit makes 0.02 about
    7e36), and the logits NaN: from_pretrained warns naming the tensor; hf-seq commands refuse the folder."""
    folder = tmp_path / "copy"
    shutil.copytree(saved_gpt, folder)
    _poison(folder, 3e37)
    with pytest.warns(UserWarning, match=r"beyond 1e\+10.*model\.layers\.1\.mlp\.up_proj\.weight \(3e\+37\)"):
        model = AutoModelForCausalLM.from_pretrained(folder)
    assert not torch.isfinite(forward(model, torch.tensor([[3, 4, 5]])).logits).all()  # what the warning is for


def _error_type(action):
    try:
        action()
    except Exception as error:  # noqa: BLE001
        return type(error)
    raise AssertionError("no error")


def test_a_label_count_mismatch_raises_what_transformers_raises(tmp_path):
    """Fine-tuning scripts catch transformers' error for a head of another size and retry with
    ignore_mismatched_sizes=True: hf-seq's error (which names the tensors) must be caught by the same clause."""
    bert = transformers.BertConfig(
        vocab_size=V, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8, num_labels=3
    )
    transformers.BertForSequenceClassification(bert).save_pretrained(tmp_path / "bert")
    theirs = _error_type(
        lambda: transformers.BertForSequenceClassification.from_pretrained(tmp_path / "bert", num_labels=42)
    )
    cls = get_family("hf_seq_gpt").model_class("AutoModelForSequenceClassification")
    cls(GPTConfig(**IDS, **TINY["hf_seq_gpt"], num_labels=3)).save_pretrained(tmp_path / "gpt")
    with pytest.raises(theirs, match=r"score\.weight \(3, 16\) in the checkpoint, \(42, 16\).*ignore_mismatched_sizes"):
        cls.from_pretrained(tmp_path / "gpt", num_labels=42)
    try:
        cls.from_pretrained(tmp_path / "gpt", num_labels=42)
    except theirs:  # the retry such a script makes
        model = cls.from_pretrained(tmp_path / "gpt", num_labels=42, ignore_mismatched_sizes=True)
    assert model.score.weight.shape == (42, 16)


REPLACED_ERRORS = {  # fault -> (what torch or transformers raise without hf-seq's check, hf-seq's message)
    "id-at-vocab-size": (IndexError, r"outside the vocabulary"),
    "negative-id": (IndexError, r"outside the vocabulary"),
    "float-ids": (RuntimeError, r"integer token ids"),
}


@pytest.mark.parametrize("fault", list(REPLACED_ERRORS))
def test_input_errors_are_also_the_errors_they_replace(fault):
    raw = torch.nn.Embedding(V, 4)
    make, _ = INPUT_FAULTS[fault]
    theirs, message = REPLACED_ERRORS[fault]
    with pytest.raises(theirs):
        raw(make())  # the lookup hf-seq checks before
    for model_type in FAMILIES:
        with pytest.raises(theirs, match=message):
            forward(tiny_model(model_type), make())


@pytest.mark.parametrize("model_type", ["hf_seq_gpt", "hf_seq_bert", "hf_seq_transformer"])
def test_positions_past_the_limit_are_also_an_index_error(model_type):
    model = tiny_model(model_type)
    limit = model.config.max_position_embeddings
    with pytest.raises(IndexError, match="max_position_embeddings"):
        forward(model, torch.full((1, limit + 1), 3))


def test_a_truncated_file_is_also_a_safetensors_error(saved_gpt, tmp_path):
    from safetensors import SafetensorError

    folder = tmp_path / "copy"
    shutil.copytree(saved_gpt, folder)
    _truncate(folder)
    with pytest.raises(SafetensorError, match="model.safetensors.*truncated"):
        AutoModelForCausalLM.from_pretrained(folder)


def test_a_fresh_task_head_on_a_pretrained_backbone_loads(saved_gpt, tmp_path):
    classifier, info = (
        get_family("hf_seq_gpt")
        .model_class("AutoModelForSequenceClassification")
        .from_pretrained(saved_gpt, num_labels=3, output_loading_info=True)
    )
    assert info["missing_keys"] == {"score.weight"}  # only the head is new
    bert_folder = tmp_path / "bert"
    tiny_model("hf_seq_bert", "AutoModelForMaskedLM").save_pretrained(bert_folder)
    get_family("hf_seq_bert").model_class("AutoModelForSequenceClassification").from_pretrained(bert_folder)
    # the pooler masked-LM pretraining never trains starts fresh too


# ----------------------------------------------------------------------------------- publishing and the CLI
@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A run's output folder whose recipe recorded local paths of the training machine."""
    from hf_seq.hub.cards import write_card

    root = tmp_path_factory.mktemp("runs")
    folder = root / "gpt-tiny"
    tokenizer = train_bpe_tokenizer(CORPUS, vocab_size=300)
    config = dict(TINY["hf_seq_gpt"], vocab_size=len(tokenizer), pad_token_id=0, bos_token_id=1, eos_token_id=2)
    get_family("hf_seq_gpt").model_class("AutoModelForCausalLM")(GPTConfig(**config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    recipe = {
        "family": "gpt",
        "task": "causal_lm",
        "model": TINY["hf_seq_gpt"],
        "tokenizer": {"path": str(root / "tokenizers" / "my-bpe")},
        "data": {"dataset": [str(root / "private" / "corpus.txt"), "someone/hub-corpus"]},
        "training": {"output_dir": str(folder)},
    }
    (folder / "recipe.json").write_text(json.dumps(recipe))
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "scheduler.bin").write_bytes(b"local run state")
    write_card(folder)
    return folder, root


def test_card_and_push_publish_names_not_paths(run_folder):
    from hf_seq.hub.publish import push, upload_contents

    folder, root = run_folder
    card = (folder / "README.md").read_text()
    assert str(root) not in card
    assert "corpus.txt" in card and "my-bpe" in card
    metadata = card.split("---")[1]
    assert "someone/hub-corpus" in metadata and "corpus.txt" not in metadata  # only Hub datasets are metadata
    contents = upload_contents(folder)
    assert not any(name.startswith("checkpoints") for name in contents)
    published = json.loads(contents["recipe.json"])
    assert published["training"]["output_dir"] == "gpt-tiny"
    assert published["tokenizer"]["path"] == "my-bpe"
    assert published["data"]["dataset"] == ["corpus.txt", "someone/hub-corpus"]
    for name, content in contents.items():
        text = content if isinstance(content, bytes) else content.read_bytes()
        assert str(root).encode() not in text, name
    listing = push(folder, "someone/gpt-tiny", dry_run=True)
    assert "nothing uploaded" in listing
    assert sorted(line.split()[0] for line in listing.splitlines() if line.startswith("  ")) == sorted(contents)
    assert json.loads((folder / "recipe.json").read_text())["training"]["output_dir"] == str(folder)  # local copy


def test_push_refuses(run_folder, tmp_path):
    from hf_seq.hub.publish import push

    with pytest.raises(ValueError, match="repo_id.*'not a repo id'"):
        push(run_folder[0], "not a repo id", dry_run=True)
    with pytest.raises(FileNotFoundError, match="no-such-run"):
        push(tmp_path / "no-such-run", "someone/x", dry_run=True)


CLI_FAULTS = [
    (["generate", "{folder}", "--prompt", "def", "--num-beams", "0"], "--num-beams"),
    (["generate", "{folder}", "--prompt", "def", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["generate", "{folder}", "--prompt", "def", "--do-sample", "--temperature", "0"], "--temperature"),
    (["generate", "{folder}", "--prompt", "def", "--do-sample", "--top-p", "1.5"], "--top-p"),
    (["generate", "{folder}", "--prompt", "def", "--top-k", "-1"], "--top-k"),
    (["train-tokenizer", "--files", "x.txt", "--vocab-size", "many", "--output-dir", "tok"], "--vocab-size"),
    (["train-tokenizer", "--files", "x.txt", "--min-frequency", "0", "--output-dir", "tok"], "--min-frequency"),
]


@pytest.mark.parametrize("argv, option", CLI_FAULTS, ids=[option for _, option in CLI_FAULTS])
def test_cli_refuses_option(run_folder, argv, option, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([item.format(folder=run_folder[0]) for item in argv])
    assert exit_info.value.code == 2
    assert f"argument {option}" in capsys.readouterr().err


def test_cli_names_the_folder_or_file(run_folder, tmp_path, capsys):
    empty = tmp_path / "not-a-model"
    empty.mkdir()

    def refused(argv: list[str]) -> str:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        return capsys.readouterr().err

    assert "not-a-model holds no config.json" in refused(["generate", str(empty), "--prompt", "def"])
    assert "missing-run does not exist" in refused(["generate", str(tmp_path / "missing-run"), "--prompt", "def"])
    prompts = ["generate", str(run_folder[0]), "--file", str(tmp_path / "prompts.txt")]
    assert "prompts.txt does not exist" in refused(prompts)
    (tmp_path / "prompts.txt").write_text("")
    assert "prompts.txt holds no prompts" in refused(prompts)
    assert "not-a-model holds no config.json" in refused(["card", str(empty)])


@pytest.mark.parametrize(
    "model_type", ["hf_seq_gpt", "hf_seq_rnn", "hf_seq_window", "hf_seq_transformer", "hf_seq_bahdanau"]
)
def test_a_call_continues_from_a_cache_passed_under_its_transformers_5_24_name(model_type):
    """transformers 5.24 renamed `past_key_values` to `cache`: a call given `cache=` continues from it (it would
    otherwise pass unread through **kwargs, and the step would start afresh)."""
    from hf_seq.models.utils import cache_of

    auto = "AutoModelForSeq2SeqLM" if seq2seq(model_type) else "AutoModelForCausalLM"
    model = tiny_model(model_type, auto)
    ids = torch.tensor([[3, 4, 5, 6]])
    source = dict(input_ids=ids) if seq2seq(model_type) else {}
    target = "decoder_input_ids" if seq2seq(model_type) else "input_ids"
    with torch.no_grad():
        states = [cache_of(model(**source, **{target: ids[:, :3]}, use_cache=True)) for _ in range(2)]
        step = {**source, target: ids[:, 3:]}
        as_cache = model(**step, cache=states[0], use_cache=True).logits
        as_past = model(**step, past_key_values=states[1], use_cache=True).logits
        afresh = model(**step, use_cache=True).logits
    torch.testing.assert_close(as_cache, as_past, rtol=0, atol=0)
    assert not torch.allclose(as_cache, afresh)
