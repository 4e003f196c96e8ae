"""Fully sharded data parallelism (FSDP2: `torch.distributed.fsdp.fully_shard`) for the training loop.

Asked for the ecosystem's way: `accelerate launch --config_file recipes/accelerate/fsdp.yaml ...` exports the
config as `ACCELERATE_USE_FSDP` / `FSDP_*` variables to every process. hf-seq then shards the model itself, on a CPU
(where accelerate keeps FSDP for GPUs and falls back to plain data parallelism over gloo) and on GPUs alike, so
that the one path is the one the tests run:

- every module whose class the model names in `_no_split_modules` (transformers' convention, what accelerate's
  TRANSFORMER_BASED_WRAP reads: GPT and BERT blocks, the Transformer's layers, the recurrent layers, the SSM and
  WaveNet blocks), or in the config's `fsdp_transformer_layer_cls_to_wrap`, becomes one FSDP unit, and the root
  takes the rest (embeddings, the tied output layer); each process holds 1/P of every parameter, gradient and
  AdamW moment, and a unit's parameters are gathered only around its forward and backward;
- the parameters stay fp32 and `training.mixed_precision` autocasts the compute, as in the unsharded runs, so a
  sharded run trains the same model as one process (to float rounding);
- checkpoints hold each process's shard of the weights and of the AdamW state as safetensors
  (`model_shard_<rank>.safetensors`, `optimizer_shard_<rank>.safetensors`): no pickle, and resuming needs the same
  number of processes; the finished run gathers the whole model once into one `model.safetensors`.
"""

import os
from dataclasses import dataclass

import torch
from safetensors.torch import load_file, save_file

from hf_seq.errors import InvalidValueError

WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "NO_WRAP")
MOMENTS = ("exp_avg", "exp_avg_sq", "step")


@dataclass
class ShardingSettings:
    reshard_after_forward: bool = True  # ZeRO-3; False keeps the gathered parameters from forward to backward
    wrap_policy: str = "TRANSFORMER_BASED_WRAP"
    wrap_classes: tuple[str, ...] = ()  # class names to wrap instead of the model's `_no_split_modules`


def requested() -> ShardingSettings | None:
    """The FSDP settings `accelerate launch` exported, or None when the run is not sharded. Settings hf-seq does not
    carry out are refused by name rather than ignored."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        raise InvalidValueError(
            "a DeepSpeed launch config: hf-seq's training loop does not run under DeepSpeed (on a CPU accelerate "
            "ignores it, and its checkpoints unpickle on resume); launch with recipes/accelerate/fsdp.yaml, whose full "
            "shard partitions parameters, gradients and optimizer state as ZeRO-3 does (docs/cluster.md)"
        )
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return None
    version = os.environ.get("FSDP_VERSION", "1")
    if version != "2":
        raise InvalidValueError(f"fsdp_version: {version}; hf-seq shards with FSDP2: set fsdp_version: 2")
    policy = os.environ.get("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP")
    if policy not in WRAP_POLICIES:
        raise InvalidValueError(f"fsdp_auto_wrap_policy: {policy!r}; allowed: {list(WRAP_POLICIES)}")
    for key, meaning in (("FSDP_OFFLOAD_PARAMS", "fsdp_offload_params"), ("FSDP_ACTIVATION_CHECKPOINTING",
                                                                            "fsdp_activation_checkpointing")):  # fmt: skip
        if os.environ.get(key, "false").lower() == "true":
            raise InvalidValueError(f"{meaning}: true is not supported by hf-seq's FSDP path; set it to false")
    names = os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "")
    return ShardingSettings(
        reshard_after_forward=os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true",
        wrap_policy=policy,
        wrap_classes=tuple(n.strip() for n in names.split(",") if n.strip()),
    )


def shard(model: torch.nn.Module, settings: ShardingSettings) -> list[str]:
    """Shard `model` in place over the default process group; returns the class names wrapped as units."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    if not dist.is_initialized():  # one process (accelerate's simple launcher): a group of one, the same code path
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    names = set(settings.wrap_classes or getattr(model, "_no_split_modules", None) or ())
    if settings.wrap_policy == "NO_WRAP":
        names = set()
    found = {type(m).__name__ for m in model.modules()}
    unknown = sorted(names - found)
    if unknown:
        raise InvalidValueError(
            f"fsdp_transformer_layer_cls_to_wrap: {unknown} are not modules of {type(model).__name__}; "
            f"its module classes: {sorted(found)}"
        )
    units = [m for m in model.modules() if type(m).__name__ in names and m is not model]
    for unit in units:  # inner units first would not matter: fully_shard skips what an inner call already holds
        fully_shard(unit, reshard_after_forward=settings.reshard_after_forward)
    fully_shard(model, reshard_after_forward=settings.reshard_after_forward)
    return sorted(names)


