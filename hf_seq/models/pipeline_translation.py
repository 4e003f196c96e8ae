"""Text-to-text pipelines for encoder-decoder models: `translation`, `text2text-generation` and `summarization`.

transformers 5 removed these three tasks. This module is remote code like the models: a saved encoder-decoder folder
carries a copy of it and names its classes in `config.json` (`custom_pipelines`), so where hf-seq is not installed

    pipeline("translation", model="path/to/folder", trust_remote_code=True)("the cat sat on the mat")

builds `TranslationPipeline` from the folder. `import hf_seq` registers the same classes for every
`AutoModelForSeq2SeqLM` (see `hf_seq.pipelines.text2text`). It imports only torch and transformers.
"""

import torch
from transformers import GenerationConfig, Pipeline


class Text2TextGenerationPipeline(Pipeline):
    """Tokenize each text, `model.generate()` from it, decode. Generation options (`num_beams`, `max_new_tokens`,
    `do_sample`, `length_penalty`, `num_return_sequences`, ...) are accepted at construction or per call.

    Returns, for each input, a list with one dict per returned sequence: `{"<name>_text": str}`, or
    `{"<name>_token_ids": tensor}` with `return_tensors=True`. A list of inputs that asks for one sequence each gets
    one dict per input."""

    return_name = "generated"
    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True
    # Used only where neither the call nor the model's generation config sets them.
    _default_generation_config = GenerationConfig(max_new_tokens=256)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if getattr(self.model.generation_config, "max_length_a", None) is not None:
            # hf-seq models limit each output relative to its source (a x source tokens + b): no fixed default
            self._generation_defaults.pop("max_new_tokens", None)

    def _sanitize_parameters(
        self, truncation=None, return_tensors=None, return_text=None, clean_up_tokenization_spaces=None, **generate
    ):
        preprocess_params = {} if truncation is None else {"truncation": truncation}
        postprocess_params = {}
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        if return_text is not None:
            postprocess_params["return_tensors"] = not return_text
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, generate, postprocess_params

    def __call__(self, inputs, **kwargs):
        """`inputs`: a text or a list of texts (sources). See the class docstring for what comes back."""
        result = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(one) == 1 for one in result):
            return [one[0] for one in result]
        return result

    def preprocess(self, text, truncation=False):
        if not isinstance(text, str):
            raise TypeError(f"{type(self).__name__} takes a text or a list of texts, got {type(text).__name__}.")
        return self.tokenizer(text, return_tensors="pt", truncation=truncation)

    def _forward(self, model_inputs, **generate_kwargs):
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **self._prepare_generate_kwargs(generate_kwargs))
        # (B * n, T) -> (B, n, T): the pipeline splits the batch into items along the first dimension.
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def postprocess(self, model_outputs, return_tensors=False, clean_up_tokenization_spaces=False):
        sequences: torch.Tensor = model_outputs["output_ids"][0]  # (n, T) for this input
        if return_tensors:
            return [{f"{self.return_name}_token_ids": ids} for ids in sequences]
        texts = self.tokenizer.batch_decode(
            sequences, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
        )
        return [{f"{self.return_name}_text": text} for text in texts]


class TranslationPipeline(Text2TextGenerationPipeline):
    """Translate texts with a sequence-to-sequence model; returns `translation_text`."""

    return_name = "translation"


class SummarizationPipeline(Text2TextGenerationPipeline):
    """Summarize texts with a sequence-to-sequence model; returns `summary_text`."""

    return_name = "summary"


TASKS = {
    "text2text-generation": Text2TextGenerationPipeline,
    "translation": TranslationPipeline,
    "summarization": SummarizationPipeline,
}


def custom_pipelines() -> dict[str, dict]:
    """The `custom_pipelines` entry of a saved folder's config.json: task -> this module's class, for
    `AutoModelForSeq2SeqLM`."""
    module = __name__.rsplit(".", 1)[-1]
    return {
        task: {"impl": f"{module}.{cls.__name__}", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
        for task, cls in TASKS.items()
    }


__all__ = [
    "SummarizationPipeline",
    "TASKS",
    "Text2TextGenerationPipeline",
    "TranslationPipeline",
    "custom_pipelines",
]
