"""The `translator` command line: thin typer commands; each loads a config and makes one call.

The commands live by what they do with a model: training.py makes one, decoding.py runs one,
attention.py shows its attention, scoring.py scores given translations with one, serving.py puts
one behind HTTP, interop.py moves one to or from another toolkit; options.py holds what they
share. torch is imported inside the command bodies so that `--help` stays instant.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from translator import __version__
from translator.cli import attention, decoding, interop, scoring, serving, training
from translator.cli.stdout import use_utf8
from translator.errors import TranslatorError, error_line

app = typer.Typer(
    name="translator",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: whole option names at any width, ASCII
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Train, evaluate and serve encoder-decoder Transformers for machine translation.",
)

# the usage errors of the click that typer runs on (its own copy in recent versions): the
# bases of the BadParameter it exports
UsageError = typer.BadParameter.__base__
ClickException = UsageError.__base__


def _version(value: bool) -> None:
    if value:
        typer.echo(f"translator {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Train, evaluate and serve encoder-decoder Transformers for machine translation."""


# `translator -h` lists them in this order
app.command()(training.prepare)
app.command()(training.train)
app.command("eval")(decoding.evaluate)
app.command()(decoding.translate)
app.command()(scoring.score)
app.command()(serving.serve)
app.command()(attention.attention)
app.command()(training.average)
app.command()(training.info)
app.command()(training.keys)
app.command()(interop.export)
app.command("import-hf")(interop.import_hf)
app.command("import-fairseq")(interop.import_fairseq)


def _terminate(signum, frame) -> None:
    # unwinds like Ctrl-C: temporary files and directories are removed
    raise SystemExit(128 + signum)


def main() -> None:
    """The `translator` command."""
    run_command(app)


def run_command(command: typer.Typer) -> None:
    """Run a typer app as a command (`translator`, `python -m translator.recipe`): a
    TranslatorError, or an OSError (disk full, permissions), becomes one `error: ...` line and
    exit code 1 (under torchrun, one that every process raised is printed by rank 0 alone); a
    usage error (an unknown flag, a value out of range) one line and exit code 2. SIGTERM exits
    143 through the same clean-ups as Ctrl-C (train installs its own handler: it saves first).
    stdin and stdout are UTF-8 whatever the locale (see `use_utf8`)."""
    signal.signal(signal.SIGTERM, _terminate)
    use_utf8()
    try:
        args = sys.argv[1:] or ["--help"]
        # not standalone: click's usage errors come here, to be printed as one line
        code = command(args=args, standalone_mode=False)
        if code == 130:  # typer's answer to Ctrl-C (KeyboardInterrupt), which it prints nothing for
            typer.echo(f"{program_name()}: interrupted (Ctrl-C)", err=True)
        sys.exit(code if isinstance(code, int) else 0)  # an int: --help's 0, Ctrl-C's 130
    except UsageError as err:
        where = err.ctx.command_path if err.ctx else program_name()
        typer.echo(f"error: {where}: {err.format_message()} (see `{where} -h`)", err=True)
        sys.exit(err.exit_code)
    except ClickException as err:
        typer.echo(f"error: {err.format_message()}", err=True)
        sys.exit(err.exit_code)
    except typer.Abort:  # end of input at a prompt
        sys.exit(1)
    except TranslatorError as err:
        rank = os.environ.get("RANK", "0")  # set by torchrun
        if getattr(err, "every_rank", False) and rank != "0":
            # every process raised the same error: rank 0 prints it, not N copies of it
            typer.echo(f"error: rank {rank}: stopped, see rank 0's error", err=True)
        else:
            typer.echo(f"error: {err}", err=True)
        sys.exit(1)
    except OSError as err:  # click already turns a closed pipe (EPIPE) into a quiet exit
        typer.echo(f"error: {error_line(err)}", err=True)
        sys.exit(1)
    finally:
        # the work is done or cleaned up: a SIGTERM during interpreter teardown ends the process
        # as by default, not as a SystemExit that Python can only print and ignore (exit 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def program_name() -> str:
    """How the command was called, as its help says it: `translator`, or `python -m translator`
    (sys.argv[0] is then `__main__.py`)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return f"python -m {spec.name.removesuffix('.__main__')}"
    return Path(sys.argv[0]).name
