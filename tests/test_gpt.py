import pytest
import torch
from transformers import LogitsProcessor

from hf_seq import GPTConfig, GPTForCausalLM
from hf_seq.models.decoding import transposed_linear_weights
from tests.tester import ModelTesterMixin


class TestGPT(ModelTesterMixin):
    family = "hf_seq_gpt"
    config_kwargs = dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=32
    )
    no_dropout = dict(embedding_dropout=0.0, attention_dropout=0.0, hidden_dropout=0.0)
    supports_static_cache = True


class TestGPTRoPE(TestGPT):
    config_overrides = dict(position_embedding_type="rope", norm_type="rmsnorm", hidden_act="swiglu")
    has_position_limit = False
    expensive_checks = False


class TestGPTALiBi(TestGPT):
    config_overrides = dict(position_embedding_type="alibi")
    has_position_limit = False
    expensive_checks = False


class TestGPTPostLNSinusoidal(TestGPT):
    """The 2017 original: post-LN, sinusoidal positions, ReLU, untied output projection."""

    config_overrides = dict(
        position_embedding_type="sinusoidal", norm_position="post", hidden_act="relu", tie_word_embeddings=False
    )
    expensive_checks = False


class TestGPTEager(TestGPT):
    config_overrides = dict(attn_implementation="eager", position_embedding_type="alibi")
    has_position_limit = False
    expensive_checks = False


class TestGPTMoE(TestGPT):
    """Every feed-forward block a mixture of 4 experts, 2 per token (tests/test_moe.py checks the routing itself)."""

    config_overrides = dict(num_local_experts=4, num_experts_per_tok=2)
    # The load-balancing loss is a product of two batch means: no sum over micro-batches equals it, so the exact
    # gradient-accumulation check runs without it (test_moe.py checks how it enters an accumulated step).
    no_dropout = dict(TestGPT.no_dropout, router_aux_loss_coef=0.0)


class TestGPTMoESwiGLU(TestGPT):
    config_overrides = dict(
        num_local_experts=3, num_experts_per_tok=1, hidden_act="swiglu", position_embedding_type="rope"
    )
    has_position_limit = False
    expensive_checks = False


TINY = TestGPT.config_kwargs


@pytest.mark.parametrize(
    "option, value",
    [
        ("position_embedding_type", "absolute"),
        ("norm_type", "batchnorm"),
        ("norm_position", "middle"),
        ("hidden_act", "tanh"),
    ],
)
def test_config_rejects_unknown_values_listing_the_allowed_ones(option, value):
    with pytest.raises(ValueError, match=rf"{option}='{value}' is not supported; allowed values: \["):
        GPTConfig(**TINY, **{option: value})


def test_config_rejects_inconsistent_shapes():
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(**dict(TINY, num_attention_heads=5))
    with pytest.raises(ValueError, match="positive integer"):
        GPTConfig(**dict(TINY, num_hidden_layers=0))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        GPTConfig(**TINY, hidden_dropout=1.5)


def test_attention_kernels_agree():
    ids = torch.randint(3, 99, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    for kind in ("learned", "rope", "alibi"):
        torch.manual_seed(0)
        model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY, position_embedding_type=kind)).eval()
        outputs = {}
        for impl in ("eager", "sdpa"):
            model.set_attn_implementation(impl)
            with torch.no_grad():
                outputs[impl] = model(ids, attention_mask=mask).logits
        real = mask.bool()  # what a pad position outputs is not defined
        torch.testing.assert_close(outputs["eager"][real], outputs["sdpa"][real], rtol=1e-4, atol=1e-5, msg=kind)


def test_logits_to_keep_and_hidden_states():
    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY)).eval()
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        full = model(ids, output_hidden_states=True, output_attentions=False)
        last = model(ids, logits_to_keep=2).logits
    assert last.shape == (2, 2, 99)
    torch.testing.assert_close(last, full.logits[:, -2:])
    assert len(full.hidden_states) == TINY["num_hidden_layers"] + 1
    assert model(ids, return_dict=False)[0].shape == (2, 6, 99)


