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

The pipeline classes live in `models/pipeline_translation.py`, the remote-code side: a saved folder carries that
module and names it in its config, so `pipeline("translation", model=folder, trust_remote_code=True)` also works where
hf-seq is not installed. Here, the folder's copy is not needed: the registered classes serve it.
"""

from transformers import AutoModelForSeq2SeqLM
from transformers.pipelines import PIPELINE_REGISTRY, REMOVED_TASKS

from hf_seq.models.pipeline_translation import (
    TASKS,
    SummarizationPipeline,
    Text2TextGenerationPipeline,
    TranslationPipeline,
)


def register_pipelines() -> None:
    """Idempotent: register the three tasks with transformers' pipeline registry, for `AutoModelForSeq2SeqLM`."""
    for task, pipeline_class in TASKS.items():
        REMOVED_TASKS.pop(task, None)
        if PIPELINE_REGISTRY.supported_tasks.get(task, {}).get("impl") is not pipeline_class:
            PIPELINE_REGISTRY.register_pipeline(
                task, pipeline_class=pipeline_class, pt_model=AutoModelForSeq2SeqLM, type="text"
            )


register_pipelines()  # importing this module registers (hf_seq imports it with transformers.pipelines)

__all__ = [
    "SummarizationPipeline",
    "TASKS",
    "Text2TextGenerationPipeline",
    "TranslationPipeline",
    "register_pipelines",
]
