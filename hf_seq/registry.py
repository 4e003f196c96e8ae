"""The one table of hf-seq families. `import hf_seq` registers each family with `AutoConfig` and the `Auto*`
classes it supports, and records the full `auto_map` that `save_pretrained` writes for remote-code loading.
The test suite iterates the same table, so a registered model without a tester fails the suite.

Registration is lazy, so that `import hf_seq` costs next to nothing and `hf-seq --help` never imports torch:

- the configs register with `AutoConfig` when transformers' `configuration_auto` module is imported (the first use
  of any Auto class), or at once if it already is;
- each model class registers with its Auto classes by name when `modeling_auto` is imported, and is imported on its
  first lookup (`AutoModel.from_config`, `from_pretrained`, `pipeline`, `hf_seq.GPTModel`). A modeling module pulls
  in transformers' `PreTrainedModel`, generation and attention code: seconds of CPU that a config check, a `--help`
  or a script that trains one family should not pay for every family."""

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from dataclasses import dataclass, field


def self_attention_flops(config, seq_len: int) -> int:
    """12 L d s per token: each layer's attention scores (q . k over s keys, d multiply-adds each) and their weighted
    sum of s values, forward and backward (x 2 x 3, as for the parameters in compute.py)."""
    return 12 * config.num_hidden_layers * config.hidden_size * seq_len


def encoder_decoder_attention_flops(config, source_len: float, target_len: float) -> float:
    """Per token of a pair of S source and T target tokens: 12 L_enc d S per source token (encoder self-attention)
    and 12 L_dec d (T + S) per target token (decoder self- and cross-attention), over the pair's S + T tokens."""
    d = config.hidden_size
    pair = 12 * config.encoder_layers * d * source_len * source_len
    pair += 12 * config.decoder_layers * d * (target_len + source_len) * target_len
    return pair / (source_len + target_len)


@dataclass(frozen=True)
class Family:
    """One row of the table: a family's file pair, its `model_type`, its config class and, for each transformers
    Auto class it supports, the model class that serves it. Adding a row registers the family with those Auto
    classes, gives it a tester in the suite, a page on the documentation site and its models' views in the studio."""

    name: str  # the file pair models/configuration_<name>.py, models/modeling_<name>.py
    model_type: str
    config: str
    models: dict[str, str]  # transformers Auto class -> model class name
    # Training FLOPs per token that no parameter count holds (compute.py): the attention scores and their weighted
    # sums, from the config and the lengths of a training example, (config, seq_len) for a model over one sequence,
    # (config, source_len, target_len) for an encoder-decoder. None: no attention, or one left out as the
    # state-space scan's elementwise work is (Bahdanau's additive score, a few percent).
    attention_flops: Callable[..., float] | None = None
    # What the studio (hf_seq.studio) shows of the family's models beyond the views every causal language model gets:
    # kind -> the names of the views that read it (studio/views.py). A model's kind is its family's name, or where
    # one config field decides what can be shown (`kind_field`), that field's value, each listed (a kind with no views
    # of its own still gets the language-model views): the ssm family's models are "mamba", "s4d" or "mamba2" by
    # `config.ssm_type`, and only S4D has a convolution kernel to show.
    studio_views: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kind_field: str | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of model the studio tells apart in this family."""
        return tuple(self.studio_views) if self.kind_field else (self.name,)

    def kind_of(self, config) -> str:
        """The studio's kind of a model of this family, from its config."""
        return str(getattr(config, self.kind_field)) if self.kind_field else self.name

    @property
    def config_class(self):
        """The config class, given the family's full `auto_map` (see `config_utils.fill_auto_map`)."""
        config_class = getattr(importlib.import_module(f"hf_seq.models.configuration_{self.name}"), self.config)
        if config_class._auto_class is None:
            config_class.family_auto_map = self.auto_map
            config_class.register_for_auto_class("AutoConfig")
        return config_class

    def model_class(self, auto_class: str):
        return getattr(self.modeling_module(), self.models[auto_class])

    def modeling_module(self):
        """Import models/modeling_<name>.py and mark each model class for its Auto class, so that `save_pretrained`
        copies the code next to the weights (`register_for_auto_class`)."""
        module = importlib.import_module(f"hf_seq.models.modeling_{self.name}")
        for auto_name, name in self.models.items():
            model_class = getattr(module, name)
            if model_class._auto_class is None:
                model_class.register_for_auto_class(auto_name)
        return module

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
            "AutoModelForTimeSeriesPrediction": "RNNForPrediction",
        },
        studio_views={"rnn": ("recurrent",)},
    ),
    Family(
        "gpt",
        "hf_seq_gpt",
        "GPTConfig",
        {
            "AutoModel": "GPTModel",
            "AutoModelForCausalLM": "GPTForCausalLM",
            "AutoModelForSequenceClassification": "GPTForSequenceClassification",
            "AutoModelForTimeSeriesPrediction": "GPTForPrediction",
        },
        attention_flops=self_attention_flops,
        studio_views={"gpt": ("attention",)},
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
        attention_flops=self_attention_flops,
        studio_views={"bert": ("attention", "fill")},
    ),
    Family(
        "transformer",
        "hf_seq_transformer",
        "TransformerConfig",
        {"AutoModel": "TransformerModel", "AutoModelForSeq2SeqLM": "TransformerForConditionalGeneration"},
        attention_flops=encoder_decoder_attention_flops,
        studio_views={"transformer": ("attention", "cross")},
    ),
    Family(
        "bahdanau",
        "hf_seq_bahdanau",
        "BahdanauConfig",
        {"AutoModel": "BahdanauModel", "AutoModelForSeq2SeqLM": "BahdanauForConditionalGeneration"},
        studio_views={"bahdanau": ("alignment",)},
    ),
    Family(
        "window",
        "hf_seq_window",
        "WindowConfig",
        {
            "AutoModel": "WindowModel",
            "AutoModelForCausalLM": "WindowForCausalLM",
            "AutoModelForTimeSeriesPrediction": "WindowForPrediction",
        },
    ),
    Family(
        "ssm",
        "hf_seq_ssm",
        "SSMConfig",
        {
            "AutoModel": "SSMModel",
            "AutoModelForCausalLM": "SSMForCausalLM",
            "AutoModelForSequenceClassification": "SSMForSequenceClassification",
            "AutoModelForTimeSeriesPrediction": "SSMForPrediction",
        },
        studio_views={"mamba": ("ssm",), "s4d": ("ssm", "scan"), "mamba2": ("mamba2_attention",)},
        kind_field="ssm_type",
    ),
    Family(
        "conv",
        "hf_seq_conv",
        "ConvConfig",
        {
            "AutoModel": "ConvModel",
            "AutoModelForCausalLM": "ConvForCausalLM",
            "AutoModelForTimeSeriesPrediction": "ConvForPrediction",
        },
    ),
    Family("hmm", "hf_seq_hmm", "HMMConfig", {"AutoModel": "HMMModel", "AutoModelForCausalLM": "HMMForCausalLM"}),
)


