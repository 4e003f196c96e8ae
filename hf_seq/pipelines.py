"""Text-to-text pipelines for encoder-decoder models: `translation`, `text2text-generation` and `summarization`.

transformers 5 removed these three tasks: `pipeline("translation", ...)` raises a KeyError that points to chat
models. hf-seq's sequence-to-sequence families (the Transformer, Bahdanau's RNN) are exactly what those tasks were
for, so `import hf_seq` registers them again for any `AutoModelForSeq2SeqLM`:

    translator = pipeline("translation", model=model, tokenizer=tokenizer)     # or model="path/to/folder"
    translator("the cat sat on the mat", num_beams=4, max_new_tokens=40)
    # [{'translation_text': '...'}]

transformers checks a task name against its table of removed tasks before its registry, so registering a task is not
enough: the names registered here are also taken off that table. Only these exact names work; the old parametrised
form `translation_en_to_fr` stays removed (pass `"translation"`).
"""

import torch
from transformers import AutoModelForSeq2SeqLM, GenerationConfig, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY, REMOVED_TASKS


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


def register_pipelines() -> None:
    """Idempotent: register the three tasks with transformers' pipeline registry, for `AutoModelForSeq2SeqLM`."""
    for task, pipeline_class in TASKS.items():
        REMOVED_TASKS.pop(task, None)
        if PIPELINE_REGISTRY.supported_tasks.get(task, {}).get("impl") is not pipeline_class:
            PIPELINE_REGISTRY.register_pipeline(
                task, pipeline_class=pipeline_class, pt_model=AutoModelForSeq2SeqLM, type="text"
            )


__all__ = [
    "SummarizationPipeline",
    "TASKS",
    "Text2TextGenerationPipeline",
    "TranslationPipeline",
    "register_pipelines",
]
