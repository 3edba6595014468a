"""Atomic writes and line reading: an interrupted command never leaves a half-written file."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from translator.errors import TranslatorError, counted
from translator.input_lines import refuse_wide, wide_encoding


def open_own(path: Path, flags: int) -> int:
    """os.open of a file a command names itself in a directory it was given (a run directory's
    .lock, train.log): a symlink there (a copied or downloaded directory's, aimed elsewhere) is
    removed first, and O_NOFOLLOW refuses one put back meanwhile."""
    if path.is_symlink():
        path.unlink()
    return os.open(path, flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)


def interruption(err: BaseException) -> BaseException | None:
    """The Ctrl-C (KeyboardInterrupt) or SIGTERM (SystemExit 143, run_command's) that `err` is or
    arose while handling, if any: followed through each error's cause or unsuppressed context."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt) or (
            isinstance(err, SystemExit) and err.code in (130, 143)
        ):
            return err
        seen.add(id(err))
        err = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    return None


@contextmanager
def atomic_write(
    path: str | Path, mode: str = "w", encoding: str | None = "utf-8", *, follow_link: bool = True
) -> Iterator:
    """Open a temporary file beside `path`; rename it over `path` only if the block succeeds.

    A path that cannot be written fails here, before the block runs (eval opens its output before
    decoding). A symlink keeps pointing where it did: the file it names is replaced. A device or
    pipe (`-o /dev/null`, `/dev/stdout`) is written through, never replaced. A write that fails
    (a full disk) is one error naming `path`.

    `follow_link=False`, for a name the command picks itself inside a directory it was given (a
    run directory, a checkpoint's): a symlink there is replaced by the file, not written through,
    so a downloaded directory cannot aim the write at a file elsewhere.
    """
    given = path = Path(path)
    replace_link = path.is_symlink() and not follow_link  # os.replace puts the file in its place
    if path.is_dir() and not replace_link:
        raise TranslatorError("is a directory", str(path), "give a file name")
    if path.exists() and not path.is_file() and not replace_link:
        with (
            write_errors(given),
            open(path, mode, encoding=None if "b" in mode else encoding) as handle,
        ):
            yield handle
        return
    if path.is_symlink() and follow_link:  # replace the file it names (or would name), not the link
        path = Path(os.path.realpath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _sweep_dead_owners(path, path.parent)  # what a killed write of this same file left
        # the owner's pid in the name, as atomic_dir's: a sweep leaves a live writer's file alone
        fd, tmp = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
        )
    except OSError as err:
        # a name under a file (mkdir's "File exists", or "Not a directory"): name that file
        near = next((p for p in path.parents if p.exists()), None)
        if near is not None and not near.is_dir():
            raise TranslatorError(
                f"cannot write: {near} is a file, not a directory", str(given), "give another path"
            ) from None
        raise TranslatorError(
            f"cannot write: {err.strerror}", str(given), "check the path and its permissions"
        ) from None
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; the result is an ordinary file
    try:
        with (
            write_errors(given),
            open(tmp, mode, encoding=None if "b" in mode else encoding) as handle,
        ):
            yield handle
            handle.flush()
            # on disk before the rename: a crash leaves the old file or the whole new one
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        stop = interruption(err)
        if stop is not None and stop is not err:
            # torch.save's zip writer, closed by an unwinding Ctrl-C or SIGTERM, raises its own
            # error (`unexpected pos`) over it: still that stop, not a failed write
            raise (
                KeyboardInterrupt()
                if isinstance(stop, KeyboardInterrupt)
                else SystemExit(stop.code)
            ) from None
        raise


# errors of a write itself, whatever the block was doing when one came
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)


@contextmanager
def write_errors(where: str | Path, what: str = "cannot write") -> Iterator[None]:
    """A write that fails (WRITE_FAILURES), also inside a RuntimeError as torch.save raises it,
    becomes a TranslatorError naming `where`: the OSError names a temporary file, or nothing. A
    reader that left a pipe (EPIPE) is not one: it stays an OSError, which ends a command
    quietly."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        cause = err if isinstance(err, OSError) else err.__context__ or err.__cause__
        if not isinstance(cause, OSError) or cause.errno not in WRITE_FAILURES:
            raise
        raise TranslatorError(
            f"{what}: {cause.strerror or cause}", str(where), "free some space, or write elsewhere"
        ) from None


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; it replaces `path` only if the block succeeds.

    A file at `path` is refused: it would be moved aside and lost. A symlink keeps pointing where
    it did: the directory it names is replaced. A mount point (a container's volume) cannot be
    renamed: the temporary directory is made inside it and its contents moved in at the end.
    """
    given = path = Path(path)
    if path.exists() and not path.is_dir():
        raise TranslatorError("is a file, not a directory", str(path), "give a directory path")
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    inside = path.is_dir() and os.path.ismount(path)
    home = path if inside else path.parent
    # the owner's pid in the name: a later run can tell a killed run's leftover from a live one's
    prefix = f".{path.name}.{os.getpid()}."
    try:
        home.mkdir(parents=True, exist_ok=True)
        _sweep_dead_owners(path, home)
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=home))
    except OSError as err:
        raise TranslatorError(
            f"cannot write there: {err.strerror}",
            str(given),
            "check that its directory is writable, or choose another path",
        ) from None
    tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary directory
    try:
        with write_errors(given):
            yield tmp
        if inside:
            _move_in(tmp, path)
        elif path.exists():  # moved aside, not deleted, until the new one is in place
            old = tmp.with_name(f"{tmp.name}.old")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# what marks a directory as complete (prepare's data): a kill while the contents move into a
