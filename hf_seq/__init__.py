"""hf-seq: the lineage of sequence models, from Elman's RNN to GPT, as Hugging Face transformers models."""

from .models.configuration_bahdanau import BahdanauConfig
from .models.configuration_bert import BERTConfig
from .models.configuration_gpt import GPTConfig
from .models.configuration_rnn import RNNConfig
from .models.configuration_transformer import TransformerConfig
from .models.configuration_window import WindowConfig
from .models.modeling_bahdanau import BahdanauForConditionalGeneration, BahdanauModel, BahdanauState
from .models.modeling_bert import (
    BERTForMaskedLM,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
    BERTModel,
)
from .models.modeling_gpt import GPTForCausalLM, GPTForSequenceClassification, GPTModel
from .models.modeling_rnn import (
    RNNForCausalLM,
    RNNForSequenceClassification,
    RNNForTokenClassification,
    RNNModel,
)
from .models.modeling_transformer import TransformerForConditionalGeneration, TransformerModel
from .models.modeling_window import WindowForCausalLM, WindowModel, WindowState
from .models.state import RecurrentState
from .pipelines import register_pipelines
from .qa import register_qa_pipeline
from .registry import FAMILIES, register

register()
register_qa_pipeline()  # extractive question answering, which transformers 5 removed
register_pipelines()  # translation / text2text-generation / summarization, which transformers 5 removed

__version__ = "0.1.0"

__all__ = [
    "FAMILIES",
    "BahdanauConfig",
    "BahdanauForConditionalGeneration",
    "BahdanauModel",
    "BahdanauState",
    "BERTConfig",
    "BERTForMaskedLM",
    "BERTForQuestionAnswering",
    "BERTForSequenceClassification",
    "BERTForTokenClassification",
    "BERTModel",
    "GPTConfig",
    "GPTForCausalLM",
    "GPTForSequenceClassification",
    "GPTModel",
    "RNNConfig",
    "RNNForCausalLM",
    "RNNForSequenceClassification",
    "RNNForTokenClassification",
    "RNNModel",
    "RecurrentState",
    "TransformerConfig",
    "TransformerForConditionalGeneration",
    "TransformerModel",
    "WindowConfig",
    "WindowForCausalLM",
    "WindowModel",
    "WindowState",
]
