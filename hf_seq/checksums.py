"""A SHA-256 per weight file, recorded when a run saves and verified before hf-seq uses the folder again.

safetensors has no checksum of its own: bytes flipped in its data section (a failing disk, a copy cut short and
patched, a bad download) load without a word and give NaN or merely wrong logits. `checksums.json` beside the
weights, in a finished run and in each of its checkpoints, records the hash of every `*.safetensors` file; `hf-seq
evaluate / generate / push` and `--resume` verify it. `from_pretrained` does not: a folder re-saved on purpose with
`save_pretrained` loads as any folder does (delete its stale `checksums.json` to use it with hf-seq again). The Hub
shows the same SHA-256 for each uploaded weight file, so a downloaded copy can be checked against it too."""

import hashlib
import json
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


def verify_checksums(folder) -> list[str]:
    """Check every file `checksums.json` lists against its recorded SHA-256; returns the names checked (none where
    the folder has no record). Raises ChecksumError naming the first file that is missing or differs."""
    folder = Path(folder)
    record = folder / CHECKSUMS
    if not record.is_file():
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
