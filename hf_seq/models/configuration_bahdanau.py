"""Configuration of the RNN encoder-decoder with attention (Bahdanau, Cho and Bengio 2015, "Neural Machine
Translation by Jointly Learning to Align and Translate"), with Luong et al.'s (2015) score functions and the
attention-free encoder-decoder of Cho et al. (2014) / Sutskever et al. (2014) as variants."""

from transformers import PreTrainedConfig

from .config_utils import check_choice, check_positive, check_probability, fill_auto_map, reject_misspelled_options

CELL_TYPES = ("gru", "lstm")
ATTENTION_TYPES = ("additive", "dot", "general", "none")


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
    - `num_hidden_layers`: depth of the encoder (each layer bidirectional) and of the decoder (the paper: 1).
    - `maxout` (default True): the deep output t_i = max-pool of pairs of 2l linear units (Goodfellow et al. 2013);
      False: t_i = tanh of l units. l = `deep_output_size`.
    - `scheduled_sampling` (Bengio et al. 2015): in training, the probability that the decoder reads its own
      sampled prediction instead of the true previous token (1 - epsilon_i in their notation; 0 = teacher forcing).
      A training loop may change it between steps to follow one of their decay schedules.
    - Dropout (not in the paper): `embedding_dropout` on both embeddings, `hidden_dropout` between stacked layers,
      `output_dropout` on the deep output t_i.
    - `tie_word_embeddings`: one matrix for the source embeddings, the target embeddings and the output layer W_o
      (one shared vocabulary; needs deep_output_size == embedding_size). The paper has two vocabularies: False.
    - `initializer_range`: the std of the paper's N(0, 0.01^2) initialisation (appendix B.1); the alignment matrices
      W_a, U_a start at a tenth of it, v_a and the biases at 0, the recurrent matrices random orthogonal.
    """

    model_type = "hf_seq_bahdanau"
    keys_to_ignore_at_inference = ["past_key_values", "alignments"]
    attribute_map = {"num_layers": "num_hidden_layers", "d_model": "hidden_size"}

    vocab_size: int = 30000
    embedding_size: int = 620
    hidden_size: int = 1000
    decoder_hidden_size: int | None = None
    attention_size: int | None = None
    deep_output_size: int = 500
    num_hidden_layers: int = 1
    cell_type: str = "gru"
    attention_type: str = "additive"
    maxout: bool = True
    scheduled_sampling: float = 0.0
    embedding_dropout: float = 0.0
    hidden_dropout: float = 0.0
    output_dropout: float = 0.0
    initializer_range: float = 0.01
    tie_word_embeddings: bool = False
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = None

    def __post_init__(self, **kwargs):
        reject_misspelled_options(self, kwargs)
        check_choice(self, "cell_type", CELL_TYPES)
        check_choice(self, "attention_type", ATTENTION_TYPES)
        annotation_size = 2 * self.hidden_size if isinstance(self.hidden_size, int) else None
        if self.decoder_hidden_size is None:
            self.decoder_hidden_size = annotation_size if self.attention_type == "dot" else self.hidden_size
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
        check_probability(self, "scheduled_sampling", "embedding_dropout", "hidden_dropout", "output_dropout")
        if self.attention_type == "dot" and self.decoder_hidden_size != annotation_size:
            raise ValueError(
                f"BahdanauConfig: attention_type='dot' scores s_(i-1)^T h_j, so decoder_hidden_size must equal the "
                f"annotation size 2 * hidden_size = {annotation_size}, got {self.decoder_hidden_size}. Leave "
                "decoder_hidden_size unset, or use attention_type='general' (s^T W_a h_j) for other sizes."
            )
        if self.tie_word_embeddings and self.deep_output_size != self.embedding_size:
            raise ValueError(
                f"BahdanauConfig: tie_word_embeddings=True makes the output layer W_o the embedding matrix, so "
                f"deep_output_size ({self.deep_output_size}) must equal embedding_size ({self.embedding_size})."
            )
        if not self.is_encoder_decoder:
            raise ValueError("BahdanauConfig: is_encoder_decoder must be True (this family is an encoder-decoder).")
        super().__post_init__(**kwargs)
        fill_auto_map(self)


__all__ = ["BahdanauConfig"]