def family(model_type: str) -> Family:
    for fam in FAMILIES:
        if fam.model_type == model_type or fam.name == model_type:
            return fam
    raise KeyError(f"unknown hf-seq family {model_type!r}; known: {[f.model_type for f in FAMILIES]}")


class _Deferred:
    """A model class not imported yet: the Auto mapping imports it on its first lookup."""

    def __init__(self, fam: Family, auto_name: str):
        self.fam, self.auto_name = fam, auto_name

    def load(self):
        return self.fam.model_class(self.auto_name)


class _DeferredClasses(dict):
    """The `_extra_content` dict of a transformers Auto mapping (config class -> model class, where `register` puts
    models from outside transformers), with `_Deferred` values resolved on read. Every way transformers reads it
    (`[]`, `get`, `values`, `items`, `dict(...)`) goes through `__getitem__`; `in` needs no import."""

    def __getitem__(self, key):
        value = super().__getitem__(key)
        if isinstance(value, _Deferred):
            value = value.load()
            super().__setitem__(key, value)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def values(self):
        return [self[key] for key in self]

    def items(self):
        return [(key, self[key]) for key in self]

    def __iter__(self):  # overriding it makes dict(self) and {**self} read values through __getitem__
        return super().__iter__()


def register_configs() -> None:
    from transformers import AutoConfig

    for fam in FAMILIES:
        AutoConfig.register(fam.model_type, fam.config_class, exist_ok=True)


def register_models() -> None:
    """Each model class by name (`_Deferred`), imported on its first lookup."""
    import transformers

    for fam in FAMILIES:
        config_class = fam.config_class
        for auto_name in fam.models:
            mapping = getattr(transformers, auto_name)._model_mapping
            if not isinstance(mapping._extra_content, _DeferredClasses):
                mapping._extra_content = _DeferredClasses(mapping._extra_content)
            if config_class not in mapping._extra_content:  # idempotent; keeps a class already imported
                dict.__setitem__(mapping._extra_content, config_class, _Deferred(fam, auto_name))


def register() -> None:
    """Register now. Idempotent: safe to call (and to import hf_seq) any number of times."""
    register_configs()
    register_models()


def register_lazily() -> None:
    """What `import hf_seq` does: register when transformers' Auto classes are imported (now, if they are). A config
    or modeling module imported by its own path (`from hf_seq.models.modeling_gpt import GPTModel`) is marked for
    remote code (`auto_map`, `register_for_auto_class`) as soon as it is complete."""
    after_import("transformers.models.auto.configuration_auto", register_configs)
    after_import("transformers.models.auto.modeling_auto", register_models)
    for fam in FAMILIES:
        after_import(f"hf_seq.models.configuration_{fam.name}", lambda fam=fam: fam.config_class)
        after_import(f"hf_seq.models.modeling_{fam.name}", fam.modeling_module)


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Calls back once a module has been imported, by whatever path (`from transformers import pipeline` goes
    through transformers' lazy module). Python has no post-import hook; this finder finds nothing itself, it wraps
    the loader the other finders return for the awaited names."""

    def __init__(self):
        self.waiting: dict[str, list[Callable[[], None]]] = {}

    def find_spec(self, name, path, target=None):
        if name not in self.waiting:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThenCallbacks(spec.loader, self.waiting.pop(name))
        return spec


class _LoaderThenCallbacks(importlib.abc.Loader):
    def __init__(self, loader, callbacks):
        self.loader, self.callbacks = loader, callbacks

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for callback in self.callbacks:
            callback()

    def __getattr__(self, name):  # get_source, get_filename, ...: what tracebacks and inspect ask the loader
        return getattr(self.loader, name)


_after_import = _RunAfterImport()


def after_import(module_name: str, callback: Callable[[], None]) -> None:
    """Run `callback` now if `module_name` is imported, else right after it is."""
    if module_name in sys.modules:
        callback()
        return
    if _after_import not in sys.meta_path:
        sys.meta_path.insert(0, _after_import)
    _after_import.waiting.setdefault(module_name, []).append(callback)