def test_outputs_are_one_class_with_or_without_experts():
    """Each GPT class returns the same output class whatever its config, as transformers' classes do: the base model
    and the LM the mixture-of-experts ones (`router_logits` None in a dense GPT, where transformers' dense outputs
    have no such field), the classifier and the forecaster theirs."""
    from hf_seq import GPTForPrediction, GPTForSequenceClassification, GPTModel

    ids = torch.randint(3, 99, (2, 6))
    classes = {}
    for experts in (0, 4):
        torch.manual_seed(0)
        config = GPTConfig(vocab_size=99, **TINY, num_local_experts=experts, prediction_length=3, pad_token_id=0)
        for cls in (GPTModel, GPTForCausalLM, GPTForSequenceClassification):
            with torch.no_grad():
                out = cls(config).eval()(ids, output_hidden_states=True)
            classes.setdefault(cls, set()).add(type(out))
            if cls is not GPTForSequenceClassification:
                assert out.router_logits is None, (cls.__name__, experts)  # not asked for
        with torch.no_grad():
            forecast = GPTForPrediction(config).eval()(past_values=torch.randn(2, 40), future_values=torch.randn(2, 3))
        classes.setdefault(GPTForPrediction, set()).add(type(forecast))
    assert {cls: [c.__name__ for c in found] for cls, found in classes.items()} == {
        GPTModel: ["MoeModelOutputWithPast"],
        GPTForCausalLM: ["MoeCausalLMOutputWithPast"],
        GPTForSequenceClassification: ["SequenceClassifierOutputWithPast"],
        GPTForPrediction: ["SeriesPredictionOutput"],
    }


def test_shift_labels_are_honoured():
    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY)).eval()
    ids = torch.randint(3, 99, (2, 6))
    shifted = torch.cat([ids[:, 1:], torch.full((2, 1), -100)], 1)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, labels=ids).loss, model(ids, shift_labels=shifted, labels=ids).loss)
        by_hand = torch.nn.functional.cross_entropy(model(ids).logits[:, :-1].reshape(-1, 99), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(model(ids, labels=ids).loss, by_hand)


def test_batched_classification_without_mask_or_pad_token_is_refused():
    from hf_seq import GPTForSequenceClassification

    model = GPTForSequenceClassification(GPTConfig(vocab_size=99, **TINY, pad_token_id=None)).eval()
    ids = torch.randint(3, 99, (2, 5))
    with pytest.raises(ValueError, match="pad"):
        model(ids)
    assert model(ids, attention_mask=torch.ones_like(ids)).logits.shape == (2, 2)


def test_bf16_forward_and_generate():
    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY)).eval().to(torch.bfloat16)
    ids = torch.randint(3, 99, (1, 5))
    out = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 9)
    assert model(ids).logits.dtype == torch.bfloat16


@pytest.mark.slow
def test_torch_compile_matches_eager():
    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY)).eval()
    ids = torch.randint(3, 99, (2, 8))
    compiled = torch.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-5)


class CopiesSeen(LogitsProcessor):
    """Records at each generate() step whether the model's output layer holds a W^T copy (models/decoding.py)."""

    def __init__(self, model):
        self.model, self.seen = model, []

    def __call__(self, input_ids, scores):
        self.seen.append(getattr(self.model.lm_head, "weight_t", None) is not None)
        return scores


