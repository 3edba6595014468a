"""The one exception users see: what is wrong, where, and how to fix it."""

import os


class TranslatorError(Exception):
    """A user-facing error; the CLI prints it as one line and exits 1."""

    def __init__(self, what: str, where: str = "", fix: str = "") -> None:
        self.what, self.where, self.fix = what, where, fix
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.where}: {self.what}" if self.where else self.what
        return f"{text} ({self.fix})" if self.fix else text


def error_line(err: Exception) -> str:
    """The one line the command prints for an error that ends it (after `error: `)."""
    if isinstance(err, OSError):
        # a bytes name too (TensorBoard)
        where = f"{os.fsdecode(err.filename)}: " if err.filename else ""
        return f"{where}{err.strerror or err} (check the path, its permissions and free space)"
    return str(err)
