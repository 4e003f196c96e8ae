"""Extractive question answering with a span head (`BERTForQuestionAnswering`, or any model that
`AutoModelForQuestionAnswering` loads). transformers 5 removed its question-answering pipeline; importing hf_seq
registers the task `"hf-seq-question-answering"` in its place:

    qa = pipeline("hf-seq-question-answering", model="path/to/bert-qa")      # a folder with model + tokenizer
    qa(question="Who sat?", context="The cat sat on the mat.")
    # {'score': 0.83, 'start': 0, 'end': 7, 'answer': 'The cat'}

The input is encoded as `[CLS] question [SEP] context [SEP]`. A context longer than the model's window is split
into overlapping windows (`doc_stride` tokens of overlap); the best span of any window wins. A span (s, e) of context
tokens scores p_start(s) * p_end(e), each a softmax over the window's context tokens, with s <= e and at most
`max_answer_length` tokens (Devlin et al. 2019, section 4.2). `start` and `end` are character offsets in the context.
"""

import torch
from transformers import AutoModelForQuestionAnswering, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY

TASK = "hf-seq-question-answering"


def best_span(
    start_logits: torch.Tensor, end_logits: torch.Tensor, allowed: torch.Tensor, max_answer_length: int
) -> tuple[int, int, float]:
    """The best (start, end, score) over one window: logits (T,), `allowed` (T,) True on context tokens."""
    start_p = start_logits.float().masked_fill(~allowed, -float("inf")).softmax(-1)
    end_p = end_logits.float().masked_fill(~allowed, -float("inf")).softmax(-1)
    scores = start_p[:, None] * end_p[None, :]  # (T, T): row = start, column = end
    scores = scores.triu().tril(max_answer_length - 1)  # start <= end < start + max_answer_length
    flat = int(scores.argmax())
    start, end = divmod(flat, scores.shape[1])
    return start, end, float(scores[start, end])


class QuestionAnsweringPipeline(Pipeline):
    """`qa(question=..., context=...)`, `qa({"question": ..., "context": ...})` or a list of such dicts.
    Options: `max_answer_length` (tokens, default 30), `doc_stride` (overlap of windows, default a quarter of the
    window), `max_length` (window size, default the tokenizer's and model's limit)."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False

    def __call__(self, inputs=None, **kwargs):
        if inputs is None:
            inputs = {"question": kwargs.pop("question"), "context": kwargs.pop("context")}
        return super().__call__(inputs, **kwargs)

    def _sanitize_parameters(self, max_answer_length=None, doc_stride=None, max_length=None):
        preprocess = {k: v for k, v in (("doc_stride", doc_stride), ("max_length", max_length)) if v is not None}
        postprocess = {"max_answer_length": max_answer_length} if max_answer_length is not None else {}
        return preprocess, {}, postprocess

    def preprocess(self, inputs, doc_stride=None, max_length=None):
        if not isinstance(inputs, dict) or not {"question", "context"} <= inputs.keys():
            raise ValueError(
                f"{TASK}: give question=... and context=..., or a dict with those keys; got {inputs!r:.80}."
            )
        question, context = inputs["question"], inputs["context"]
        if max_length is None:
            max_length = min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings)
        question_length = len(self.tokenizer(question)["input_ids"])  # with [CLS] and [SEP]
        room = max_length - question_length - 1  # context tokens per window, before its final [SEP]
        if room < 2:
            raise ValueError(f"{TASK}: the question takes {question_length} of the {max_length} tokens of a window.")
        doc_stride = min(room // 4 if doc_stride is None else doc_stride, room - 1)
        encoded = self.tokenizer(
            question,
            context,
            truncation="only_second",
            max_length=max_length,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=True,
            return_tensors="pt",
        )
        windows = encoded["input_ids"].shape[0]
        context_tokens = torch.tensor(
            [[sequence == 1 for sequence in encoded.sequence_ids(i)] for i in range(windows)]
        )  # (windows, T)
        model_inputs = {k: encoded[k] for k in self.tokenizer.model_input_names if k in encoded}
        return {
            "model_inputs": model_inputs,
            "offsets": encoded["offset_mapping"],
            "context_tokens": context_tokens,
            "context": context,
        }

    def _forward(self, inputs):
        output = self.model(**inputs["model_inputs"])
        return {**inputs, "start_logits": output.start_logits, "end_logits": output.end_logits}

    def postprocess(self, outputs, max_answer_length=30):
        best = None
        for window in range(outputs["start_logits"].shape[0]):
            start, end, score = best_span(
                outputs["start_logits"][window],
                outputs["end_logits"][window],
                outputs["context_tokens"][window],
                max_answer_length,
            )
            if best is None or score > best[0]:
                offsets = outputs["offsets"][window]
                best = (score, int(offsets[start][0]), int(offsets[end][1]))
        score, start_char, end_char = best
        context = outputs["context"]
        return {"score": score, "start": start_char, "end": end_char, "answer": context[start_char:end_char]}


def register_qa_pipeline() -> None:
    """Idempotent: register the task with transformers' pipeline registry, for `AutoModelForQuestionAnswering`."""
    if PIPELINE_REGISTRY.supported_tasks.get(TASK, {}).get("impl") is not QuestionAnsweringPipeline:
        PIPELINE_REGISTRY.register_pipeline(
            TASK, pipeline_class=QuestionAnsweringPipeline, pt_model=AutoModelForQuestionAnswering, type="text"
        )


register_qa_pipeline()  # importing this module registers (hf_seq imports it with transformers.pipelines)

__all__ = ["TASK", "QuestionAnsweringPipeline", "best_span", "register_qa_pipeline"]