def local_share(model: torch.nn.Module) -> float:
    """The share of the model's parameters this process holds: 1/P when sharded, 1.0 otherwise."""
    params = list(model.parameters())
    local = sum(_local(p).numel() for p in params)
    return local / max(sum(p.numel() for p in params), 1)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def save_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder, rank: int) -> None:
    """This process's shard of the weights and of the optimizer's moments, keyed by parameter name."""
    named = dict(model.named_parameters())
    save_file(
        {k: _local(p.detach()).contiguous().cpu() for k, p in named.items()}, f"{folder}/model_shard_{rank}.safetensors"
    )
    moments = {}
    for name, param in named.items():
        for key, value in optimizer.state.get(param, {}).items():
            if key in MOMENTS:
                moments[f"{name}.{key}"] = _local(value).detach().contiguous().cpu()
    save_file(moments, f"{folder}/optimizer_shard_{rank}.safetensors")


def load_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder, rank: int) -> None:
    """Put this process's saved shard back into the sharded parameters and the optimizer state."""
    from torch.distributed.tensor import DTensor

    path = f"{folder}/model_shard_{rank}.safetensors"
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: resume with the number of processes that saved the checkpoint")
    weights, moments = load_file(path), load_file(f"{folder}/optimizer_shard_{rank}.safetensors")
    named = dict(model.named_parameters())
    if set(weights) != set(named):
        raise ValueError(f"{path} holds other parameters than the model: {sorted(set(weights) ^ set(named))[:5]}")
    with torch.no_grad():
        for name, param in named.items():
            local = _local(param)
            if weights[name].shape != local.shape:
                raise ValueError(
                    f"{path}: {name} has shard shape {tuple(weights[name].shape)}, this process holds "
                    f"{tuple(local.shape)}: resume with the number of processes that saved the checkpoint"
                )
            local.copy_(weights[name])
            state = {}
            for key in MOMENTS:
                value = moments.get(f"{name}.{key}")
                if value is None:
                    continue
                if key != "step" and isinstance(param, DTensor):
                    value = DTensor.from_local(
                        value.to(local.device), param.device_mesh, param.placements, shape=param.shape,
                        stride=param.stride(), run_check=False,
                    )  # fmt: skip
                # the step count lives where AdamW keeps it: on the parameters' device for the fused kernel
                on_device = key != "step" or optimizer.defaults.get("fused") or optimizer.defaults.get("capturable")
                state[key] = value.to(local.device if on_device else "cpu")
            if state:
                optimizer.state[param] = state


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights gathered on CPU (a collective: every process calls it; the main one saves)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first and name in state and first[id(param)] in state:
            state[name] = state[first[id(param)]]  # a tied weight: one tensor under both names, saved once
        first.setdefault(id(param), name)
    return state


def unsharded_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The model as its own class, empty on the meta device: FSDP2 turns a sharded module into an instance of a
    subclass made at run time (in torch's FSDP files, which `save_pretrained` would copy as the model's code), so a
    sharded run saves its gathered weights through this twin instead."""
    from torch.distributed.fsdp import FSDPModule

    cls = next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))
    with torch.device("meta"):
        twin = cls(model.config)
    twin.generation_config = model.generation_config
    return twin
