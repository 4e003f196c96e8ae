"""What the two encoder-decoder families (Bahdanau's RNN, Vaswani's Transformer) share, written once: teacher
forcing (labels shifted right behind the start token), the loss (label smoothing, Trainer's `num_items_in_batch`),
the accessors transformers and generate() call (`get_encoder`, `get_decoder`, the embeddings), resizing a vocabulary
held by up to three matrices, reading `encoder_outputs` given as a tuple, and saving the translation pipeline with
the model so that a folder serves `pipeline("translation", model=folder, trust_remote_code=True)` anywhere.

A family's `*PreTrainedModel` inherits `Seq2SeqPreTrainedMixin`; its base model holds `encoder` and `decoder`, each
with `embed_tokens`, and its `*ForConditionalGeneration` holds the base model under `base_model_prefix` and the
output layer as `lm_head`.

`generate()` limits each translation relative to its source, a x (source tokens) + b tokens (fairseq's `max_len_a`
and `max_len_b`; the generation config's `max_length_a` and `max_length_b`, default 1.2 and 10), unless the call or
the generation config gives `max_new_tokens` or `max_length`: never transformers' fixed 20 tokens.
"""

import math

import torch
from torch import nn
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.modeling_outputs import BaseModelOutput

from .losses import linear_cross_entropy, uses_fused_loss

MAX_LENGTH_A, MAX_LENGTH_B = 1.2, 10  # fairseq's --max-len-a / --max-len-b of its translation examples


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.LongTensor:
    """Teacher forcing: the decoder reads the start token and then the targets but the last, so that its output at
    position t is scored against labels[:, t]. Ignored labels (-100) become padding."""
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


def seq2seq_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float = 0.0,
    num_items_in_batch: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """Cross-entropy of each target token, with labels aligned to the logits (no shift: the decoder inputs are the
    shifted ones) and -100 ignored. With `label_smoothing` = eps the target distribution is (1 - eps) on the label
    plus eps / V everywhere (Szegedy et al. 2016; Vaswani et al. 2017 use eps = 0.1).

    Trainer passes `num_items_in_batch` (the count of scored tokens over all accumulated micro-batches): the loss is
    then a sum divided by it, so gradient accumulation gives exactly the full-batch gradient."""
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]),
        labels.reshape(-1).to(logits.device),
        ignore_index=-100,
        reduction=reduction,
        label_smoothing=label_smoothing,
    )
    if num_items_in_batch is not None:
        loss = loss / (
            num_items_in_batch.to(loss.device) if torch.is_tensor(num_items_in_batch) else num_items_in_batch
        )
    return loss


def as_encoder_output(encoder_outputs, output_class: type[BaseModelOutput] = BaseModelOutput) -> BaseModelOutput:
    """`encoder_outputs` as the encoder returns them with return_dict=True; a tuple (from return_dict=False) is read
    in the output class's field order, skipping the fields that are None, as `to_tuple()` wrote it."""
    if isinstance(encoder_outputs, BaseModelOutput):
        return encoder_outputs
    return output_class(*encoder_outputs)


class Seq2SeqPreTrainedMixin:
    """Accessors and vocabulary resizing for an encoder-decoder base model or its head (see the module docstring)."""

    def get_encoder(self, modality: str | None = None):
        return self.base_model.encoder

    def get_decoder(self):
        return self.base_model.decoder

    def get_input_embeddings(self):
        return self.get_encoder().embed_tokens

    def set_input_embeddings(self, value):
        self.get_encoder().embed_tokens = value
        if self.config.tie_word_embeddings and self._shares_vocabulary:
            self.get_decoder().embed_tokens = value

    def get_output_embeddings(self):
        return getattr(self, "lm_head", None)

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    @property
    def _shares_vocabulary(self) -> bool:
        return getattr(self.config, "source_vocab_size", None) is None

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True):
        """`config.vocab_size` is the target vocabulary (decoder embeddings and output layer). With one vocabulary
        for both sides transformers resizes the source embeddings and an untied output layer; an untied decoder has
        a third matrix, resized here. With a separate source vocabulary only the target side is resized."""
        decoder = self.get_decoder()
        if not self._shares_vocabulary:
            decoder.embed_tokens = self._get_resized_embeddings(
                decoder.embed_tokens, new_num_tokens, pad_to_multiple_of, mean_resizing
            )
            lm_head = self.get_output_embeddings()
            if lm_head is not None and not self.config.tie_word_embeddings:
                self.set_output_embeddings(self._get_resized_lm_head(lm_head, new_num_tokens, mean_resizing))
            return decoder.embed_tokens
        embeddings = super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if decoder.embed_tokens.weight.shape != embeddings.weight.shape:
            decoder.embed_tokens = self._get_resized_embeddings(
                decoder.embed_tokens, new_num_tokens, pad_to_multiple_of, mean_resizing
            )
        return embeddings