# mount point must never leave it beside a partial set of files
MARK = "manifest.json"


def _move_in(tmp: Path, path: Path) -> None:
    """The finished `tmp`, made inside `path`, becomes its contents: the old ones go first, the old
    MARK before them and the new MARK last of all."""
    (path / MARK).unlink(missing_ok=True)
    for entry in path.iterdir():
        if entry == tmp:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for entry in sorted(tmp.iterdir(), key=lambda entry: entry.name == MARK):
        os.replace(entry, path / entry.name)
    tmp.rmdir()


def refuse_foreign_dir(
    path: Path, marks: tuple[str, ...], what: str, fix: str, only: frozenset[str] | None = None
) -> None:
    """Refuse a `path` that atomic_dir would replace at a loss: a file, or a directory holding
    anything but an earlier output of the same command (which has all of `marks`, and, given
    `only`, no entry outside it); an empty or missing one is fine. `what` and `fix` word the error
    for the command."""
    if path.exists() and not path.is_dir():
        raise TranslatorError("is a file, not a directory", str(path), "give a directory path")
    if not path.is_dir():
        return
    entries = {entry.name for entry in path.iterdir()}
    if not entries:
        return
    if not all((path / mark).is_file() for mark in marks):
        raise TranslatorError(what, str(path), fix)
    if only is not None and entries - only:
        others = ", ".join(sorted(entries - only)[:3])
        raise TranslatorError(
            f"holds files of its own ({others}): they would be lost", str(path), fix
        )


def _sweep_dead_owners(path: Path, home: Path) -> None:
    """Remove the temporary files and directories that a killed atomic_write or atomic_dir left
    for `path` in `home` (its parent, or itself for a mount point) whose owner process is gone; a
    live one's stay."""
    for leftover in home.glob(f".{path.name}.*.tmp*"):
        # `.NAME.PID.RANDOM.tmp[.old]`, or `.NAME.RANDOM.tmp` from before the pid was in the name;
        # anything else (`.NAME.bak.123.x.tmp`) belongs to another path
        name = re.fullmatch(
            r"(?:(\d+)\.)?[a-z0-9_]+\.tmp(?:\.old)?", leftover.name[len(path.name) + 2 :]
        )
        if name and not (name[1] and _alive(int(name[1]))):
            _remove(leftover)


def sweep_dead_temps(directory: Path) -> int:
    """Remove every temporary file or directory in `directory` whose owner process is gone (a
    killed save's), and those from before the pid was in the name; returns their count. A
    trainer calls it holding the run directory's lock: no other trainer writes there."""
    count = 0
    for leftover in directory.glob(".*.tmp*"):
        owner = re.search(r"\.(\d+)\.[a-z0-9_]+\.tmp(?:\.old)?$", leftover.name)
        if leftover.name.endswith((".tmp", ".tmp.old")) and not (owner and _alive(int(owner[1]))):
            _remove(leftover)
            count += 1
    return count


def _remove(leftover: Path) -> None:
    if leftover.is_dir() and not leftover.is_symlink():
        shutil.rmtree(leftover, ignore_errors=True)
    else:
        leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` of this host runs. On a file system shared by several hosts another
    host's live writer would look dead: such a directory needs one writing host at a time."""
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        pass
    return True


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file without their line endings (and without a byte-order mark: a
    reference that kept one would lose its first word's match); bad bytes name the line."""
    path = Path(path)
    if not path.exists() or path.is_dir():  # a pipe is fine (`--src <(head test.en)`)
        what = "a directory, not a text file" if path.is_dir() else "file not found"
        raise TranslatorError(what, str(path), "check the path")
    lines = []
    with open(path, "rb") as handle:
        head = handle.peek(4096)  # peek: a pipe cannot seek back
        if head[:2] == b"\x1f\x8b":
            raise TranslatorError("a gzip file, not text", str(path), "gunzip it first")
        if encoding := wide_encoding(head):
            refuse_wide(encoding, str(path))
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
                lines.append(line.removeprefix("\ufeff") if number == 1 else line)
            except UnicodeDecodeError as err:
                raise TranslatorError(
                    f"invalid UTF-8 at byte {err.start}",
                    f"{path}:{number}",
                    "re-encode the file as UTF-8",
                ) from None
    return lines


def read_aligned(
    first: str | Path, second: str | Path, command: str
) -> tuple[list[str], list[str]]:
    """Two files' lines (read_lines), refused unless they have as many lines (a source and its
    references or translations)."""
    a, b = read_lines(first), read_lines(second)
    if len(a) != len(b):
        raise TranslatorError(
            f"{first} has {counted(len(a), 'line')} but {second} has {len(b)}",
            command,
            "the two files must be line-aligned",
        )
    return a, b


def silence_stdout() -> None:
    """Point stdout at /dev/null after its reader left the pipe: the interpreter's last flush
    of stdout would fail again ("Exception ignored in ..." on stderr)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
