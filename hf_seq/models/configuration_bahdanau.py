"""Configuration of the RNN encoder-decoder with attention (Bahdanau, Cho and Bengio 2015, "Neural Machine
Translation by Jointly Learning to Align and Translate"), with Luong et al.'s (2015) score functions and the
attention-free encoder-decoder of Cho et al. (2014) / Sutskever et al. (2014) as variants."""

from transformers import PreTrainedConfig

from .config_utils import (
    check_choice,
    check_common_values,
    check_positive,
    check_probability,
    fill_auto_map,
    resolve_options,
)
from .seq2seq import drop_pipelines_registered_here

CELL_TYPES = ("gru", "lstm")
ATTENTION_TYPES = ("additive", "dot", "general", "none")
BRIDGES = ("bahdanau", "final_state", "linear", "zeros")
DECODER_INPUTS = ("embedding", "embedding_and_context")
OUTPUT_LAYERS = ("deep", "linear")


class BahdanauConfig(PreTrainedConfig):
    """A bidirectional recurrent encoder and an attentive recurrent decoder. The defaults are the paper's RNNsearch
    (appendix A.2 and B): 30k-word vocabularies, 620-dimensional embeddings, 1000 GRU units per direction in the
    encoder and 1000 in the decoder, an alignment model of 1000 hidden units, and a deep output with a maxout layer
    of 500 units. Each choice can be changed:

    - `cell_type`: `gru` (Cho et al. 2014, the paper's gated unit) or `lstm` (Hochreiter and Schmidhuber 1997).
    - `attention_type`, the score e_ij between the decoder state s_{i-1} and the annotation h_j:
        `additive`  e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)     (Bahdanau et al. 2015, the paper)
        `general`   e_ij = s_{i-1}^T W_a h_j                       (Luong et al. 2015's bilinear score)
        `dot`       e_ij = s_{i-1}^T h_j                           (Luong et al. 2015; s and h_j of one size)
        `none`      no alignment: every step reads one fixed context, the final encoder states (the encoder-decoder
                    of Cho et al. 2014 and Sutskever et al. 2014, whose fixed-size summary is the bottleneck
                    attention removes).
      `dot` and `general` swap the score only: the data flow stays Bahdanau's (the score reads s_{i-1}, the context
      enters the recurrence), not Luong's full model (which scores s_i and adds an attentional layer).
    - `hidden_size` (n): units per direction of the encoder. `decoder_hidden_size` (default n; 2n for `dot`, whose
      score compares s with the 2n-dimensional annotations directly). `attention_size` (n', default n): hidden units
      of the additive alignment model. `embedding_size` (m): word embeddings, source and target.
    - `num_hidden_layers`: depth of the encoder (each layer bidirectional unless `encoder_bidirectional=False`) and
      of the decoder (the paper: 1; Sutskever et al.: 4).
    - `maxout` (default True): the deep output t_i = max-pool of pairs of 2l linear units (Goodfellow et al. 2013);
      False: t_i = tanh of l units. l = `deep_output_size`.
    - `scheduled_sampling` (Bengio et al. 2015): in training, the probability that the decoder reads its own
      sampled prediction instead of the true previous token (1 - epsilon_i in their notation; 0 = teacher forcing).
      A training loop may change it between steps to follow one of their decay schedules.
    - Dropout (not in the paper): `embedding_dropout` on both embeddings, `hidden_dropout` between stacked layers,
      `output_dropout` on the deep output t_i, `source_word_dropout` zeroes whole source token embeddings (Sennrich
      and Zhang 2019).
    - `tie_word_embeddings`: one matrix for the source embeddings, the target embeddings and the output layer W_o
      (one shared vocabulary; needs deep_output_size == embedding_size). The paper has two vocabularies: False.
      With `source_vocab_size` set, only the target embeddings and W_o are tied.
    - `source_vocab_size`: the source vocabulary, when the two sides do not share a tokenizer (None: the source
      shares `vocab_size`, the target vocabulary).
    - `label_smoothing`: epsilon of the label-smoothed cross-entropy (Szegedy et al. 2016; 0 = plain).

    The classic encoder-decoder without attention (Sutskever, Vinyals and Le 2014; Cho et al. 2014) is the same
    family with five switches, each changing one equation of the module docstring of `modeling_bahdanau.py`:

    - `encoder_bidirectional` (default True): False reads the source left to right only (annotation size n, not 2n).
    - `reverse_source` (default False): the encoder reads each source backwards (Sutskever et al. 2014, section 3.3:
      "reversing the order of the words in all source sentences"). Annotations and alignments stay in source order.
    - `bridge`, how the decoder's first state s_0 comes from the encoder:
        `bahdanau`     s_0 = tanh(W_s <-h_1), the backward state at the first source word (Bahdanau et al. 2015,
                       appendix A.2.2); with a unidirectional encoder tanh(W_s h_S), Cho et al. 2014's tanh(V' c)
        `final_state`  s_0^l = the encoder's final state of layer l, as it is ([->h_S; <-h_1] when bidirectional),
                       and the LSTM's cell too (Sutskever et al. 2014): needs decoder_hidden_size = the encoder's
                       state size (the default)
        `linear`       s_0^l = W_b^l h^l_final + b^l (and c_0^l = W_c^l c^l_final + b^l for an LSTM)
        `zeros`        s_0 = 0: the decoder reads the source through the context only
    - `decoder_input`: `embedding_and_context` (default) s_i = f(s_{i-1}, [E y_{i-1}; c_i]), the context at every
      step (Bahdanau 2015; Cho et al. 2014 feed the summary c at every step); `embedding` s_i = f(s_{i-1}, E y_{i-1})
      (Sutskever et al. 2014).
    - `output_layer`: `deep` (default) Bahdanau's deep output t_i from s_i, E y_{i-1} and c_i, then W_o t_i;
      `linear` logits = W_o s_i + b_o (Sutskever et al. 2014), tied to the target embeddings with
      tie_word_embeddings (needs decoder_hidden_size == embedding_size).
    Sutskever et al.'s model: attention_type="none", encoder_bidirectional=False, reverse_source=True,
    bridge="final_state", decoder_input="embedding", output_layer="linear", cell_type="lstm", num_hidden_layers=4.
    - `initializer_range`: the std of the paper's N(0, 0.01^2) initialisation (appendix B.1); the alignment matrices
      W_a, U_a start at a tenth of it, v_a and the biases at 0, the recurrent matrices random orthogonal.
    - `fused_loss` (default True): in training with labels, the loss is computed from the last hidden states in
      chunks of tokens (models/losses.py) without holding the (tokens x vocabulary) logits, and the output's
      `logits` is None; False computes and returns them. Evaluation (eval mode, no_grad) always returns them.
    """

    model_type = "hf_seq_bahdanau"
    keys_to_ignore_at_inference = ["past_key_values", "alignments"]
    attribute_map = {"num_layers": "num_hidden_layers", "d_model": "hidden_size", "cell": "cell_type"}
    option_groups = {"dropout": ("embedding_dropout", "hidden_dropout", "output_dropout")}  # `dropout=p` sets all

    vocab_size: int = 30000
    embedding_size: int = 620
    hidden_size: int = 1000
    decoder_hidden_size: int | None = None
    attention_size: int | None = None
    deep_output_size: int = 500
    num_hidden_layers: int = 1
    cell_type: str = "gru"
    attention_type: str = "additive"
    encoder_bidirectional: bool = True
    reverse_source: bool = False
    bridge: str = "bahdanau"
    decoder_input: str = "embedding_and_context"
    output_layer: str = "deep"
    source_vocab_size: int | None = None
    label_smoothing: float = 0.0
    maxout: bool = True
    scheduled_sampling: float = 0.0
    embedding_dropout: float = 0.0
    hidden_dropout: float = 0.0
    output_dropout: float = 0.0
    source_word_dropout: float = 0.0
    initializer_range: float = 0.01
    tie_word_embeddings: bool = False
    fused_loss: bool = True
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = None

    def __post_init__(self, **kwargs):
        drop_pipelines_registered_here(kwargs)
        resolve_options(self, kwargs)
        check_choice(self, "cell_type", CELL_TYPES)
        check_choice(self, "attention_type", ATTENTION_TYPES)
        check_choice(self, "bridge", BRIDGES)
        check_choice(self, "decoder_input", DECODER_INPUTS)
        check_choice(self, "output_layer", OUTPUT_LAYERS)
        annotation_size = self.annotation_size if isinstance(self.hidden_size, int) else None
        if self.decoder_hidden_size is None:
            reads_annotation_size = self.attention_type == "dot" or self.bridge == "final_state"
            self.decoder_hidden_size = annotation_size if reads_annotation_size else self.hidden_size
        if self.attention_size is None:
            self.attention_size = self.hidden_size
        check_positive(
            self,
            "vocab_size",
            "embedding_size",
            "hidden_size",
            "decoder_hidden_size",
            "attention_size",
            "deep_output_size",
            "num_hidden_layers",
        )
        if self.source_vocab_size is not None:
            check_positive(self, "source_vocab_size")
        check_probability(
            self,
            "scheduled_sampling",
            "embedding_dropout",
            "hidden_dropout",
            "output_dropout",
            "label_smoothing",
            "source_word_dropout",
        )
        self._check_combinations(annotation_size)
        if not self.is_encoder_decoder:
            raise ValueError("BahdanauConfig: is_encoder_decoder must be True (this family is an encoder-decoder).")
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)

    @property
    def annotation_size(self) -> int:
        """The size of an annotation h_j and of the context c_i: 2n for a bidirectional encoder, else n."""
        return (2 if self.encoder_bidirectional else 1) * self.hidden_size

    def _check_combinations(self, annotation_size: int) -> None:
        """Reject flag combinations whose equations do not fit together, saying why."""
        d = self.decoder_hidden_size
        states = "[->h; <-h], 2 * hidden_size" if self.encoder_bidirectional else "h, hidden_size"
        if self.attention_type == "dot" and d != annotation_size:
            raise ValueError(
                f"BahdanauConfig: attention_type='dot' scores s_(i-1)^T h_j, so decoder_hidden_size must equal the "
                f"annotation size ({states}) = {annotation_size}, got {d}. Leave decoder_hidden_size unset, or use "
                "attention_type='general' (s^T W_a h_j) for other sizes."
            )
        if self.bridge == "final_state" and d != annotation_size:
            raise ValueError(
                f"BahdanauConfig: bridge='final_state' starts each decoder layer from the encoder's final state of "
                f"that layer as it is ({states} = {annotation_size}), so decoder_hidden_size must equal "
                f"{annotation_size}, got {d}. Leave decoder_hidden_size unset, or use bridge='linear' to map between "
                "the sizes."
            )
        if self.output_layer == "linear" and self.decoder_input == "embedding" and self.attention_type != "none":
            raise ValueError(
                f"BahdanauConfig: with decoder_input='embedding' and output_layer='linear' the context c_i of "
                f"attention_type={self.attention_type!r} would reach neither the recurrence nor the output. Use "
                "decoder_input='embedding_and_context', output_layer='deep', or attention_type='none'."
            )
        if self.bridge == "zeros" and self.decoder_input == "embedding" and self.output_layer == "linear":
            raise ValueError(
                "BahdanauConfig: bridge='zeros' with decoder_input='embedding' and output_layer='linear' gives a "
                "decoder that never reads the source. Start the decoder from the encoder (bridge='final_state', "
                "'linear' or 'bahdanau') or feed it the context."
            )
        output_size = self.deep_output_size if self.output_layer == "deep" else d
        output_name = (
            "deep_output_size" if self.output_layer == "deep" else "decoder_hidden_size (output_layer='linear')"
        )
        if self.tie_word_embeddings and output_size != self.embedding_size:
            raise ValueError(
                f"BahdanauConfig: tie_word_embeddings=True makes the output layer W_o the embedding matrix, so "
                f"{output_name} ({output_size}) must equal embedding_size ({self.embedding_size})."
            )


__all__ = ["BahdanauConfig"]
