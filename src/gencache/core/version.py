"""The gencache version: recorded in every resolved config and export (part of the foundation layer)."""

from __future__ import annotations

__version__ = "0.1.0"
