"""The one exception users see: what is wrong, where, and how to fix it."""

import errno
import os


class TranslatorError(Exception):
    """A user-facing error; the CLI prints it as one line and exits 1."""

    def __init__(self, what: str, where: str = "", fix: str = "") -> None:
        self.what, self.where, self.fix = what, where, fix
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.where}: {self.what}" if self.where else self.what
        return f"{text} ({self.fix})" if self.fix else text


# what to check after an OSError, by its errno (a missing input file has no use for "free space")
OS_ERROR_FIX = "check the path, its permissions and free space"
OS_ERROR_FIXES = {
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "check the path",
    errno.EISDIR: "give a file, not a directory",
    errno.EACCES: "check its permissions",
    errno.EPERM: "check its permissions",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.ENOSPC: "free some space",
    getattr(errno, "EDQUOT", errno.ENOSPC): "free some space (or raise the disk quota)",
}


def counted(n: int, noun: str, plural: str = "") -> str:
    """'1 line', '3 lines' ('2 prefixes' with its `plural`): a count in a message, its noun
    agreeing."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def error_line(err: Exception) -> str:
    """The one line the command prints for an error that ends it (after `error: `)."""
    if isinstance(err, OSError):
        # a bytes name too (TensorBoard)
        where = f"{os.fsdecode(err.filename)}: " if err.filename else ""
        return f"{where}{err.strerror or err} ({OS_ERROR_FIXES.get(err.errno, OS_ERROR_FIX)})"
    return str(err)