def test_generate_reads_transposed_weights_with_the_same_tokens_and_leaves_the_model_as_it_was():
    """generate() runs the one-token steps on contiguous W^T copies (models/decoding.py), made after the prompt's
    step: the same tokens as the (out, in) layout, greedy and beam search, and afterwards the layers, parameters and
    state dict are unchanged."""
    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for ids in (torch.randint(3, 99, (3, 6)), torch.randint(3, 99, (1, 6))):
        for kwargs in (dict(do_sample=False), dict(num_beams=3, do_sample=False)):
            outputs = []
            for transposed in (True, False):
                model.transpose_weights_for_decoding = transposed
                spy = CopiesSeen(model)
                outputs.append(
                    model.generate(
                        ids, max_new_tokens=6, pad_token_id=0, eos_token_id=None, logits_processor=[spy], **kwargs
                    )
                )
                assert spy.seen == [False] + [transposed] * 5, (transposed, kwargs)
            assert torch.equal(outputs[0], outputs[1]), kwargs
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(type(m) is torch.nn.Linear and "weight_t" not in m._buffers for m in linears)
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_a_decode_of_more_rows_than_the_copies_serve_makes_none():
    """A step of more than max_rows rows (a batch times its beams) reads W as it is, so generate() makes no W^T
    copies for it (they cost a few milliseconds per call and nothing would read them); the tokens are the same."""
    from hf_seq.models.decoding import _FewRowsLinear

    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY)).eval()
    rows = _FewRowsLinear.max_rows + 1
    for batch, beams in ((rows, 1), (-(-rows // 4), 4)):
        ids = torch.randint(3, 99, (batch, 6))
        outputs = []
        for transposed in (True, False):
            model.transpose_weights_for_decoding = transposed
            spy = CopiesSeen(model)
            kwargs = dict(num_beams=beams, do_sample=False, logits_processor=[spy])
            outputs.append(model.generate(ids, max_new_tokens=4, pad_token_id=0, eos_token_id=None, **kwargs))
            assert spy.seen == [False] * 4, (batch, beams)
        assert torch.equal(outputs[0], outputs[1])


def test_decoding_transposes_only_the_weights_read_faster_transposed():
    """Within transposed_linear_weights, once the copies are made, layers with out >= in features compute one row from
    a contiguous W^T (the MLP's down projection, 4C -> C, keeps W: read transposed it is slower); every layer gives
    the same output."""
    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY)).eval()
    linears = {name: m for name, m in model.named_modules() if type(m) is torch.nn.Linear}
    x = {name: torch.randn(1, 1, m.in_features) for name, m in linears.items()}
    with torch.no_grad():
        expected = {name: m(x[name]) for name, m in linears.items()}
        with transposed_linear_weights(model) as transpose:
            # every layer, transposed or not, computes a compiled one-row input from W as it is (one_row_linear)
            assert not any(type(m) is torch.nn.Linear for m in model.modules())
            transpose()
            transposed = {name for name, m in linears.items() if getattr(m, "weight_t", None) is not None}
            outputs = {name: m(x[name]) for name, m in linears.items()}
    assert transposed == {name for name, m in linears.items() if m.out_features >= m.in_features}
    kept = set(linears) - transposed
    assert "lm_head" in transposed and kept and all(name.endswith("down_proj") for name in kept)
    for name in linears:
        torch.testing.assert_close(outputs[name], expected[name], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_compiled_static_decode_is_one_graph_with_the_eager_tokens():
    """A compiled one-token step with a static cache: one graph, no recompilation per step or per call. On a CPU a
    compile_config is honoured as it is (transformers would skip it there without a private flag), and not changed.
    At one row per step the compiled step reads the weights as they are, so no W^T copy is made (models/decoding.py);
    at two rows it reads the copies."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=99, **TINY)).eval()
    config = CompileConfig(fullgraph=True, dynamic=False, mode="default")
    generate = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    ids = torch.randint(3, 99, (2, 5))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding: the one-token step's mask (models/decoding.py) must keep it
    for inputs in (dict(input_ids=ids[:1]), dict(input_ids=ids, attention_mask=mask)):
        eager = model.generate(**inputs, **generate)
        torch._dynamo.reset()
        counters.clear()
        for _ in range(2):
            spy = CopiesSeen(model)
            out = model.generate(
                **inputs, cache_implementation="static", compile_config=config, logits_processor=[spy], **generate
            )
            assert torch.equal(out, eager)
            assert spy.seen == [False] + [len(inputs["input_ids"]) > 1] * 7
        assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"] and not counters["graph_break"]
    assert config._compile_all_devices is None


def test_one_token_step_inputs_equal_transformers_general_ones():
    """With a static cache, generate()'s one-token step builds its inputs on a short path (models/decoding.py): the
    same tensors as transformers' general prepare_inputs_for_generation, padded or not; other steps take that path."""
    from transformers import StaticCache

    from hf_seq.models.decoding import one_token_step_inputs
    from hf_seq.models.utils import CACHE_NAME
    from tests.tester import general_step_inputs

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=99, **TINY)
    model = GPTForCausalLM(config).eval()
    cache = StaticCache(config=config, max_cache_len=12)
    model(torch.randint(3, 99, (2, 6)), past_key_values=cache)
    ids = torch.randint(3, 99, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    for attention_mask in (mask, None):
        kwargs = dict(attention_mask=attention_mask, position_ids=torch.arange(7).expand(2, -1), logits_to_keep=1)
        step = dict(kwargs)
        del step["attention_mask"]
        assert one_token_step_inputs(model, ids, 1, cache, attention_mask, None, step) is not None  # the short path
        # the cache under the name generate() passes it
        ours = model.prepare_inputs_for_generation(ids, next_sequence_length=1, **{CACHE_NAME: cache}, **kwargs)
        general = general_step_inputs(model, ids, next_sequence_length=1, **{CACHE_NAME: cache}, **kwargs)
        assert ours.keys() == general.keys()
        for key, value in general.items():
            assert torch.equal(ours[key], value) if torch.is_tensor(value) else ours[key] is value, key
        assert ours["input_ids"].stride() == (1, 1)  # a fresh tensor: a compiled step sees the same strides
    assert ours["attention_mask"].shape == (2, 1, 1, 12)
    general = model.prepare_inputs_for_generation(
        ids, next_sequence_length=7, **{CACHE_NAME: cache}, attention_mask=mask
    )
    assert general["attention_mask"].shape[2] == 7  # the prompt: transformers' own path


@pytest.fixture(scope="module")
def saved_gpt(tmp_path_factory):
    """A tiny GPT and its BPE tokenizer saved in one folder, as a user would publish them."""
    from hf_seq import GPTForSequenceClassification
    from hf_seq.data.tokenization import train_bpe_tokenizer

    texts = [f"the {w} sat on the {v} mat" for w in ("cat", "dog", "bird") for v in ("red", "blue", "old")] * 10
    tokenizer = train_bpe_tokenizer(texts, vocab_size=300, min_frequency=1)
    ids = dict(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
    )
    folder = tmp_path_factory.mktemp("gpt")
    torch.manual_seed(0)
    GPTForCausalLM(GPTConfig(vocab_size=len(tokenizer), **TINY, **ids)).save_pretrained(folder / "lm")
    labels = {"id2label": {0: "NEG", 1: "POS"}, "label2id": {"NEG": 0, "POS": 1}}
    GPTForSequenceClassification(GPTConfig(vocab_size=len(tokenizer), **TINY, **ids, **labels)).save_pretrained(
        folder / "cls"
    )
    tokenizer.save_pretrained(folder / "lm")
    tokenizer.save_pretrained(folder / "cls")
    return folder


def test_text_generation_pipeline(saved_gpt):
    from transformers import pipeline

    generator = pipeline("text-generation", model=str(saved_gpt / "lm"))
    single = generator("the cat", max_new_tokens=5, do_sample=False)
    assert single[0]["generated_text"].startswith("the cat")
    batch = generator(["the cat sat", "the dog"], max_new_tokens=5, do_sample=False, batch_size=2)
    alone = generator("the dog", max_new_tokens=5, do_sample=False)
    assert batch[1][0]["generated_text"] == alone[0]["generated_text"]  # left padding changes nothing
    new_only = generator("the cat", max_new_tokens=5, do_sample=False, return_full_text=False)
    assert single[0]["generated_text"] == "the cat" + new_only[0]["generated_text"]


def test_text_classification_and_feature_extraction_pipelines(saved_gpt):
    from transformers import pipeline

    classifier = pipeline("text-classification", model=str(saved_gpt / "cls"))
    results = classifier(["the cat sat on the mat", "the dog"], top_k=None, batch_size=2)
    assert {r["label"] for r in results[0]} == {"NEG", "POS"}
    assert abs(sum(r["score"] for r in results[0]) - 1) < 1e-5
    # batched with padding == one at a time
    alone = classifier("the dog", top_k=None)
    assert {r["label"]: round(r["score"], 5) for r in results[1]} == {r["label"]: round(r["score"], 5) for r in alone}

    extractor = pipeline("feature-extraction", model=str(saved_gpt / "lm"))
    features = torch.tensor(extractor("the cat sat"))
    assert features.shape[0] == 1 and features.shape[-1] == TINY["hidden_size"]
