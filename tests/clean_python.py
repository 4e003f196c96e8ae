"""An interpreter where hf_seq cannot be imported, kept for a test worker's whole session.

The checks that a saved folder loads with `trust_remote_code=True` alone, as on a machine without hf-seq, send it
their scripts. Importing torch and transformers' modeling code takes about 9 s of a core here; paid once per worker
instead of once per check, that is minutes of the suite. Each script runs in a namespace of its own, and transformers
names the code it copies out of a folder by the hash of that code, so two folders never share a module. What a script
prints comes back; a script that raises fails the test with its traceback.
"""

import json
import os
import select
import subprocess
import sys
from pathlib import Path

SERVE = r"""
import contextlib, io, json, os, sys, traceback

sys.modules["hf_seq"] = None  # any import of the package now fails
replies = os.fdopen(os.dup(1), "w")  # the answers have a channel of their own:
os.dup2(2, 1)  # whatever else reaches file 1 (a library's stray print) goes to the log
import torch, transformers
from transformers import generation, modeling_utils  # noqa: F401  the slow imports, once

for line in sys.stdin:
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(json.loads(line), "<script>", "exec"), {"__name__": "__main__"})
        failure = None
    except BaseException:
        failure = traceback.format_exc()
    replies.write(json.dumps({"printed": printed.getvalue(), "failure": failure}) + "\n")
    replies.flush()
"""


class CleanPython:
    def __init__(self, folder: Path):
        self.log_path = folder / "log.txt"
        self.log = self.log_path.open("w")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env |= {"HF_HUB_OFFLINE": "1", "HF_HOME": str(folder / "hf")}  # its own cache of remote code
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVE], cwd=folder, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        )  # fmt: skip

    def run(self, script: str, timeout: float = 300) -> str:
        """What `script` printed, run in the clean interpreter; AssertionError with its traceback if it raised."""
        self.process.stdin.write(json.dumps(script) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise AssertionError(f"the clean interpreter gave no answer in {timeout} s:\n{self.log_tail()}")
        answer = json.loads(line)
        if answer["failure"]:
            raise AssertionError(answer["printed"] + answer["failure"] + self.log_tail())
        return answer["printed"]

    def log_tail(self, chars: int = 4000) -> str:
        self.log.flush()
        return self.log_path.read_text()[-chars:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()
