"""Publishing: a saved folder is checked to load where hf-seq is not installed (its modeling code travels with the
weights, `trust_remote_code=True`), then uploaded to the Hub.

What is uploaded is exactly what `push(..., dry_run=True)` lists: the folder's files minus the run state that stays
local (checkpoints, pickles), with local paths replaced by names. A recipe records where its data, tokenizer and
output folder were on the training machine (`/home/you/corpus.txt`); the published `recipe.json`, the model card
and every other text file say `corpus.txt` instead, and the Hub metadata lists Hub datasets only."""

import copy
import json
import os
import re
import subprocess
import sys
import textwrap
from fnmatch import fnmatch
from pathlib import Path

from hf_seq.errors import InvalidValueError, MissingFileError

# Run-state files that stay local: checkpoints for --resume, the training copy of the tokenizer, pickles.
LOCAL_ONLY = ["checkpoints/*", "checkpoints/**", ".partial-*", "*.pt", "*.bin", "*.pkl"]
REQUIRED = ("config.json", "model.safetensors")
TEXT_SUFFIXES = (".json", ".md", ".yaml", ".yml", ".txt", ".jinja", ".py")
DATA_FILE_SUFFIXES = (".txt", ".json", ".jsonl", ".csv", ".tsv", ".parquet", ".arrow", ".gz", ".bz2", ".xz", ".zst")
# Recipe entries that name local files or folders (data entries may also be Hub dataset names).
PATH_KEYS = (
    ("training", "output_dir"),
    ("tokenizer", "path"),
    ("data", "dataset"),
    ("data", "validation"),
    ("data", "test"),
)


def is_local_path(value) -> bool:
    """A recipe value names a local file or folder (not a Hub dataset or model name): an absolute or explicitly
    relative path, a data file name, or a path with a separator that exists here."""
    text = str(value)
    if os.path.isabs(text) or text.startswith(("./", "../", "~")) or text.lower().endswith(DATA_FILE_SUFFIXES):
        return True
    return os.sep in text and os.path.exists(text)


def public_name(value: str) -> str:
    """What may be published of a recipe value: a local path becomes its last component, a Hub name stays."""
    return Path(os.path.expanduser(value)).name if is_local_path(value) else value


def hub_dataset_ids(dataset) -> list[str]:
    """The entries of `data.dataset` that are Hub datasets (for the card's metadata): not local files, not the
    embedded defaults (`stdlib`, `gettext`, ...), without a `:config` suffix."""
    from hf_seq.data.corpora import DATA_DESCRIPTIONS

    items = dataset if isinstance(dataset, list) else [dataset] if dataset else []
    names = [str(item).split(":")[0] for item in items if not is_local_path(item)]
    return [name for name in names if name not in DATA_DESCRIPTIONS]


def public_recipe(recipe: dict) -> dict:
    """A copy of `recipe` that names its local files and folders without their paths (see `public_name`), and
    shortens any other absolute path it holds the same way."""
    recipe = copy.deepcopy(recipe)

    def clean(value):
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, str) and (os.path.isabs(value) or value.startswith("~")):
            return public_name(value)
        return value

    for section, key in PATH_KEYS:
        value = recipe.get(section, {}).get(key) if isinstance(recipe.get(section), dict) else None
        if isinstance(value, str):
            recipe[section][key] = public_name(value)
        elif isinstance(value, list):
            recipe[section][key] = [public_name(v) if isinstance(v, str) else v for v in value]
    return clean(recipe)


def _local_paths(folder: Path, recipe: dict | None) -> dict[str, str]:
    """Local path -> the name to publish instead, for every path the run recorded (longest first)."""
    found = {str(folder.resolve()): folder.resolve().name, str(folder): folder.name}
    for section, key in PATH_KEYS:
        value = (recipe or {}).get(section, {}).get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and is_local_path(item):
                found[item] = public_name(item)
                found[str(Path(os.path.expanduser(item)).resolve())] = public_name(item)
    home = str(Path.home())
    return {
        path: name for path, name in sorted(found.items(), key=lambda kv: -len(kv[0])) if path not in ("", ".", home)
    }


def redact_local_paths(text: str, paths: dict[str, str]) -> str:
    """Replace each recorded local path by its name, and any other path under the home folder by its last part."""
    for path, name in paths.items():
        text = text.replace(path, name)
    home = re.escape(str(Path.home()).rstrip("/"))
    return re.sub(home + r"/[^\s\"'`),\]]*", lambda m: Path(m.group(0)).name, text) if home else text


