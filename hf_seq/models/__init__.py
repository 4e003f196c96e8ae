"""The modeling code of every family. Files here import only torch, transformers and each other (relatively),
because `save_pretrained` copies them next to the weights for `trust_remote_code=True` loading."""
