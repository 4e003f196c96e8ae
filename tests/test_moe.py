"""The mixture-of-experts feed-forward block of GPT (layers.MixtureOfExperts): routing, the load-balancing loss, the
router logits it returns, and its equivalence to the dense block with one expert. tests/test_gpt.py runs the shared
tester on MoE variants."""

import pytest
import torch
from transformers.modeling_outputs import MoeCausalLMOutputWithPast, MoeModelOutputWithPast
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

from hf_seq import GPTConfig, GPTForCausalLM, GPTModel
from hf_seq.models.layers import FeedForward, MixtureOfExperts, load_balancing_loss

TINY = dict(
    vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, pad_token_id=0
)
MOE = dict(num_local_experts=4, num_experts_per_tok=2)


def moe_gpt(seed=0, **overrides):
    torch.manual_seed(seed)
    return GPTForCausalLM(GPTConfig(**TINY, **{**MOE, **overrides})).eval()


@pytest.mark.parametrize(
    "variant", [{}, dict(hidden_act="swiglu", norm_type="rmsnorm", position_embedding_type="rope")], ids=str
)
def test_one_expert_chosen_for_every_token_is_the_dense_gpt(variant):
    """With one expert and k = 1, every token's weight is softmax of one logit = 1 exactly, and y = 0 + 1 * E(x):
    the dense model's logits bit for bit, and its loss without the balancing term (which is then exactly 1)."""
    torch.manual_seed(0)
    dense = GPTForCausalLM(GPTConfig(**TINY, **variant)).eval()
    moe = GPTForCausalLM(GPTConfig(**TINY, **variant, num_local_experts=1, num_experts_per_tok=1)).eval()
    state = {k.replace(".mlp.", ".mlp.experts.0."): v for k, v in dense.state_dict().items()}
    missing, unexpected = moe.load_state_dict(state, strict=False)
    assert sorted(missing) == [f"model.layers.{i}.mlp.gate.weight" for i in range(2)] and not unexpected
    ids = torch.randint(3, 99, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    with torch.no_grad():
        expected = dense(ids, attention_mask=mask, labels=ids)
        for coef in (0.0, 0.3):
            moe.config.router_aux_loss_coef = coef
            got = moe(ids, attention_mask=mask, labels=ids)
            torch.testing.assert_close(got.logits, expected.logits, rtol=0, atol=0)
            assert got.aux_loss == 1.0
            torch.testing.assert_close(got.loss, expected.loss + coef, rtol=0, atol=1e-7)
    generate = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(moe.generate(ids, **generate), dense.generate(ids, **generate))


def test_each_token_gets_its_top_k_experts_weighted_by_a_softmax_over_their_logits():
    """The routed block against the equations, token by token: y = sum_{i in top-k(r)} softmax(r_top-k)_i E_i(x)."""
    torch.manual_seed(0)
    block = MixtureOfExperts(16, 24, "gelu", num_experts=5, top_k=2).eval()
    x = torch.randn(3, 4, 16)
    router_outputs = []
    block.gate.register_forward_hook(lambda module, args, output: router_outputs.append(output))
    with torch.no_grad():
        y = block(x)
        (router_logits,) = router_outputs  # what a model records: the router's output, (tokens, experts)
        assert y.shape == x.shape and router_logits.shape == (12, 5)
        for t, token in enumerate(x.reshape(-1, 16)):
            r = token @ block.gate.weight.T
            top = r.topk(2).indices
            weights = torch.softmax(r[top], -1)
            expected = sum(w * block.experts[int(i)](token) for w, i in zip(weights, top))
            torch.testing.assert_close(y.reshape(-1, 16)[t], expected, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(router_logits[t], r)


def test_the_compiled_graphs_route_as_eager_does(monkeypatch):
    """Under torch.compile every expert runs on every token, the unchosen ones weighted 0: the same output."""
    torch.manual_seed(0)
    block = MixtureOfExperts(16, 24, "swiglu", num_experts=4, top_k=2).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        eager = block(x)
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        every_expert = block(x)
    torch.testing.assert_close(every_expert, eager, rtol=1e-6, atol=1e-6)


def test_load_balancing_loss_by_hand_and_as_transformers_computes_it():
    # 3 tokens, 2 experts, k = 1: tokens 0 and 1 choose expert 0, token 2 expert 1, so f = (2/3, 1/3)
    logits = torch.tensor([[2.0, 0.0], [1.0, 0.0], [0.0, 3.0]])
    p = torch.softmax(logits, -1)
    mean_p = p.mean(0)
    by_hand = 2 * (2 / 3 * mean_p[0] + 1 / 3 * mean_p[1])
    torch.testing.assert_close(load_balancing_loss((logits,), top_k=1), by_hand)
    # a uniform router gives k
    torch.testing.assert_close(load_balancing_loss((torch.zeros(6, 4),), top_k=2), torch.tensor(2.0))
    # Mixtral's function, several layers, with and without padding
    g = torch.Generator().manual_seed(0)
    layers = tuple(torch.randn(2 * 5, 6, generator=g) for _ in range(3))
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, :3] = 0
    for top_k in (1, 2, 3):
        for token_mask in (None, mask):
            torch.testing.assert_close(
                load_balancing_loss(layers, top_k, token_mask),
                load_balancing_loss_func(layers, 6, top_k, token_mask),
            )


def test_the_loss_adds_the_balancing_loss_of_the_real_tokens():
    """loss = LM cross-entropy + router_aux_loss_coef * aux, aux over the router logits of the unpadded tokens; the
    router logits are returned per layer as (batch * tokens, experts) when asked, by argument or config."""
    model = moe_gpt(router_aux_loss_coef=0.5)
    ids = torch.randint(3, 99, (2, 6))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    out = model(ids, attention_mask=mask, labels=ids, output_router_logits=True)
    assert type(out).__name__ == "MoeCausalLMOutputWithPast"
    assert len(out.router_logits) == 2 and all(r.shape == (12, 4) for r in out.router_logits)
    expected_aux = load_balancing_loss_func(out.router_logits, 4, 2, mask)
    torch.testing.assert_close(out.aux_loss, expected_aux)
    lm = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 99), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, lm + 0.5 * expected_aux)
    out.loss.backward()
    assert model.model.layers[0].mlp.gate.weight.grad.abs().sum() > 0

    with torch.no_grad():
        plain = model(ids, attention_mask=mask)
        assert plain.router_logits is None and plain.aux_loss is None and plain.loss is None
        assert model(ids, labels=ids).router_logits is None  # computed for the loss, returned only when asked
        model.config.output_router_logits = True
        assert len(model(ids).router_logits) == 2
        base = GPTModel(model.config)(ids, output_router_logits=True)
        assert type(base).__name__ == "MoeModelOutputWithPast" and base.router_logits[1].shape == (12, 4)


