"""Input checks and index helpers shared by the model families."""

import torch


def check_attention_mask(attention_mask: torch.Tensor | None, batch_size: int, total_length: int) -> None:
    """The mask is (batch, past + new tokens) with 1 on real tokens and 0 on padding, as tokenizers return it.
    A 4D mask is taken as already prepared (transformers' convention, e.g. generate with a static cache)."""
    if attention_mask is None or attention_mask.dim() == 4:
        return
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (batch_size, total_length):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, expected (batch_size, past + input length) = "
            f"({batch_size}, {total_length}): 1 for tokens to attend to, 0 for padding."
        )


def positions_from_attention_mask(
    attention_mask: torch.Tensor | None, past_length: int, seq_len: int, device: torch.device
) -> torch.LongTensor:
    """Positions count real tokens only, so a left-padded row gets the positions it would have alone."""
    if attention_mask is None:
        return torch.arange(past_length, past_length + seq_len, device=device)[None]
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp(min=0)[:, -seq_len:]


def last_token_indices(
    input_ids: torch.LongTensor | None,
    attention_mask: torch.Tensor | None,
    pad_token_id: int | None,
    batch_size: int,
) -> torch.LongTensor | int:
    """Index of each row's last real token, for left or right padding: from the attention mask if given, else from
    the pad token. Without either, a batch of several rows cannot be read correctly, so it is refused."""
    if attention_mask is not None:
        positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
        return (positions * attention_mask.bool()).argmax(-1)
    if input_ids is not None and pad_token_id is not None:
        positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
        return (positions * (input_ids != pad_token_id)).argmax(-1)
    if batch_size != 1:
        raise ValueError(
            "Cannot find the last token of each sequence in a batch without an attention_mask or a pad token: pass "
            "attention_mask (the tokenizer returns it), or set config.pad_token_id (e.g. to the tokenizer's pad id)."
        )
    return -1


def sequence_classification_loss(loss_function, logits, labels, config, num_items_in_batch=None) -> torch.Tensor:
    """transformers' sequence-classification loss (cross-entropy, MSE for regression, BCE for multi-label, chosen
    from `config.problem_type`), exact under Trainer's gradient accumulation: Trainer passes `num_items_in_batch`
    (the labels of the whole accumulated batch) and then leaves the loss unscaled, so the loss must be a sum over
    this micro-batch divided by it. Cross-entropy takes it directly; the MSE and BCE means are rescaled."""
    loss = loss_function(
        logits=logits, labels=labels, pooled_logits=logits, config=config, num_items_in_batch=num_items_in_batch
    )
    if num_items_in_batch is not None and config.problem_type != "single_label_classification":
        loss = loss * labels.numel() / num_items_in_batch
    return loss