def files_to_upload(folder) -> list[str]:
    folder = Path(folder)
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return [n for n in names if not any(fnmatch(n, pattern) for pattern in LOCAL_ONLY)]


def upload_contents(folder) -> dict[str, bytes | Path]:
    """Exactly what `push` uploads: path in the repository -> the bytes to write (text files with local paths
    replaced by names; `recipe.json` through `public_recipe`) or the local file to copy as it is."""
    folder = Path(folder)
    recipe_file = folder / "recipe.json"
    recipe = json.loads(recipe_file.read_text()) if recipe_file.exists() else None
    paths = _local_paths(folder, recipe)
    contents: dict[str, bytes | Path] = {}
    for name in files_to_upload(folder):
        path = folder / name
        if name == "recipe.json" and recipe is not None:
            text = json.dumps(public_recipe(recipe), indent=2) + "\n"
            contents[name] = redact_local_paths(text, paths).encode()
        elif name.endswith(TEXT_SUFFIXES):
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            cleaned = redact_local_paths(text, paths)
            contents[name] = cleaned.encode("utf-8", errors="surrogateescape") if cleaned != text else path
        else:
            contents[name] = path
    return contents


def check_folder(folder) -> dict:
    """Load the folder in a fresh Python process in which `import hf_seq` fails, through every Auto class its
    config maps, and run the model once. Returns {auto class: model class}; raises with the child's error."""
    folder = Path(folder).resolve()
    missing = [name for name in REQUIRED if not (folder / name).exists()]
    if missing:
        raise MissingFileError(f"{folder} is not a saved model: missing {missing} (save it with save_pretrained)")
    try:
        auto_map = json.loads((folder / "config.json").read_text()).get("auto_map")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidValueError(f"{folder / 'config.json'} is not valid JSON: {error}") from error
    if not auto_map:
        raise InvalidValueError(f"{folder}/config.json has no auto_map: it would not load without hf-seq installed")
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["hf_seq"] = None  # as on a machine without hf-seq
        import torch, transformers
        folder = {str(folder)!r}
        forecaster = json.load(open(folder + "/config.json")).get("prediction_length") is not None
        loaded = {{}}
        for auto in {sorted(k for k in auto_map if k != "AutoConfig")!r}:
            if (auto == "AutoModelForTimeSeriesPrediction") != forecaster:  # values in, or tokens in
                continue
            model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
            loaded[auto] = type(model).__name__
        with torch.no_grad():
            if forecaster:
                model(past_values=torch.randn(1, model.past_length), future_values=torch.randn(1, 2))
            else:
                ids = torch.tensor([[1, 2, 3, 4]]) % model.config.vocab_size
                kwargs = {{"decoder_input_ids": ids[:, :2]}} if model.config.is_encoder_decoder else {{}}
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
    """Check the folder, then upload it (model card, loss curve and metrics included; checkpoints left out; local
    paths replaced by names). The dry run lists the same files, with their sizes, and uploads nothing."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+|[\w.-]+", repo_id or ""):
        raise InvalidValueError(f"push: repo_id must look like 'your-name/model-name', got {repo_id!r}.")
    if not Path(folder).is_dir():
        raise MissingFileError(f"push: {folder} is not a folder (give the output_dir of a run or a saved model).")
    from hf_seq.hub.checksums import verify_checksums

    verify_checksums(folder)  # never publish weights damaged since the run saved them
    loaded = check_folder(folder)
    contents = upload_contents(folder)
    if "README.md" not in contents:
        raise MissingFileError(f"{folder} has no model card (README.md): write one with `hf-seq card {folder}`")
    lines = []
    for name, content in contents.items():
        size = len(content) if isinstance(content, bytes) else content.stat().st_size
        note = "  (local paths replaced by names)" if isinstance(content, bytes) else ""
        lines.append(f"  {name}  {size:,} bytes{note}")
    summary = f"{len(contents)} files:\n" + "\n".join(lines) + f"\nloads without hf-seq as: {loaded}"
    if dry_run:
        return f"dry run, nothing uploaded; would push to {repo_id}:\n{summary}"
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token=token)
    url = api.create_repo(repo_id, private=private, exist_ok=True)
    operations = [
        CommitOperationAdd(path_in_repo=name, path_or_fileobj=content if isinstance(content, bytes) else str(content))
        for name, content in contents.items()
    ]
    api.create_commit(repo_id=repo_id, operations=operations, commit_message="Upload with hf-seq")
    return f"pushed to {url}\n{summary}"
