r"""BERT: a bidirectional Transformer encoder (Devlin et al. 2019), built from the shared layers.

$$
\begin{aligned}
h_0 &= \mathrm{LN}(E[x] + P[\text{positions}] + S[\text{token types}]) \qquad \text{(pre-LN: no LN here)} \\
h_l &= \mathrm{LN}(h_{l-1} + \mathrm{Attn}(h_{l-1})) \\
h_l &= \mathrm{LN}(h_l + \mathrm{FFN}(h_l)) \qquad \text{post-LN; pre-LN: } h + f(\mathrm{LN}(h)) \text{, a final LN} \\
p(x_t \mid x_{\ne t}) &= \mathrm{softmax}(E\, \mathrm{LN}(\mathrm{act}(W_t h_{L,t})) + b)
    \qquad \text{masked LM: the output matrix is } E \text{, tied}
\end{aligned}
$$

Every token attends to every other real token (no causal mask): that is what lets a masked token be predicted from
both sides, and why the model encodes rather than generates.
"""

from functools import partial

import torch
from torch import nn
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .attention import MultiHeadAttention
from .configuration_bert import BERTConfig
from .layers import FeedForward, ResidualLayer, make_norm
from .utils import (
    CheckedPreTrainedModel,
    IndexOutOfRangeError,
    check_attention_mask,
    check_input_ids,
    positions_from_attention_mask,
    sequence_classification_loss,
)

# The activation of the MLM head's transform; a gated FFN (swiglu) has no single-input form, so its gate's SiLU is used.
HEAD_ACTIVATIONS = {
    "gelu": nn.functional.gelu,
    "gelu_new": partial(nn.functional.gelu, approximate="tanh"),
    "relu": nn.functional.relu,
    "swiglu": nn.functional.silu,
}


class BERTEmbeddings(nn.Module):
    """Word + learned absolute position + token type (segment) embeddings."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        # Post-LN normalises the sum (every block input is normalised); pre-LN normalises inside each block instead.
        post = config.norm_position == "post"
        self.norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps) if post else nn.Identity()
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, inputs_embeds, position_ids, token_type_ids):
        hidden_states = (
            inputs_embeds + self.position_embeddings(position_ids) + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.norm(hidden_states))  # (B, T, C)


class BERTBlock(GradientCheckpointingLayer, ResidualLayer):
    def __init__(self, config: BERTConfig, layer_idx: int):
        super().__init__(config.norm_position, config.hidden_dropout)
        self.input_layernorm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)
        self.self_attn = MultiHeadAttention(config, layer_idx, is_causal=False)
        self.post_attention_layernorm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)
        self.mlp = FeedForward(config.hidden_size, config.intermediate_size, config.hidden_act, bias=config.mlp_bias)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        x = hidden_states  # (B, T, C)
        attn, _ = self.self_attn(self.sublayer_input(x, self.input_layernorm), attention_mask, **kwargs)
        x = self.residual(x, attn, self.input_layernorm)
        mlp = self.mlp(self.sublayer_input(x, self.post_attention_layernorm))
        return self.residual(x, mlp, self.post_attention_layernorm)


class BERTPooler(nn.Module):
    def __init__(self, config: BERTConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, first_token_states):
        return torch.tanh(self.dense(first_token_states))  # (B, C)


class BERTLMHead(nn.Module):
    """The masked-LM head: a transform (dense, activation, norm), then the vocabulary projection, whose weight is the
    word embedding matrix (tied) and whose bias is the head's own."""

    def __init__(self, config: BERTConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = HEAD_ACTIVATIONS[config.hidden_act]
        self.norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=True)

    def forward(self, hidden_states):
        return self.decoder(self.norm(self.activation(self.dense(hidden_states))))  # (..., V)


