"""Sphinx configuration of the provider's documentation: ``bash scripts/dev.sh docs`` builds it
with warnings as errors into ``build/docs/html``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package and dags_examples, not an installed one

import airflow_provider_delta  # noqa: E402 - needs the path above

project = "airflow-provider-delta"
author = "airflow-provider-delta contributors"
copyright = "the airflow-provider-delta contributors"  # noqa: A001 - Sphinx's name
release = version = airflow_provider_delta.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "myst_parser",  # CHANGELOG.md
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
# The "Delta tables" page is included by the docs; the README's copy is for GitHub and PyPI.
html_theme = "furo"
html_title = f"{project} {release}"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"  # parameter types beside the parameter's text
autodoc_default_options = {"members": True, "show-inheritance": True}
# Airflow's and Spark's classes are documented in their own sites: their names in our
# signatures are not cross-referenced here.
nitpicky = False
myst_heading_anchors = 2
