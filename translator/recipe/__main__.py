"""`python -m translator.recipe`."""

from translator.cli import run_command
from translator.recipe.command import app

run_command(app)
