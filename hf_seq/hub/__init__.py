"""The Hub: model cards (`cards`), a SHA-256 per weight file (`checksums`), and publishing: a folder checked to load
where hf-seq is not installed, then pushed (`publish`)."""

from hf_seq.faces import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "publish": [
            "DATA_FILE_SUFFIXES",
            "LOCAL_ONLY",
            "PATH_KEYS",
            "REQUIRED",
            "TEXT_SUFFIXES",
            "check_folder",
            "files_to_upload",
            "hub_dataset_ids",
            "is_local_path",
            "public_name",
            "public_recipe",
            "push",
            "redact_local_paths",
            "upload_contents",
        ],
        "cards": ["write_card"],
        "checksums": ["record_checksums", "verify_checksums"],
    },
)
