"""Errors in what the user gave, told apart from bugs by their type.

A `UserError` says that a recipe, an override, a command-line argument, a file or a folder is wrong, and its
message says what to give instead: `hf-seq` prints it as `hf-seq: error: <message>` and exits with status 2, as
argparse does for a bad argument. Any other exception is a failure inside hf-seq and keeps its traceback (status 1);
`hf-seq --debug` shows the traceback of a user error too.

Each concrete class is also the built-in exception it replaces, so `except FileNotFoundError` still catches a
missing data file and `except ValueError` a recipe error.
"""


class UserError(Exception):
    """Something the user gave is wrong; the message names it and what is allowed."""


class InvalidValueError(UserError, ValueError):
    """A value (a recipe key, an argument, the data it describes) that is not allowed."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named does not exist, or does not hold what the command needs."""


class RunExistsError(UserError, FileExistsError):
    """An output folder already holds a run that the command would overwrite."""


class DamagedRunError(UserError, RuntimeError):
    """A folder the user named holds a run that cannot be used (no checkpoint of it loads)."""
