"""Publishing: a saved folder is checked to load where hf-seq is not installed (its modeling code travels with the
weights, `trust_remote_code=True`), then uploaded to the Hub."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Run-state files that stay local: checkpoints for --resume, the training copy of the tokenizer.
LOCAL_ONLY = ["checkpoints/*", "checkpoints/**", ".partial-*", "*.pt", "*.bin", "*.pkl"]
REQUIRED = ("config.json", "model.safetensors")


def files_to_upload(folder) -> list[str]:
    from fnmatch import fnmatch

    folder = Path(folder)
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return [n for n in names if not any(fnmatch(n, pattern) for pattern in LOCAL_ONLY)]


def check_folder(folder) -> dict:
    """Load the folder in a fresh Python process in which `import hf_seq` fails, through every Auto class its
    config maps, and run the model once. Returns {auto class: model class}; raises with the child's error."""
    folder = Path(folder).resolve()
    missing = [name for name in REQUIRED if not (folder / name).exists()]
    if missing:
        raise FileNotFoundError(f"{folder} is not a saved model: missing {missing} (save it with save_pretrained)")
    auto_map = json.loads((folder / "config.json").read_text()).get("auto_map")
    if not auto_map:
        raise ValueError(f"{folder}/config.json has no auto_map: it would not load without hf-seq installed")
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["hf_seq"] = None  # as on a machine without hf-seq
        import torch, transformers
        folder = {str(folder)!r}
        loaded = {{}}
        for auto in {sorted(k for k in auto_map if k != "AutoConfig")!r}:
            model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
            loaded[auto] = type(model).__name__
        ids = torch.tensor([[1, 2, 3, 4]]) % model.config.vocab_size
        kwargs = {{"decoder_input_ids": ids[:, :2]}} if model.config.is_encoder_decoder else {{}}
        with torch.no_grad():
            model(input_ids=ids, **kwargs)
        print(json.dumps(loaded))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd="/", env=env, capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0:
        raise RuntimeError(f"{folder} does not load without hf-seq:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def push(folder, repo_id: str, private: bool = False, token: str | None = None, dry_run: bool = False) -> str:
    """Check the folder, then upload it (model card, loss curve and metrics included; checkpoints left out)."""
    loaded = check_folder(folder)
    files = files_to_upload(folder)
    if "README.md" not in files:
        raise FileNotFoundError(f"{folder} has no model card (README.md): write one with `hf-seq card {folder}`")
    summary = f"{len(files)} files: {', '.join(files)}\nloads without hf-seq as: {loaded}"
    if dry_run:
        return f"dry run, nothing uploaded; would push to {repo_id}:\n{summary}"
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    url = api.create_repo(repo_id, private=private, exist_ok=True)
    api.upload_folder(
        repo_id=repo_id, folder_path=str(folder), ignore_patterns=LOCAL_ONLY, commit_message="Upload with hf-seq"
    )
    return f"pushed to {url}\n{summary}"
