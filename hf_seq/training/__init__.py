"""Training: a recipe in, a trained run out.

- `recipes`: a YAML recipe (model x data x schedule), checked whole before anything runs;
- `pretraining`: the accelerate loop, `run(recipe) -> RunResult` (one CPU, one GPU, DDP or FSDP processes);
- `finetuning`: the Trainer runner, `finetune(recipe) -> RunResult`;
- `runs`: what both share, and a run folder opened again (`open_run`); `checkpointing`: checkpoints and kept weights;
- `divergence` and `memory`: a run that diverges stops with its reason; a model that cannot fit is refused first;
- `schedules`, `sharding`, `compute`: learning-rate schedules, FSDP2, training FLOPs from a model's shapes."""

from hf_seq.faces import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "pretraining": [
            "DECODING_KEYS",
            "Session",
            "StopRequest",
            "TrainState",
            "UNPLANNED_STEPS",
            "budget_batches",
            "check_data",
            "check_launch",
            "count_tokens",
            "decay_parameter_groups",
            "describe_distributed",
            "epochs_trained",
            "evaluate_now",
            "finish",
            "global_batch",
            "loop",
            "make_optimizer",
            "note_launch_shortfall",
            "prepare_data",
            "make_scheduler",
            "run",
            "set_scheduled_sampling",
            "setup",
            "shard_model",
            "summarize",
            "token_summary",
            "train_step",
        ],
        "finetuning": ["finetune"],
        "divergence": ["DivergenceError"],
        "runs": [
            "RunResult",
            "budget_note",
            "build_config",
            "build_model",
            "check_batch_split",
            "check_precision",
            "choose_threads",
            "check_run_folder",
            "evaluate_folder",
            "finished_run",
            "open_run",
            "plot_loss_curve",
            "save_run_files",
        ],
        "checkpointing": [
            "CHECKPOINT_PREFIX",
            "RESUMABLE_KEYS",
            "average_snapshots",
            "averaged_steps",
            "check_output_dir",
            "checkpoints",
            "keep_best",
            "keep_snapshot",
            "latest_checkpoint",
            "load_checkpoint",
            "save_checkpoint",
            "snapshot_steps",
        ],
        "recipes": ["SELECT_BY", "Recipe", "RecipeError", "load_recipe", "resolve_tracker"],
    },
)