class BERTPreTrainedModel(CheckedPreTrainedModel):
    config_class = BERTConfig
    base_model_prefix = "model"
    _backbone_optional_keys = (r"^(model\.)?pooler\.",)  # masked-LM pretraining does not train the pooler
    supports_gradient_checkpointing = True
    _no_split_modules = ["BERTEmbeddings", "BERTBlock"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True


class BERTModel(BERTPreTrainedModel):
    """The encoder stack; returns the final hidden states (B, T, C) and, with the pooler, tanh(W h_[CLS] + b) (B, C),
    the sequence summary BERT's classifier reads (pretrained by next-sentence prediction in the paper)."""

    # hidden_states: the input of the first block, then each block's output (the last one after the final norm)
    _can_record_outputs = {"hidden_states": BERTBlock, "attentions": OutputRecorder(MultiHeadAttention, index=1)}

    def __init__(self, config: BERTConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BERTEmbeddings(config)
        self.layers = nn.ModuleList(BERTBlock(config, i) for i in range(config.num_hidden_layers))
        pre = config.norm_position == "pre"
        self.norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps) if pre else nn.Identity()
        self.pooler = BERTPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        """`token_type_ids` (default all 0) mark sentence A (0) and B (1) of a pair, as the tokenizer returns them.
        Positions count real tokens only, so a left-padded row reads as it would alone."""
        config = self.config
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("BERTModel: pass exactly one of input_ids or inputs_embeds.")
        check_input_ids(input_ids, inputs_embeds, self.embeddings.word_embeddings.num_embeddings)
        if token_type_ids is not None:
            check_input_ids(token_type_ids, None, config.type_vocab_size, name="token_type_ids")
        if inputs_embeds is None:
            inputs_embeds = self.embeddings.word_embeddings(input_ids)
        batch_size, seq_len = inputs_embeds.shape[:2]
        check_attention_mask(attention_mask, batch_size, seq_len)
        if seq_len > config.max_position_embeddings:
            raise IndexOutOfRangeError(
                f"BERTModel: {seq_len} tokens exceed max_position_embeddings={config.max_position_embeddings}; "
                "truncate the input (tokenizer(..., truncation=True, max_length=...))."
            )
        if position_ids is None:
            position_ids = positions_from_attention_mask(attention_mask, 0, seq_len, inputs_embeds.device)
        if token_type_ids is None:
            token_type_ids = torch.zeros(batch_size, seq_len, dtype=torch.long, device=inputs_embeds.device)

        hidden_states = self.embeddings(inputs_embeds, position_ids, token_type_ids)
        # None when nothing is padded (sdpa then runs unmasked); else a (B, 1, T, T) mask hiding the pad keys.
        mask = create_bidirectional_mask(config=config, inputs_embeds=hidden_states, attention_mask=attention_mask)

        if config.output_attentions if output_attentions is None else output_attentions:
            kwargs["output_attentions"] = True  # a kernel that forms no weights says so, as in transformers
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=mask, **kwargs)
        hidden_states = self.norm(hidden_states)
        pooled = None
        if self.pooler is not None:
            # The first real token ([CLS]): slot 0 with right padding, after the pads with left padding.
            first = torch.zeros(batch_size, dtype=torch.long, device=hidden_states.device)
            if attention_mask is not None and attention_mask.dim() == 2:
                first = attention_mask.long().argmax(-1)
            pooled = self.pooler(hidden_states[torch.arange(batch_size, device=hidden_states.device), first])
        return BaseModelOutputWithPooling(last_hidden_state=hidden_states, pooler_output=pooled)


class BERTForMaskedLM(BERTPreTrainedModel):
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.model = BERTModel(config, add_pooling_layer=False)
        self.lm_head = BERTLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        full_logits: bool = False,
        **kwargs,
    ) -> MaskedLMOutput:
        """`labels`: the original id at each masked position and -100 elsewhere (what
        `DataCollatorForLanguageModeling` returns); the loss is the cross-entropy over the masked positions.

        In training with labels, the head runs only where a label is not -100 (about 15% of the tokens): the vocabulary
        projection and its (tokens, V) logits are most of a small BERT's work, and the other positions' logits would
        be computed only to be ignored. The loss and its gradients are those of the full computation, and `logits`
        is then (N, V) for the N scored positions, in the order of `labels[labels != -100]`. Without labels, in eval
        mode, or with `full_logits=True`, `logits` is (B, T, V) for every position."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if labels is not None and self.training and not full_logits:
            scored = labels.ne(-100)
            hidden_states, labels = hidden_states[scored], labels[scored]  # (N, H), (N,)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            # transformers' masked-LM loss ignores -100 and divides by Trainer's `num_items_in_batch` when given, so
            # gradient accumulation equals the full batch.
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


def _classifier_dropout(config: BERTConfig) -> nn.Dropout:
    return nn.Dropout(config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout)


class BERTForSequenceClassification(BERTPreTrainedModel):
    """Classifies (or regresses) a sequence or pair from the pooled [CLS] state. The loss follows
    `config.problem_type` as in transformers: `regression` (MSE; the default when num_labels == 1),
    `single_label_classification` (cross-entropy; integer labels), `multi_label_classification` (binary
    cross-entropy per label; float 0/1 labels of shape (B, num_labels))."""

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = BERTModel(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.pooler_output))  # (B, num_labels)
        loss = None
        if labels is not None:
            loss = sequence_classification_loss(self.loss_function, logits, labels, self.config, num_items_in_batch)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class BERTForTokenClassification(BERTPreTrainedModel):
    """One label per token (e.g. named entities); label -100 (special tokens, continuation subwords) is ignored."""

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = BERTModel(config, add_pooling_layer=False)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, config=self.config, **kwargs)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class BERTForQuestionAnswering(BERTPreTrainedModel):
    """Extractive QA (the paper's SQuAD head): for the input `[CLS] question [SEP] context [SEP]`, a start and an end
    score per token; the answer is the best-scoring context span (see the `hf-seq-question-answering` pipeline)."""

    def __init__(self, config: BERTConfig):
        super().__init__(config)
        self.model = BERTModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        """`start_positions`, `end_positions`: (B,) token indices of the answer span; indices past the sequence are
        ignored by the loss."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).unbind(-1)  # 2 x (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions, **kwargs)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


__all__ = [
    "BERTPreTrainedModel",
    "BERTModel",
    "BERTForMaskedLM",
    "BERTForSequenceClassification",
    "BERTForTokenClassification",
    "BERTForQuestionAnswering",
]
