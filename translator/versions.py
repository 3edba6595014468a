"""The versions of what is installed, as manifests and benchmark pages record them."""

from __future__ import annotations

import platform
from importlib import metadata

from translator import __version__


def installed(*packages: str) -> dict[str, str]:
    """translator's and Python's versions, then those of `packages` that are installed."""
    found = {"translator": __version__, "python": platform.python_version()}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found
