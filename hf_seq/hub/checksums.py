"""A SHA-256 per weight file, recorded when a run saves and verified before hf-seq uses the folder again.

safetensors has no checksum of its own: bytes flipped in its data section (a failing disk, a copy cut short and
patched, a bad download) load without a word and give NaN or merely wrong logits. `checksums.json` beside the
weights, in a finished run and in each of its checkpoints, records the hash of every `*.safetensors` file; `hf-seq
evaluate / generate / push` and `--resume` verify it; where a folder has no record, they refuse weights that hold NaN,
infinity or values no trained weight reaches, naming the tensor. `from_pretrained` does not read the record: a folder re-saved on purpose with
`save_pretrained` loads as any folder does (delete its stale `checksums.json` to use it with hf-seq again). The Hub
shows the same SHA-256 for each uploaded weight file, so a downloaded copy can be checked against it too."""

import hashlib
import json
import math
from pathlib import Path

from hf_seq.errors import InvalidValueError

CHECKSUMS = "checksums.json"


class ChecksumError(InvalidValueError):
    """A weight file differs from the one that was saved (a ValueError; `hf-seq` reports it in one line)."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 22):  # 4 MiB at a time: weight files can be larger than memory
            digest.update(chunk)
    return digest.hexdigest()


def record_checksums(folder, files=None) -> Path:
    """Write `checksums.json` in `folder` with the SHA-256 of `files` (names in it; default: its *.safetensors)."""
    folder = Path(folder)
    names = sorted(files) if files is not None else sorted(p.name for p in folder.glob("*.safetensors"))
    path = folder / CHECKSUMS
    path.write_text(json.dumps({"sha256": {name: sha256(folder / name) for name in names}}, indent=2) + "\n")
    return path


class WeightValuesError(ChecksumError):
    """A weight tensor holds NaN, infinity or values no trained weight reaches (a ValueError; `hf-seq` reports it in
    one line)."""


def verify_checksums(folder) -> list[str]:
    """Check every file `checksums.json` lists against its recorded SHA-256; returns the names checked (none where
    the folder has no record). Raises ChecksumError naming the first file that is missing or differs. A folder with
    no record (written by `save_pretrained`, or downloaded without it) has its weights checked for NaN, infinity and
    values no trained weight reaches instead (`check_weight_values`): damage the record would have caught mostly
    shows there."""
    folder = Path(folder)
    record = folder / CHECKSUMS
    if not record.is_file():
        check_weight_values(folder)
        return []
    try:
        recorded = json.loads(record.read_text())["sha256"]
    except (ValueError, KeyError, TypeError) as error:
        raise ChecksumError(f"{record} is not a checksum record ({error}); delete it to use the folder") from None
    advice = (
        "copy or download the folder again (or, for a checkpoint, resume from an earlier one); if you changed the "
        f"weights on purpose (save_pretrained), delete {record}"
    )
    for name, expected in recorded.items():
        path = folder / name
        if not path.is_file():
            raise ChecksumError(f"{path} is missing: {record} lists it as saved with the weights; {advice}")
        if sha256(path) != expected:
            raise ChecksumError(
                f"{path} does not match the SHA-256 recorded when it was saved ({record}): it was changed or "
                f"damaged since (a disk error, a copy or download cut short); {advice}"
            )
    return list(recorded)


def check_weight_values(folder) -> None:
    """Read the floating-point tensors of the `*.safetensors` files in `folder` one at a time and raise
    WeightValuesError naming the first that holds NaN or infinity (a diverged run saved, or bytes damaged since)
    or values larger than any trained weight reaches (bytes flipped since it was saved). A file that is not complete
    safetensors is left to the loader, which names it."""
    from safetensors import SafetensorError, safe_open

    from hf_seq.models.utils import IMPLAUSIBLE_WEIGHT, weight_magnitude

    advice = "copy or download the folder again"
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as file:
                for name in file.keys():
                    tensor = file.get_tensor(name)
                    if not tensor.is_floating_point() or not tensor.numel():
                        continue
                    largest = weight_magnitude(tensor)
                    if not math.isfinite(largest):
                        raise WeightValuesError(
                            f"{path}: tensor {name} holds NaN or infinite values: the weights were saved from a "
                            "diverged run (lower the learning rate, clip gradients, use bf16 rather than fp16) or were "
                            f"damaged since ({advice})"
                        )
                    if largest > IMPLAUSIBLE_WEIGHT:
                        raise WeightValuesError(
                            f"{path}: tensor {name} holds a value of magnitude {largest:.3g}, beyond "
                            f"{IMPLAUSIBLE_WEIGHT:.0e}, which no trained weight reaches: the file was damaged after it "
                            f"was saved (flipped bytes); {advice}"
                        )
        except SafetensorError:
            continue
