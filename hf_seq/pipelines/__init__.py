"""The pipeline tasks that transformers 5 removed, registered when transformers' pipelines are imported:
`translation`, `text2text-generation` and `summarization` for encoder-decoders (`text2text`), and extractive
question answering (`qa`)."""

from hf_seq.faces import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "text2text": [
            "SummarizationPipeline",
            "Text2TextGenerationPipeline",
            "TranslationPipeline",
            "register_pipelines",
        ],
        "qa": ["QuestionAnsweringPipeline", "best_span", "register_qa_pipeline"],
    },
)
