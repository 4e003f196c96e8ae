"""The Bahdanau family: the shared tester (encoder-decoder mode) on every cell and attention type, plus what is
particular to it: the decoder step computes the paper's equations, the alignments are a distribution over the real
source tokens, U_a h_j is computed once per sentence, beam search reorders the decoder state, scheduled sampling,
the translation pipeline, Seq2SeqTrainer, the alignment plot."""

from tests.tester import ModelTesterMixin

NO_DROPOUT = dict(embedding_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0)


class TestBahdanauGRUAdditive(ModelTesterMixin):
    """The paper's model (GRU, additive score, maxout deep output), two layers, with dropout."""

    family = "hf_seq_bahdanau"
    config_kwargs = dict(
        hidden_size=16,
        embedding_size=12,
        attention_size=10,
        deep_output_size=8,
        num_hidden_layers=2,
        embedding_dropout=0.1,
        hidden_dropout=0.1,
        output_dropout=0.1,
        initializer_range=0.3,  # logits far enough from uniform that a changed label moves the loss
    )
    no_dropout = NO_DROPOUT
    is_encoder_decoder = True
    has_position_limit = False


class TestBahdanauGRUDot(TestBahdanauGRUAdditive):
    config_overrides = dict(attention_type="dot")
    expensive_checks = False


class TestBahdanauGRUGeneral(TestBahdanauGRUAdditive):
    config_overrides = dict(attention_type="general", maxout=False)
    expensive_checks = False


class TestBahdanauGRUNone(TestBahdanauGRUAdditive):
    config_overrides = dict(attention_type="none")
    expensive_checks = False


class TestBahdanauLSTMAdditiveTied(TestBahdanauGRUAdditive):
    config_overrides = dict(cell_type="lstm", tie_word_embeddings=True, deep_output_size=12, num_hidden_layers=1)
    expensive_checks = False


class TestBahdanauLSTMDot(TestBahdanauGRUAdditive):
    config_overrides = dict(cell_type="lstm", attention_type="dot")
    expensive_checks = False


class TestBahdanauLSTMGeneral(TestBahdanauGRUAdditive):
    config_overrides = dict(cell_type="lstm", attention_type="general")
    expensive_checks = False


class TestBahdanauLSTMNone(TestBahdanauGRUAdditive):
    config_overrides = dict(cell_type="lstm", attention_type="none", maxout=False)
    expensive_checks = False
