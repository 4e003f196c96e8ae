import pytest
import torch

from hf_seq import TransformerConfig, TransformerForConditionalGeneration
from tests.tester import ModelTesterMixin


class TestTransformer(ModelTesterMixin):
    family = "hf_seq_transformer"
    config_kwargs = dict(
        hidden_size=32,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    no_dropout = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    is_encoder_decoder = True
