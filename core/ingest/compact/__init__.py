"""Compact materialization (docstring to be written)."""
from .graph import CompactGraph, LayerReport
from .materialize import materialize
from .unsupported import Unsupported

__all__ = ["CompactGraph", "LayerReport", "Unsupported", "materialize"]