def test_a_dense_gpt_returns_the_moe_outputs_without_a_router():
    """num_local_experts defaults to 0: the dense FeedForward under its old parameter names. Its outputs are the
    mixture's classes, as transformers' MoE models return them unasked: `router_logits` and `aux_loss` are None (not
    an AttributeError), even when asked for by argument or config, since a dense model has no router; the loss is the
    LM loss alone and the tuple form is unchanged."""
    config = GPTConfig(**TINY)
    assert config.num_local_experts == 0
    torch.manual_seed(0)
    model = GPTForCausalLM(config).eval()
    assert isinstance(model.model.layers[0].mlp, FeedForward)
    assert not any("expert" in name or "gate" in name for name in model.state_dict())
    ids = torch.randint(3, 99, (1, 4))
    with torch.no_grad():
        out = model(ids, labels=ids, output_router_logits=True)
    assert type(out) is MoeCausalLMOutputWithPast and out.router_logits is None and out.aux_loss is None
    lm = torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:])
    torch.testing.assert_close(out.loss, lm)
    config.output_router_logits = True
    for model, output_class in ((GPTForCausalLM(config).eval(), MoeCausalLMOutputWithPast),
                                (GPTModel(config).eval(), MoeModelOutputWithPast)):  # fmt: skip
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
            assert type(out) is output_class and out.router_logits is None and "router_logits" not in out
            assert len(out.hidden_states) == 3 and len(model(ids, return_dict=False)) == 2  # (logits or states, cache)


@pytest.mark.parametrize("cls", [GPTModel, GPTForCausalLM], ids=lambda cls: cls.__name__)
def test_output_router_logits_from_config_as_transformers_tests_it(cls):
    """transformers' test_output_router_logits_from_config sets `config.output_router_logits = True` and passes no
    argument: a mixture of experts then returns one (batch * tokens, experts) router logit tensor per layer from the
    base model and the LM alike. A dense GPT has no router to report (test_a_dense_gpt_is_unchanged): that check runs
    on a sparse configuration, as transformers' own MoE models with dense defaults run it."""
    torch.manual_seed(0)
    model = cls(GPTConfig(**TINY, **MOE, output_router_logits=True)).eval()
    with torch.no_grad():
        out = model(torch.randint(3, 99, (2, 6)))
    assert len(out.router_logits) == TINY["num_hidden_layers"]
    assert all(r.shape == (12, MOE["num_local_experts"]) for r in out.router_logits)


