"""The shared tester every hf-seq family plugs into.

A family's test module subclasses `ModelTesterMixin`, names its registry family and a tiny config, and gets every
behaviour a transformers user relies on checked against every model class the registry lists for it:

    class TestGPT(ModelTesterMixin):
        family = "hf_seq_gpt"
        config_kwargs = dict(hidden_size=32, ...)

Variants (other cell types, position encodings, ...) subclass that class and override `config_overrides`.
Hooks a family may override: `make_inputs`, `generate_inputs`, `main_output`, `params_without_grad`,
`hidden_state_widths`.
`tests/test_registry.py` fails if a registered model class is not covered by some tester.
"""

import json
import textwrap

import pytest
import torch
import transformers
from transformers import Trainer, TrainingArguments

from hf_seq.registry import family as get_family

PAD, BOS, EOS = 0, 1, 2
FIRST_WORD = 3  # ids below are special tokens
PREDICTION = "AutoModelForTimeSeriesPrediction"


def main_output(output) -> torch.Tensor:
    """The tensor a model class exists to produce."""
    for name in ("logits", "start_logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if value is not None:
            return value
    raise AssertionError(f"no main output in {type(output).__name__}")


class ModelTesterMixin:
    family: str = ""
    config_kwargs: dict = {}
    config_overrides: dict = {}
    vocab_size = 99
    seq_len = 7
    batch_size = 3
    is_encoder_decoder = False
    is_causal = True  # decoder-only LMs and the decoder of encoder-decoders; False for BERT-like encoders
    has_position_limit = True  # sequences past max_position_embeddings must be refused
    supports_beam_search = True
    supports_static_cache = False
    expensive_checks = True  # Trainer / checkpointing / remote code: run once per family, not per variant
    params_without_grad: tuple[str, ...] = ()  # parameter-name substrings legitimately unused by a head

    # ---------------------------------------------------------------- building blocks
    @property
    def fam(self):
        return get_family(self.family)

    @property
    def token_autos(self) -> list[str]:
        """The family's Auto classes that read tokens: the forecasting heads read values (tests/test_prediction.py)."""
        return [auto for auto in self.fam.models if auto != PREDICTION]

    @property
    def model_classes(self):
        return [self.fam.model_class(auto) for auto in self.token_autos]

    def make_config(self, **overrides):
        kwargs = dict(
            vocab_size=self.vocab_size, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, **self.config_kwargs
        )
        kwargs.update(self.config_overrides)
        kwargs.update(overrides)
        return self.fam.config_class(**kwargs)

    def make_model(self, cls, seed=0, **overrides):
        torch.manual_seed(seed)
        return cls(self.make_config(**overrides)).eval()

    def random_ids(self, batch_size=None, seq_len=None, seed=0):
        g = torch.Generator().manual_seed(seed)
        shape = (batch_size or self.batch_size, seq_len or self.seq_len)
        return torch.randint(FIRST_WORD, self.vocab_size, shape, generator=g)

    def make_inputs(self, cls, batch_size=None, seq_len=None, seed=0, labels=False) -> dict:
        """Unpadded inputs for `cls`; with `labels=True`, labels its loss accepts."""
        ids = self.random_ids(batch_size, seq_len, seed)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if self.is_encoder_decoder:
            dec = self.random_ids(batch_size, seq_len, seed + 1)
            inputs["decoder_input_ids"] = dec
        if labels:
            inputs["labels"] = self.make_labels(cls, inputs, seed)
        return inputs

    def make_labels(self, cls, inputs, seed=0):
        g = torch.Generator().manual_seed(seed + 7)
        ids = inputs["input_ids"]
        name = cls.__name__
        if name.endswith("ForSequenceClassification"):
            return torch.randint(0, 2, (ids.shape[0],), generator=g)
        if name.endswith("ForTokenClassification"):
            return torch.randint(0, 2, ids.shape, generator=g)
        if name.endswith(("ForQuestionAnswering", "Model")):
            return None  # QA takes start/end positions; a base model has no loss
        if self.is_encoder_decoder:
            return inputs["decoder_input_ids"].clone()
        return ids.clone()

    def forward_main(self, model, inputs):
        with torch.no_grad():
            return main_output(model(**inputs))

    @property
    def causal_key(self):
        return "decoder_input_ids" if self.is_encoder_decoder else "input_ids"

    @property
    def lm_class(self):
        """The class that generates, if the family has one."""
        for auto in ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM"):
            if auto in self.fam.models:
                return self.fam.model_class(auto)
        return None

    @property
    def trained_class(self):
        """The class the Trainer checks train (the pretraining head: the generating one, or e.g. a masked LM)."""
        return self.lm_class

    def generate_inputs(self, seed=0, batch_size=2, seq_len=5) -> dict:
        ids = self.random_ids(batch_size, seq_len, seed)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def generate(self, model, inputs, **kwargs):
        # min_new_tokens keeps EOS out, so every run produces the same number of tokens
        kwargs = {"max_new_tokens": 6, "min_new_tokens": 6, "pad_token_id": PAD, **kwargs}
        with torch.no_grad():
            return model.generate(**inputs, **kwargs)

    # ---------------------------------------------------------------- configuration and registry
    def test_auto_classes_resolve(self):
        config = self.make_config()
        assert isinstance(transformers.AutoConfig.for_model(self.family, **self.config_kwargs), self.fam.config_class)
        for auto in self.token_autos:
            model = getattr(transformers, auto).from_config(config)
            assert type(model) is self.fam.model_class(auto), auto

    def test_config_round_trip_and_misspelled_option(self, tmp_path):
        config = self.make_config()
        config.save_pretrained(tmp_path)
        reloaded = transformers.AutoConfig.from_pretrained(tmp_path)
        assert {**reloaded.to_dict(), "_name_or_path": ""} == config.to_dict()
        first_option = next(k for k in self.config_kwargs if "_" in k)
        typo = first_option[:-1] + first_option[-1] * 2
        with pytest.raises(ValueError, match="did you mean"):
            self.make_config(**{typo: self.config_kwargs[first_option]})

    # ---------------------------------------------------------------- save / load
    def test_save_load_round_trip(self, tmp_path):
        for auto in self.token_autos:
            cls = self.fam.model_class(auto)
            model = self.make_model(cls)
            inputs = self.make_inputs(cls)
            expected = self.forward_main(model, inputs)
            model.save_pretrained(tmp_path / auto)
            assert (tmp_path / auto / "model.safetensors").exists()
            reloaded = (
                getattr(transformers, auto)
                .from_pretrained(tmp_path / auto, attn_implementation=model.config._attn_implementation)
                .eval()
            )
            assert type(reloaded) is cls
            torch.testing.assert_close(self.forward_main(reloaded, inputs), expected, rtol=0, atol=0)
            in_emb, out_emb = reloaded.get_input_embeddings(), reloaded.get_output_embeddings()
            if model.config.tie_word_embeddings and out_emb is not None:
                assert out_emb.weight is in_emb.weight, f"{cls.__name__}: tied weights not tied after reload"

    def test_remote_code_load_where_hf_seq_is_not_installed(self, tmp_path, clean_python):
        """The saved folder loads where hf_seq cannot be imported, with identical outputs, and generates."""
        if not self.expensive_checks:
            pytest.skip("checked once per family")
        cls = self.lm_class or self.model_classes[0]
        model = self.make_model(cls)
        inputs = self.make_inputs(cls)
        model.save_pretrained(tmp_path / "model")
        torch.save({k: v for k, v in inputs.items()}, tmp_path / "inputs.pt")
        torch.save(self.forward_main(model, inputs), tmp_path / "expected.pt")
        autos = json.dumps(self.token_autos)
        saved_auto = next(auto for auto, name in self.fam.models.items() if name == cls.__name__)
        script = textwrap.dedent(
            f"""
            import torch, transformers
            torch.set_num_threads({torch.get_num_threads()})  # the parent's: sums split alike, outputs bit-equal
            folder = {str(tmp_path / "model")!r}
            config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
            assert not type(config).__module__.startswith("hf_seq"), type(config).__module__
            inputs = torch.load({str(tmp_path / "inputs.pt")!r})
            expected = torch.load({str(tmp_path / "expected.pt")!r})
            for auto in {autos}:
                model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
                assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
                if auto == {saved_auto!r}:
                    with torch.no_grad():
                        out = model(**inputs)
                    got = next(getattr(out, n) for n in ("logits", "start_logits", "last_hidden_state")
                               if getattr(out, n, None) is not None)
                    assert torch.equal(got, expected), (got - expected).abs().max()
                    if hasattr(model, "generate") and model.can_generate():
                        gen_inputs = {{k: v for k, v in inputs.items() if not k.startswith("decoder_")}}
                        out = model.generate(**gen_inputs, max_new_tokens=3, do_sample=False, pad_token_id=0)
                        print("generated", tuple(out.shape))
            print("remote ok")
            """
        )
        assert "remote ok" in clean_python.run(script)

    # ---------------------------------------------------------------- training signal
    def test_loss_and_gradients(self):
        for cls in self.model_classes:
            inputs = self.make_inputs(cls, labels=True)
            if inputs.get("labels") is None:
                inputs.pop("labels", None)
            if cls.__name__.endswith("ForQuestionAnswering"):
                inputs["start_positions"] = torch.tensor([1, 2, 0])[: inputs["input_ids"].shape[0]]
                inputs["end_positions"] = torch.tensor([3, 4, 5])[: inputs["input_ids"].shape[0]]
            model = self.make_model(cls).train()
            out = model(**inputs)
            if "labels" in inputs or "start_positions" in inputs:
                assert out.loss is not None and torch.isfinite(out.loss), cls.__name__
                loss = out.loss
            else:  # a base model: any function of its outputs (e.g. BERT's pooled output too) must reach every parameter
                loss = sum(v.pow(2).mean() for v in out.values() if torch.is_tensor(v) and v.is_floating_point())
            loss.backward()
            for name, param in model.named_parameters():
                if any(skip in name for skip in self.params_without_grad):
                    continue
                assert param.grad is not None, f"{cls.__name__}: no gradient reaches {name}"
                assert torch.isfinite(param.grad).all(), f"{cls.__name__}: non-finite gradient in {name}"

    def test_labels_minus_100_are_ignored(self):
        cls = self.lm_class
        if cls is None:
            pytest.skip("no language-model head")
        model = self.make_model(cls)
        inputs = self.make_inputs(cls, labels=True)
        masked = dict(inputs, labels=inputs["labels"].clone())
        masked["labels"][:, -2:] = -100
        key = self.causal_key
        # changing the tokens whose labels are ignored, past the last scored prediction, leaves the loss unchanged
        with torch.no_grad():
            loss = model(**masked).loss
            changed = dict(masked, labels=masked["labels"].clone())
            changed[key] = masked[key].clone()
            changed[key][:, -1] = FIRST_WORD + (masked[key][:, -1] + 1 - FIRST_WORD) % (self.vocab_size - FIRST_WORD)
            assert torch.allclose(model(**changed).loss, loss, atol=1e-6)
            assert not torch.allclose(model(**inputs).loss, loss, atol=1e-6)

    # ---------------------------------------------------------------- information flow
    def test_causality(self):
        for cls in self.model_classes:
            if cls.__name__.endswith(("ForSequenceClassification", "ForQuestionAnswering")):
                continue  # sequence-level outputs
            model = self.make_model(cls)
            inputs = self.make_inputs(cls)
            base = self.forward_main(model, inputs)
            changed = dict(inputs)
            changed[self.causal_key] = inputs[self.causal_key].clone()
            t = self.seq_len - 2
            changed[self.causal_key][:, t:] = FIRST_WORD
            out = self.forward_main(model, changed)
            if self.is_causal:
                torch.testing.assert_close(out[:, :t], base[:, :t], rtol=1e-5, atol=1e-5)
            else:
                assert not torch.allclose(out[:, :t], base[:, :t], atol=1e-5), f"{cls.__name__} is not bidirectional"
            assert not torch.allclose(out[:, t:], base[:, t:], atol=1e-5), f"{cls.__name__} ignores its input"
            if self.is_encoder_decoder:  # every target position reads the source
                out = self.forward_main(model, dict(inputs, input_ids=self.random_ids(seed=5)))
                unchanged = torch.isclose(out, base, atol=1e-5).all(-1)
                assert not unchanged.any(), f"{cls.__name__}: target positions ignore the source"

    def test_batch_independence(self):
        for cls in self.model_classes:
            model = self.make_model(cls)
            inputs = self.make_inputs(cls)
            batched = self.forward_main(model, inputs)
            for i in range(self.batch_size):
                alone = self.forward_main(model, {k: v[i : i + 1] for k, v in inputs.items()})
                torch.testing.assert_close(batched[i : i + 1], alone, rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize("side", ["right", "left"])
    def test_padding_invariance(self, side):
        """Each sequence of a padded batch gives what it gives alone."""
        for cls in self.model_classes:
            model = self.make_model(cls)
            lengths = [self.seq_len, self.seq_len - 3, self.seq_len - 1]
            rows = [self.random_ids(1, n, seed=i)[0] for i, n in enumerate(lengths)]
            ids = torch.full((3, self.seq_len), PAD)
            mask = torch.zeros_like(ids)
            for i, row in enumerate(rows):
                span = slice(0, len(row)) if side == "right" else slice(self.seq_len - len(row), self.seq_len)
                ids[i, span], mask[i, span] = row, 1
            batch = {"input_ids": ids, "attention_mask": mask}
            if self.is_encoder_decoder:
                batch["decoder_input_ids"] = self.random_ids(3, 4, seed=9)
            out = self.forward_main(model, batch)
            for i, row in enumerate(rows):
                single = {"input_ids": row[None], "attention_mask": torch.ones(1, len(row), dtype=torch.long)}
                if self.is_encoder_decoder:
                    single["decoder_input_ids"] = batch["decoder_input_ids"][i : i + 1]
                alone = self.forward_main(model, single)[0]
                got = out[i]
                per_token = got.dim() >= 2 or cls.__name__.endswith("ForQuestionAnswering")  # QA: (B, T) scores
                if per_token and not self.is_encoder_decoder:  # per-token outputs: compare the real tokens
                    span = slice(0, len(row)) if side == "right" else slice(self.seq_len - len(row), self.seq_len)
                    got = got[span]
                torch.testing.assert_close(got, alone, rtol=1e-4, atol=1e-5, msg=f"{cls.__name__} row {i} ({side})")

    # ---------------------------------------------------------------- generation
    def test_incremental_forward_equals_full_forward(self):
        cls = self.lm_class
        if cls is None:
            pytest.skip("no generating head")
        model = self.make_model(cls)
        inputs = self.make_inputs(cls)
        full = self.forward_main(model, inputs)
        key, split = self.causal_key, self.seq_len - 3
        first = dict(inputs, **{key: inputs[key][:, :split]})
        if not self.is_encoder_decoder:
            first["attention_mask"] = inputs["attention_mask"][:, :split]
        with torch.no_grad():
            out = model(**first, use_cache=True)
            logits = [out.logits]
            past = out.past_key_values
            for t in range(split, self.seq_len):
                step = dict(inputs, **{key: inputs[key][:, t : t + 1]})
                if not self.is_encoder_decoder:
                    step["attention_mask"] = inputs["attention_mask"][:, : t + 1]
                out = model(**step, past_key_values=past, use_cache=True)
                logits.append(out.logits)
                past = out.past_key_values
        torch.testing.assert_close(torch.cat(logits, 1), full, rtol=1e-4, atol=1e-5)

    def test_generate_cache_equals_recompute(self):
        cls = self.lm_class
        if cls is None:
            pytest.skip("no generating head")
        model = self.make_model(cls)
        inputs = self.generate_inputs()
        greedy = self.generate(model, inputs, do_sample=False)
        assert torch.equal(greedy, self.generate(model, inputs, do_sample=False, use_cache=False))
        torch.manual_seed(3)
        sampled = self.generate(model, inputs, do_sample=True, temperature=1.3, top_k=20, top_p=0.9)
        torch.manual_seed(3)
        assert torch.equal(
            sampled, self.generate(model, inputs, do_sample=True, temperature=1.3, top_k=20, top_p=0.9, use_cache=False)
        )
        if self.supports_static_cache:
            assert torch.equal(greedy, self.generate(model, inputs, do_sample=False, cache_implementation="static"))

    def test_greedy_equals_manual_argmax_loop(self):
        cls = self.lm_class
        if cls is None:
            pytest.skip("no generating head")
        model = self.make_model(cls)
        inputs = self.generate_inputs(batch_size=1)
        if self.is_encoder_decoder:  # the decoder starts from its start token and reads the whole source each step
            start = model.generation_config.decoder_start_token_id
            start = model.config.bos_token_id if start is None else start
            ids = torch.tensor([[start]])
            step = lambda ids: model(**inputs, decoder_input_ids=ids).logits[:, -1]
        else:
            ids = inputs["input_ids"]
            step = lambda ids: model(input_ids=ids).logits[:, -1]
        with torch.no_grad():
            for _ in range(6):
                logits = step(ids)
                logits[:, EOS] = -float("inf")  # as min_new_tokens does
                ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
        assert torch.equal(self.generate(model, inputs, do_sample=False), ids)

    def test_beam_search_cache_equals_recompute(self):
        cls = self.lm_class
        if cls is None or not self.supports_beam_search:
            pytest.skip("no beam search")
        model = self.make_model(cls)
        inputs = self.generate_inputs()
        kwargs = dict(
            do_sample=False, num_beams=3, num_return_sequences=2, return_dict_in_generate=True, output_scores=True
        )
        cached = self.generate(model, inputs, **kwargs)
        recomputed = self.generate(model, inputs, use_cache=False, **kwargs)
        assert torch.equal(cached.sequences, recomputed.sequences)
        torch.testing.assert_close(cached.sequences_scores, recomputed.sequences_scores, rtol=1e-4, atol=1e-5)
        assert cached.sequences.shape[0] == 2 * inputs["input_ids"].shape[0]

    def test_padded_batch_generates_what_each_prompt_generates_alone(self):
        cls = self.lm_class
        if cls is None:
            pytest.skip("no generating head")
        model = self.make_model(cls)
        prompts = [self.random_ids(1, n, seed=10 + n)[0] for n in (5, 3, 4)]
        width = max(len(p) for p in prompts)
        ids = torch.full((3, width), PAD)
        mask = torch.zeros_like(ids)
        left = not self.is_encoder_decoder  # decoder-only prompts are left-padded, encoder inputs right-padded
        for i, p in enumerate(prompts):
            span = slice(width - len(p), width) if left else slice(0, len(p))
            ids[i, span], mask[i, span] = p, 1
        for kwargs in ({"do_sample": False}, {"do_sample": False, "num_beams": 2}):
            if "num_beams" in kwargs and not self.supports_beam_search:
                continue
            batch = self.generate(model, {"input_ids": ids, "attention_mask": mask}, **kwargs)
            for i, p in enumerate(prompts):
                alone = self.generate(
                    model, {"input_ids": p[None], "attention_mask": torch.ones(1, len(p), dtype=torch.long)}, **kwargs
                )
                # the 6 new tokens end every row (an encoder-decoder returns only the decoder's sequence)
                assert torch.equal(batch[i, -6:], alone[0, -6:]), f"prompt {i} {kwargs}"

    def test_generate_from_encoder_outputs_equals_from_input_ids(self):
        """generate() accepts a source encoded once beforehand (right-padded here) in place of input_ids."""
        cls = self.lm_class
        if cls is None or not self.is_encoder_decoder:
            pytest.skip("encoder-decoder check")
        model = self.make_model(cls)
        inputs = self.generate_inputs()
        inputs["input_ids"][0, -2:], inputs["attention_mask"][0, -2:] = PAD, 0
        for kwargs in ({"do_sample": False}, {"do_sample": False, "num_beams": 2}):
            with torch.no_grad():
                encoded = model.get_encoder()(**inputs)
            precomputed = self.generate(
                model, {"encoder_outputs": encoded, "attention_mask": inputs["attention_mask"]}, **kwargs
            )
            assert torch.equal(precomputed, self.generate(model, inputs, **kwargs)), kwargs

    def test_seq2seq_loss_scores_labels_unshifted(self):
        """Encoder-decoder labels are aligned with the decoder outputs: the loss must not shift them again, and
        labels alone feed the decoder the labels shifted right behind the start token."""
        cls = self.lm_class
        if cls is None or not self.is_encoder_decoder:
            pytest.skip("encoder-decoder check")
        model = self.make_model(cls)
        inputs = self.make_inputs(cls, labels=True)
        inputs["labels"][0, -2:] = -100
        with torch.no_grad():
            out = model(**inputs)
            by_hand = torch.nn.functional.cross_entropy(
                out.logits.reshape(-1, out.logits.shape[-1]), inputs["labels"].reshape(-1), ignore_index=-100
            )
            torch.testing.assert_close(out.loss, by_hand)
            labels_only = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
            shifted = model.prepare_decoder_input_ids_from_labels(inputs["labels"])
            assert torch.equal(shifted[:, 1:3], inputs["labels"][:, :2])
            torch.testing.assert_close(
                model(**labels_only).logits, model(**dict(inputs, decoder_input_ids=shifted)).logits
            )

    # ---------------------------------------------------------------- training machinery
    def test_trainer_gradient_accumulation_is_exact(self, tmp_path):
        """One SGD step on batch 8 == one step on 4 accumulated micro-batches of 2, for the pretraining head and
        every classification head (Trainer passes `num_items_in_batch` and does not rescale the loss itself)."""
        if self.trained_class is None or not self.expensive_checks:
            pytest.skip("checked once per family")
        heads = [
            c
            for c in self.model_classes
            if c.__name__.endswith(("ForSequenceClassification", "ForTokenClassification"))
        ]
        for cls in dict.fromkeys([self.trained_class, *heads]):
            self._check_gradient_accumulation(cls, tmp_path / cls.__name__)

    def _check_gradient_accumulation(self, cls, tmp_path):
        rows = self.make_inputs(cls, batch_size=8, labels=True)
        if rows["labels"].dim() == 2:  # uneven token counts per micro-batch: a mean of means would be wrong
            rows["labels"][0, :3] = -100
            rows["labels"][5, 1:] = -100
        dataset = [{k: v[i] for k, v in rows.items()} for i in range(8)]

        def train(batch_size, accumulation):
            model = self.make_model(cls, **self.no_dropout).train()
            args = TrainingArguments(
                output_dir=str(tmp_path / f"bs{batch_size}"),
                per_device_train_batch_size=batch_size,
                gradient_accumulation_steps=accumulation,
                max_steps=1,
                learning_rate=0.1,
                optim="sgd",
                lr_scheduler_type="constant",
                weight_decay=0.0,
                max_grad_norm=0.0,
                use_cpu=True,
                report_to="none",
                save_strategy="no",
                train_sampling_strategy="sequential",
                disable_tqdm=True,
            )
            Trainer(model=model, args=args, train_dataset=dataset).train()
            return {n: p.detach().clone() for n, p in model.named_parameters()}

        full, accumulated = train(8, 1), train(2, 4)
        start = {n: p for n, p in self.make_model(cls, **self.no_dropout).named_parameters()}
        moved = False
        for name in full:
            torch.testing.assert_close(
                accumulated[name], full[name], rtol=1e-5, atol=1e-6, msg=f"{cls.__name__} {name}"
            )
            moved |= not torch.equal(full[name], start[name])
        assert moved, cls.__name__

    no_dropout: dict = {}  # config overrides that switch dropout off, set by each family

    def test_gradient_checkpointing_matches(self):
        if not self.expensive_checks:
            pytest.skip("checked once per family")
        for cls in self.model_classes:
            inputs = self.make_inputs(cls, labels=True)
            if inputs.get("labels") is None:
                continue
            grads = []
            for checkpointing in (False, True):
                model = self.make_model(cls, **self.no_dropout).train()
                if checkpointing:
                    model.activation_checkpointing_enable()
                    assert model.is_activation_checkpointing
                model(**inputs).loss.backward()
                grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
            assert grads[0].keys() == grads[1].keys()
            for name in grads[0]:
                torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-6, msg=name)

    # ---------------------------------------------------------------- returned states and attentions
    def test_returned_states_are_the_tensors_the_output_used(self):
        """Every hidden state, attention map and alignment a model returns is a tensor its output was computed
        from, so gradient attribution and probing read it (transformers' test_retain_grad_hidden_states_attentions,
        extended to every returned tensor): a copy made on the side receives no gradient."""
        for cls in self.model_classes:
            model = self.make_model(cls, attn_implementation="eager")
            inputs = self.make_inputs(cls)
            out = model(**inputs, output_hidden_states=True, output_attentions=True)
            returned = {}
            for name, value in out.items():
                if name.endswith(("hidden_states", "attentions")) and isinstance(value, tuple):
                    returned |= {f"{name}[{i}]": tensor for i, tensor in enumerate(value)}
                elif name == "alignments" and value is not None:
                    returned[name] = value
            assert any("hidden_states" in name for name in returned), cls.__name__
            for tensor in returned.values():
                tensor.retain_grad()
            main_output(out).sum().backward()
            unused = [name for name, tensor in returned.items() if tensor.grad is None]
            assert not unused, f"{cls.__name__}: the output was not computed from {unused}"

    def returned_hidden_states(self, model, inputs) -> dict[str, tuple]:
        """Every `*hidden_states` tuple a model returns when asked, by name."""
        with torch.no_grad():
            out = model(**inputs, output_hidden_states=True)
        return {n: v for n, v in out.items() if n.endswith("hidden_states") and isinstance(v, tuple)}

    @staticmethod
    def hidden_layers(config, name: str) -> int:
        """The layers whose outputs `name` holds: an encoder-decoder's `encoder_layers` / `decoder_layers`, else
        `num_hidden_layers`."""
        side = name.split("_")[0] if name != "hidden_states" else ""
        return getattr(config, f"{side}_layers", config.num_hidden_layers)

    def test_hidden_states_are_the_embedding_output_then_one_a_layer(self):
        """transformers' convention (its test_hidden_states_output): layers + 1 states, the first the embedding output
        the first layer reads. That one depends on the embeddings alone: changing every other parameter leaves it as
        it was and moves the next one."""
        for cls in self.model_classes:
            model = self.make_model(cls)
            inputs = self.make_inputs(cls)
            before = self.returned_hidden_states(model, inputs)
            assert before, f"{cls.__name__} returns no hidden states"
            embeddings = {id(p) for p in model.get_input_embeddings().parameters()}
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if id(param) not in embeddings and "embed" not in name:  # token, position, type embeddings
                        param.add_(torch.randn_like(param) * 0.5)
            after = self.returned_hidden_states(model, inputs)
            for name, states in before.items():
                layers = self.hidden_layers(model.config, name)
                assert len(states) == layers + 1, f"{cls.__name__}.{name}: {len(states)} states for {layers} layers"
                assert torch.equal(after[name][0], states[0]), f"{cls.__name__}.{name}[0] is not the embedding output"
                assert not torch.allclose(after[name][1], states[1]), f"{cls.__name__}.{name}[1] is not a layer's"

    def test_hidden_states_are_as_wide_as_the_model(self):
        """All `hidden_size` wide, as in transformers; where a family differs, the difference is its page's and is
        spelled out in `hidden_state_widths`."""
        for cls in self.model_classes:
            model = self.make_model(cls)
            for name, states in self.returned_hidden_states(model, self.make_inputs(cls)).items():
                widths = [state.shape[-1] for state in states]
                expected = self.hidden_state_widths(model.config, name)
                assert widths == expected, f"{cls.__name__}.{name}: widths {widths}, expected {expected}"

    def hidden_state_widths(self, config, name: str) -> list[int]:
        """The widths of the states `name` holds: the embedding output (`embedding_size` where a family embeds in its
        own width, as the recurrent ones do), then one a layer: `hidden_size`, both directions side by side in a
        bidirectional recurrent layer, `decoder_hidden_size` in a decoder that has its own."""
        side = name.split("_")[0] if name != "hidden_states" else ""
        bidirectional = "encoder_bidirectional" if side == "encoder" else "bidirectional"
        both = getattr(config, bidirectional, False)
        width = getattr(config, "decoder_hidden_size", None) if side == "decoder" else None
        width = width or config.hidden_size * (2 if both else 1)
        first = getattr(config, "embedding_size", None) or config.hidden_size
        return [first] + [width] * self.hidden_layers(config, name)

    def test_inputs_embeds_give_what_input_ids_give(self):
        """transformers' test_inputs_embeds_matches_input_ids: the input embeddings' lookup, passed as
        `inputs_embeds`, gives what `input_ids` give; and a decoder-only LM generates from it the tokens it
        generates after the ids (its test_generate_from_inputs_embeds: only the new tokens come back)."""
        for cls in self.model_classes:
            model = self.make_model(cls)
            inputs = self.make_inputs(cls)
            with torch.no_grad():
                embeds = model.get_input_embeddings()(inputs["input_ids"])
            from_embeds = {k: v for k, v in inputs.items() if k != "input_ids"} | {"inputs_embeds": embeds}
            torch.testing.assert_close(
                self.forward_main(model, from_embeds), self.forward_main(model, inputs), msg=cls.__name__
            )
        if self.lm_class is None or self.is_encoder_decoder:
            return
        model = self.make_model(self.lm_class)
        inputs = self.generate_inputs()
        with torch.no_grad():
            embeds = model.get_input_embeddings()(inputs["input_ids"])
        for kwargs in ({"do_sample": False}, {"do_sample": False, "num_beams": 2}):
            if "num_beams" in kwargs and not self.supports_beam_search:
                continue
            new = self.generate(model, {"inputs_embeds": embeds, "attention_mask": inputs["attention_mask"]}, **kwargs)
            assert torch.equal(new, self.generate(model, inputs, **kwargs)[:, -6:]), kwargs

    def test_output_attentions_under_sdpa_as_transformers_does(self):
        """Asked for attention maps while running a fused kernel that does not form them, every family answers as
        transformers' own models do in the installed version (measured here on BERT): today an empty tuple."""
        if not getattr(self.model_classes[0], "_supports_sdpa", False):
            pytest.skip("no attention kernels")
        reference = transformers.BertModel(
            transformers.BertConfig(
                vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8
            ),
        ).eval()
        reference.set_attn_implementation("sdpa")
        expected = reference(torch.ones(1, 3, dtype=torch.long), output_attentions=True).attentions
        for cls in self.model_classes:
            model = self.make_model(cls)
            model.set_attn_implementation("sdpa")
            with torch.no_grad():
                out = model(**self.make_inputs(cls), output_attentions=True)
            fields = {name: value for name, value in out.items() if name.endswith("attentions")}
            assert fields, f"{cls.__name__} returned no attentions"
            for name, value in fields.items():
                assert type(value) is type(expected) and len(value) == len(expected), (cls.__name__, name, value)
            model.set_attn_implementation("eager")
            with torch.no_grad():
                out = model(**self.make_inputs(cls), output_attentions=True)
            for name in fields:
                assert len(out[name]) > 0 and all(torch.is_tensor(a) for a in out[name]), (cls.__name__, name)

    # ---------------------------------------------------------------- bad input
    def test_wrong_mask_shape_is_refused(self):
        for cls in self.model_classes:
            model = self.make_model(cls)
            inputs = self.make_inputs(cls)
            inputs["attention_mask"] = inputs["attention_mask"][:, :-1]
            with pytest.raises(ValueError, match="attention_mask"):
                model(**inputs)

    def test_sequence_past_the_limit_is_refused(self):
        if not self.has_position_limit:
            pytest.skip("no position limit")
        cls = self.model_classes[0]
        model = self.make_model(cls)
        limit = model.config.max_position_embeddings
        ids = self.random_ids(1, limit + 1)
        inputs = {"input_ids": ids}
        if self.is_encoder_decoder:
            inputs["decoder_input_ids"] = ids[:, :2]
        with pytest.raises(ValueError, match="max_position_embeddings"):
            model(**inputs)


def general_step_inputs(model, input_ids, **kwargs) -> dict:
    """transformers' own prepare_inputs_for_generation, with the cache under the name the families take (transformers
    5.24 names it `cache`, before it `past_key_values`)."""
    from transformers.generation.utils import GenerationMixin

    inputs = GenerationMixin.prepare_inputs_for_generation(model, input_ids, **kwargs)
    if "cache" in inputs:
        inputs["past_key_values"] = inputs.pop("cache")
    return inputs
