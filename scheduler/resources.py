"""Locate the project's data folders (``schemas/``, ``topics/``, ``config/``).

A wheel carries them under ``scheduler/_resources``; an editable install or a
checkout reads them from the repository root.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """Return the folder ``name`` (e.g. ``"schemas"``).

    Raises FileNotFoundError naming both places looked in.
    """
    for candidate in (_PACKAGE / "_resources" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"resource folder {name!r} not found under {_PACKAGE / '_resources'} or {_PACKAGE.parent}; "
        "reinstall ksched or run from a checkout"
    )
