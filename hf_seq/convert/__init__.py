"""Weights to and from the `transformers` reference classes, where the architectures agree, with identical outputs.

    ours = from_transformers(GPT2LMHeadModel.from_pretrained("gpt2"))    # -> GPTForCausalLM
    reference = to_transformers(ours)                                     # -> GPT2LMHeadModel
    bert = from_transformers("path/to/bert")   # a folder saved by transformers (BertForMaskedLM) -> BERTForMaskedLM

The pairs: GPT-2 <-> GPT (`gpt2.py`), BERT <-> BERT (`bert.py`), MarianMT <-> the encoder-decoder Transformer
(`marian.py`), Mamba <-> the SSM family's mamba block (`mamba.py`). Each is one module that declares the
correspondence once, and `base.py` reads it in both directions:

- `FIELDS`, our config field -> the reference's (`{"hidden_size": "n_embd", ...}`; `same(...)` for fields named
  alike), copied both ways;
- `FIXED`, our fields the reference cannot vary (`{"norm_position": "pre", ...}`: set on the way in, required on the
  way out), and `REFERENCE_FIXED`, the reference fields we cannot vary (required on the way in, set on the way out);
- value tables such as `ACTIVATIONS` (the reference's name -> ours), and small `derive_ours` / `derive_reference`
  functions for what renaming cannot say (GPT-2's `n_inner=None`);
- the weight rules, a function of our config listing each of our tensors and the reference tensors it is made of
  (`Rule`, `module_rules`): a copy, a transpose (GPT-2's Conv1D), q, k and v stacked into our fused projection
  (`"concat"`), or reference tensors with no counterpart (`"reference_only"`).

These make a `ConfigMap`, and `register(ReferenceClass, OurClass, config_map, rules)` adds a pair to `CONVERSIONS`.
Every refusal goes through `require`: it names the parameter, its value and what is allowed. A new pair is one such
module, imported below; `mamba.py` is the model. A pair whose configs a `ConfigMap` cannot describe may still pass
its own two config functions: `register_conversion(Conversion(reference, ours, config_to_ours, config_to_reference,
rules))`.

`from_state_dict(state_dict, config)` (`classic.py`) ports a plain PyTorch RNN encoder-decoder (no transformers class
exists for it) into the Bahdanau family, whose flags represent the classic models exactly (see its docstring for the
mapping).
"""

from .base import (
    ACTIVATIONS,
    CONVERSIONS,
    ConfigMap,
    Conversion,
    Rule,
    from_transformers,
    module_rules,
    register,
    register_conversion,
    require,
    same,
    to_transformers,
)
from .classic import CLASSIC_NAMES, from_state_dict

# isort: split
# After base, which loads transformers' model classes before our models load theirs; each registers its pairs.
from . import bert, gpt2, mamba, mamba2, marian  # noqa: E402, F401

__all__ = [
    "ACTIVATIONS",
    "CLASSIC_NAMES",
    "CONVERSIONS",
    "ConfigMap",
    "Conversion",
    "Rule",
    "from_state_dict",
    "from_transformers",
    "module_rules",
    "register",
    "register_conversion",
    "require",
    "same",
    "to_transformers",
]
