"""The training loop: plain PyTorch driven by `accelerate`, so the same code runs on a CPU, one GPU, or many
processes under `accelerate launch`."""

import math
import time
from dataclasses import dataclass, field

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import default_data_collator, get_scheduler


@dataclass
class TrainResult:
    steps: int
    seconds: float
    tokens: int
    losses: list[float] = field(default_factory=list)  # one per optimizer step

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def decay_parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay matrices, not biases, norms or embeddings' single vectors (GPT-2 / BERT practice)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def train_causal_lm(
    model,
    dataset,
    *,
    max_steps: int,
    batch_size: int = 16,
    learning_rate: float = 1e-3,
    weight_decay: float = 0.1,
    warmup_steps: int = 20,
    scheduler: str = "cosine",
    max_grad_norm: float = 1.0,
    max_seconds: float | None = None,
    seed: int = 0,
    accelerator: Accelerator | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train on packed blocks ({'input_ids', 'labels'}) for `max_steps` AdamW steps, or until `max_seconds`."""
    accelerator = accelerator or Accelerator()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        dataset.with_format("torch"),
        batch_size=batch_size,
        shuffle=True,
        generator=generator,
        collate_fn=default_data_collator,
        drop_last=True,
    )
    if len(loader) == 0:
        raise ValueError(f"the dataset has {len(dataset)} blocks, fewer than one batch of {batch_size}")
    optimizer = torch.optim.AdamW(decay_parameter_groups(model, weight_decay), lr=learning_rate, betas=(0.9, 0.95))
    lr_scheduler = get_scheduler(scheduler, optimizer, num_warmup_steps=warmup_steps, num_training_steps=max_steps)
    model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
    model.train()
    result = TrainResult(steps=0, seconds=0.0, tokens=0)
    bar = tqdm(total=max_steps, desc="training", disable=not (progress and accelerator.is_local_main_process))
    start = time.perf_counter()
    while result.steps < max_steps:
        for batch in loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            if max_grad_norm:
                accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            result.steps += 1
            result.tokens += batch["input_ids"].numel() * accelerator.num_processes
            result.losses.append(accelerator.gather(loss.detach()).mean().item())
            result.seconds = time.perf_counter() - start
            bar.update(1)
            bar.set_postfix(loss=f"{result.losses[-1]:.3f}", tok_s=f"{result.tokens_per_second:,.0f}")
            if result.steps >= max_steps or (max_seconds is not None and result.seconds >= max_seconds):
                bar.close()
                model.eval()
                return result
    bar.close()
    model.eval()
    return result


@torch.no_grad()
def perplexity(model, dataset, batch_size: int = 16) -> float:
    """exp of the mean token cross-entropy over packed blocks."""
    model.eval()
    device = next(model.parameters()).device
    total_loss, total_tokens = 0.0, 0
    for start in range(0, len(dataset), batch_size):
        batch = dataset[start : start + batch_size]
        ids = torch.tensor(batch["input_ids"], device=device)
        predicted = ids[:, 1:].numel()
        total_loss += model(input_ids=ids, labels=ids).loss.item() * predicted
        total_tokens += predicted
    return math.exp(total_loss / total_tokens)
