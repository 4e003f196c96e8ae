"""The one table of hf-seq families. `import hf_seq` registers each family with `AutoConfig` and the `Auto*`
classes it supports, and records the full `auto_map` that `save_pretrained` writes for remote-code loading.
The test suite iterates the same table, so a registered model without a tester fails the suite."""

import importlib
from dataclasses import dataclass

import transformers


@dataclass(frozen=True)
class Family:
    name: str  # the file pair models/configuration_<name>.py, models/modeling_<name>.py
    model_type: str
    config: str
    models: dict[str, str]  # transformers Auto class -> model class name

    @property
    def config_class(self):
        return getattr(importlib.import_module(f"hf_seq.models.configuration_{self.name}"), self.config)

    def model_class(self, auto_class: str):
        return getattr(importlib.import_module(f"hf_seq.models.modeling_{self.name}"), self.models[auto_class])

    @property
    def auto_map(self) -> dict[str, str]:
        return {
            "AutoConfig": f"configuration_{self.name}.{self.config}",
            **{auto: f"modeling_{self.name}.{model}" for auto, model in self.models.items()},
        }


FAMILIES: tuple[Family, ...] = (
    Family(
        "rnn",
        "hf_seq_rnn",
        "RNNConfig",
        {
            "AutoModel": "RNNModel",
            "AutoModelForCausalLM": "RNNForCausalLM",
            "AutoModelForSequenceClassification": "RNNForSequenceClassification",
            "AutoModelForTokenClassification": "RNNForTokenClassification",
        },
    ),
    Family(
        "gpt",
        "hf_seq_gpt",
        "GPTConfig",
        {
            "AutoModel": "GPTModel",
            "AutoModelForCausalLM": "GPTForCausalLM",
            "AutoModelForSequenceClassification": "GPTForSequenceClassification",
        },
    ),
    Family(
        "bert",
        "hf_seq_bert",
        "BERTConfig",
        {
            "AutoModel": "BERTModel",
            "AutoModelForMaskedLM": "BERTForMaskedLM",
            "AutoModelForSequenceClassification": "BERTForSequenceClassification",
            "AutoModelForTokenClassification": "BERTForTokenClassification",
            "AutoModelForQuestionAnswering": "BERTForQuestionAnswering",
        },
    ),
    Family(
        "transformer",
        "hf_seq_transformer",
        "TransformerConfig",
        {"AutoModel": "TransformerModel", "AutoModelForSeq2SeqLM": "TransformerForConditionalGeneration"},
    ),
    Family(
        "bahdanau",
        "hf_seq_bahdanau",
        "BahdanauConfig",
        {"AutoModel": "BahdanauModel", "AutoModelForSeq2SeqLM": "BahdanauForConditionalGeneration"},
    ),
    Family(
        "window",
        "hf_seq_window",
        "WindowConfig",
        {"AutoModel": "WindowModel", "AutoModelForCausalLM": "WindowForCausalLM"},
    ),
)


def family(model_type: str) -> Family:
    for fam in FAMILIES:
        if fam.model_type == model_type or fam.name == model_type:
            return fam
    raise KeyError(f"unknown hf-seq family {model_type!r}; known: {[f.model_type for f in FAMILIES]}")


def register() -> None:
    """Idempotent: safe to call (and to import hf_seq) any number of times."""
    for fam in FAMILIES:
        config_class = fam.config_class
        transformers.AutoConfig.register(fam.model_type, config_class, exist_ok=True)
        config_class.family_auto_map = fam.auto_map
        config_class.register_for_auto_class("AutoConfig")
        for auto_name in fam.models:
            model_class = fam.model_class(auto_name)
            getattr(transformers, auto_name).register(config_class, model_class, exist_ok=True)
            if model_class._auto_class is None:
                model_class.register_for_auto_class(auto_name)