def test_router_logits_are_recorded_per_layer_beside_states_and_attentions():
    """Output capturing records each block's states, attention maps and router logits in layer order: the router
    logits are the router's outputs, as a hook on each layer's router sees them."""
    model = moe_gpt(attn_implementation="eager")
    ids = torch.randint(3, 99, (2, 6))
    seen = []
    for layer in model.model.layers:
        layer.mlp.gate.register_forward_hook(lambda module, args, output: seen.append(output))
    with torch.no_grad():
        out = model(ids, output_router_logits=True, output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2 and out.attentions[0].shape == (2, 4, 6, 6)
    assert len(out.router_logits) == 2 and all(r is s for r, s in zip(out.router_logits, seen))
    with torch.no_grad():
        plain = model(ids, return_dict=False)
    assert len(plain) == 2  # logits and cache: nothing recorded unless asked


def test_an_accumulated_step_adds_the_balancing_loss_once():
    """Under gradient accumulation Trainer passes `num_items_in_batch` (the step's scored tokens) and sums the
    micro-batches' losses: each micro-batch's balancing loss enters by its share of those tokens, so the step holds
    about one balancing loss, as the full batch does (not one per micro-batch)."""
    model = moe_gpt(router_aux_loss_coef=1.0)
    ids = torch.randint(3, 99, (8, 6))
    labels = ids.clone()
    labels[0, :3] = -100
    total = labels[:, 1:].ne(-100).sum()
    with torch.no_grad():
        full = model(ids, labels=labels, num_items_in_batch=total)
        micro = [model(ids[i : i + 2], labels=labels[i : i + 2], num_items_in_batch=total) for i in range(0, 8, 2)]
        model.config.router_aux_loss_coef = 0.0
        lm_full = model(ids, labels=labels, num_items_in_batch=total).loss
        lm_micro = sum(
            model(ids[i : i + 2], labels=labels[i : i + 2], num_items_in_batch=total).loss for i in range(0, 8, 2)
        )
    torch.testing.assert_close(full.loss - lm_full, full.aux_loss)
    shares = [labels[i : i + 2, 1:].ne(-100).sum() / total for i in range(0, 8, 2)]
    accumulated_aux = sum(m.loss for m in micro) - lm_micro
    torch.testing.assert_close(accumulated_aux, sum(s * m.aux_loss for s, m in zip(shares, micro)))
    assert abs(accumulated_aux / full.aux_loss - 1) < 0.2  # the product of batch means does not split exactly


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_local_experts=4, num_experts_per_tok=5), r"num_experts_per_tok=5 .*allowed values: 1 to 4"),
        (dict(num_local_experts=4, num_experts_per_tok=0), r"num_experts_per_tok=0 .*allowed values: 1 to 4"),
        (dict(num_local_experts=-1), "num_local_experts must be 0"),
        (dict(num_local_experts=2, router_aux_loss_coef=-0.1), "router_aux_loss_coef must be >= 0"),
    ],
)
def test_config_rejects_impossible_routing(overrides, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**TINY, **overrides)


def test_generate_greedy_beam_and_static_cache_agree_with_recomputation():
    """The one-token steps (W^T copies of the experts and router, a static cache) give the tokens of a full
    recomputation at each step."""
    model = moe_gpt()
    ids = torch.randint(3, 99, (2, 5))
    generate = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    greedy = model.generate(ids, **generate)
    recomputed = ids
    with torch.no_grad():
        for _ in range(6):
            recomputed = torch.cat([recomputed, model(recomputed).logits[:, -1:].argmax(-1)], 1)
    assert torch.equal(greedy, recomputed)
    assert torch.equal(model.generate(ids, cache_implementation="static", **generate), greedy)
    beams = dict(generate, num_beams=3)
    assert torch.equal(model.generate(ids, **beams), model.generate(ids, use_cache=False, **beams))


@pytest.mark.slow
def test_compiled_static_decode_gives_the_eager_tokens():
    """A compiled one-token step with a static cache: one graph (the routing has no data-dependent shape there),
    the eager tokens."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    model = moe_gpt()
    ids = torch.randint(3, 99, (2, 5))
    generate = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    eager = model.generate(ids, **generate)
    torch._dynamo.reset()
    counters.clear()
    config = CompileConfig(fullgraph=True, dynamic=False, mode="default")
    for _ in range(2):
        compiled = model.generate(ids, cache_implementation="static", compile_config=config, **generate)
        assert torch.equal(compiled, eager)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"] and not counters["graph_break"]
