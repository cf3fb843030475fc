"""Sphinx configuration of twopc's documentation (`make docs`)."""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

project = "twopc"
author = "twopc contributors"
copyright = "2026, twopc contributors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "twopc_options",
    "twopc_cli",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
html_theme = "furo"
html_title = "twopc"
# docs/_static/twopc.css: code blocks wrap their long lines at the column's edge.
html_static_path = ["_static"]
html_css_files = ["twopc.css"]
autodoc_typehints = "description"
autodoc_default_options = {"members": False}
# Code blocks that hold console output or file layouts are shown as they are.
highlight_language = "none"