class SourceLengthLimit(LogitsProcessor):
    """Ends each output once it holds `limits[i]` tokens (the limit of source sentence i): from then on the only
    token it may take is EOS. Works for every decoding method: the rows of beam search and of several returned
    sequences are the batch's rows repeated in place, each reading its own sentence's limit."""

    def __init__(self, limits: torch.Tensor, eos_token_id: int):
        self.limits, self.eos_token_id, self.start = limits, eos_token_id, None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.start is None:  # the first call sees the decoder prompt only
            self.start = input_ids.shape[1]
        limits = self.limits.to(input_ids.device).repeat_interleave(input_ids.shape[0] // self.limits.shape[0])
        done = limits <= input_ids.shape[1] - self.start
        if done.any():
            eos = scores[done, self.eos_token_id]
            scores[done] = -math.inf
            scores[done, self.eos_token_id] = eos.clamp(min=torch.finfo(scores.dtype).min)
        return scores


class BackToBackRepeatBlock(LogitsProcessor):
    """Forbids a run of 1 to `max_words` whole words repeated back to back ("de entrada de entrada", "Se se"): the
    stutter an attention decoder writes when it translates one source phrase twice (over-translation, Tu et al.
    2016). References of natural prose almost never do that (0.2% of the manuals' Spanish test references, all
    typos), so the constraint only removes what a translation should not hold.

    A narrower form of the n-gram blocking of Paulus et al. (2018) and OpenNMT's `block_ngram_repeat` (Klein et
    al. 2017; transformers' `no_repeat_ngram_size`), which forbid an n-gram of tokens anywhere in the output: that
    also forbids a translation from naming a phrase twice, while the repetition here is of whole words at once, and
    counts words where those count subword tokens (a one-word stutter is often one token).

    Once the output ends in a unit of whole words twice as tokens ("Ġde Ġentrada Ġde Ġentrada"), its next token must
    continue the last word into another one ("Ġentrada" + "s"); a word start, punctuation and EOS are forbidden. So
    "en entornos" (`Ġen Ġen tornos`) stays possible: a repeat is only known once the second copy's last word ends.

    `word_start` (V,) bool: the tokens that begin a word (byte-level BPE's `Ġ`; the output's first token always
    does). `word_key` (V,) long: tokens of one text once lowercased and without their space marker share a key
    (`la`, `Ġla`, `ĠLa`), so a repeat in another case, or of the output's first word, is one too; None: the token
    ids. `word_inside` (V,) bool: the tokens that continue a word (a letter or digit first, no space); None: the
    tokens that do not begin one. Rows are sequences or beams alike; the first call sees the decoder prompt."""

    def __init__(
        self,
        word_start: torch.Tensor,
        max_words: int = 4,
        word_key: torch.Tensor | None = None,
        word_inside: torch.Tensor | None = None,
    ):
        self.word_start, self.max_words, self.start = word_start, max_words, None
        self.word_key = word_key if word_key is not None else torch.arange(len(word_start))
        self.word_inside = word_inside if word_inside is not None else ~word_start
        self.max_tokens = 6 * max_words  # a longer run of tokens is rarely a few words

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.start is None:
            self.start = input_ids.shape[1]
        out = input_ids[:, self.start :]  # (R, T): the output so far
        length = out.shape[1]
        starts, keys = self.word_start.to(out.device)[out], self.word_key.to(out.device)[out]
        if length:
            starts[:, 0] = True
        repeated = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
        for n in range(1, min(self.max_tokens, length // 2) + 1):
            first, second = slice(length - 2 * n, length - n), slice(length - n, length)  # the last 2n tokens
            same = (keys[:, first] == keys[:, second]).all(-1) & (starts[:, first] == starts[:, second]).all(-1)
            repeated |= same & starts[:, first][:, 0] & (starts[:, first].sum(-1) <= self.max_words)  # whole words
        if repeated.any():
            scores = scores.masked_fill(repeated[:, None] & ~self.word_inside.to(scores.device), -math.inf)
        return scores


def source_lengths(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, pad_token_id: int | None):
    """The number of real tokens of each source row."""
    if attention_mask is not None:
        return attention_mask.sum(-1)
    if pad_token_id is None:
        return torch.full(input_ids.shape[:1], input_ids.shape[1], device=input_ids.device)
    return input_ids.ne(pad_token_id).sum(-1)


class Seq2SeqLMMixin(Seq2SeqPreTrainedMixin):
    """Teacher forcing, the loss, output lengths relative to the source and saving with the translation pipeline, for
    a `*ForConditionalGeneration`."""

    def post_init(self):
        super().post_init()
        for name, value in (("max_length_a", MAX_LENGTH_A), ("max_length_b", MAX_LENGTH_B)):
            if getattr(self.generation_config, name, None) is None:
                setattr(self.generation_config, name, value)

    def generate(self, inputs=None, generation_config=None, logits_processor=None, **kwargs):
        """transformers' `generate()`, with each output limited to `max_length_a` x its source tokens +
        `max_length_b` (from the call, else the generation config) unless a `max_new_tokens` or `max_length` is
        given: the batch runs to the longest limit, every sentence stops at its own."""
        config = generation_config if generation_config is not None else self.generation_config
        asked = "max_length_a" in kwargs or "max_length_b" in kwargs  # the call's own rule beats the config's limit
        a = kwargs.pop("max_length_a", getattr(config, "max_length_a", None))
        b = kwargs.pop("max_length_b", getattr(config, "max_length_b", None))
        fixed = any(kwargs.get(name) is not None for name in ("max_new_tokens", "max_length"))
        fixed = fixed or (
            not asked and any(getattr(config, n, None) is not None for n in ("max_new_tokens", "max_length"))
        )
        source = inputs if inputs is not None else kwargs.get("input_ids")
        if a is None or b is None or fixed or not torch.is_tensor(source):
            return super().generate(inputs, generation_config, logits_processor, **kwargs)
        for name, value in (("max_length_a", a), ("max_length_b", b)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"generate: {name} must be a number >= 0, got {value!r}.")
        eos = kwargs.get("eos_token_id", getattr(config, "eos_token_id", None))
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        lengths = source_lengths(source, kwargs.get("attention_mask"), self.config.pad_token_id)
        limits = (a * lengths.float() + b).ceil().long().clamp(min=1)
        kwargs["max_new_tokens"] = int(limits.max()) + 1  # room for the EOS after the longest
        processors = LogitsProcessorList(logits_processor or [])
        if eos is not None:
            processors.append(SourceLengthLimit(limits, eos))
        return super().generate(inputs, generation_config, processors, **kwargs)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.LongTensor:
        """Called by `DataCollatorForSeq2Seq` and by `forward` when only labels are given."""
        config = self.config
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.bos_token_id
        if start is None or config.pad_token_id is None:
            raise ValueError(
                f"{type(self).__name__}: building decoder_input_ids from labels needs config.decoder_start_token_id "
                "(or bos_token_id) and config.pad_token_id."
            )
        return shift_tokens_right(labels, config.pad_token_id, start)

    def logits_and_loss(self, features, labels=None, logits_to_keep: int | torch.Tensor = 0, num_items_in_batch=None):
        """logits = lm_head(features) over the positions `logits_to_keep` selects (0: all), and the loss of `labels`
        (aligned with the features, -100 ignored) with the config's label smoothing, or None without labels. In
        training with labels and `config.fused_loss`, the loss is computed without the logits (models/losses.py),
        which are then None."""
        smoothing = getattr(self.config, "label_smoothing", 0.0)
        if uses_fused_loss(self, labels, logits_to_keep):
            loss = linear_cross_entropy(
                features.reshape(-1, features.shape[-1]),
                self.lm_head.weight,
                self.lm_head.bias,
                labels.reshape(-1),
                label_smoothing=smoothing,
                num_items_in_batch=num_items_in_batch,
            )
            return None, loss
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(features[:, keep, :])  # (B, T, V)
        loss = None
        if labels is not None:
            loss = seq2seq_loss(logits, labels, smoothing, num_items_in_batch)
        return logits, loss

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Also records the text-to-text pipelines in `config.json` (`custom_pipelines`) and copies their module
        beside the modeling code: transformers 5 has no translation pipeline, and a folder loaded where hf-seq is not
        installed brings its own (`pipeline("translation", model=folder, trust_remote_code=True)`)."""
        # transformers' pipelines first: whatever runs on their import (`import hf_seq` registers its pipelines,
        # from that very module) must not find the module below half imported.
        import transformers.pipelines  # noqa: F401

        from .pipeline_translation import custom_pipelines  # a relative import: saving copies the module

        previous = getattr(self.config, "custom_pipelines", None)
        self.config.custom_pipelines = custom_pipelines()
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            if previous is None:
                del self.config.custom_pipelines
            else:
                self.config.custom_pipelines = previous


def drop_pipelines_registered_here(config_kwargs: dict) -> None:
    """For a config's `__post_init__`: forget the folder's `custom_pipelines` when this process already serves every
    one of their tasks (`import hf_seq` registers them), so that `pipeline("translation", model=folder)` uses the
    registered pipeline without asking for `trust_remote_code`. Where hf-seq is not installed, they are kept."""
    tasks = config_kwargs.get("custom_pipelines")
    if not tasks:
        return
    import sys

    pipelines = sys.modules.get("transformers.pipelines")
    if pipelines is None:
        return
    supported = pipelines.PIPELINE_REGISTRY.supported_tasks
    if all(name in supported and name not in pipelines.REMOVED_TASKS for name in tasks):
        config_kwargs.pop("custom_pipelines")


__all__ = [
    "MAX_LENGTH_A",
    "MAX_LENGTH_B",
    "BackToBackRepeatBlock",
    "Seq2SeqLMMixin",
    "SourceLengthLimit",
    "Seq2SeqPreTrainedMixin",
    "as_encoder_output",
    "drop_pipelines_registered_here",
    "seq2seq_loss",
    "shift_tokens_right",
]
