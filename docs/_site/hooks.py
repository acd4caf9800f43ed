"""MkDocs hooks (mkdocs.yml): the benchmark results a docs page links to, on the site too.

docs/benchmarks.md links to the tables, figures and chart that ``python -m bench all`` writes to
``bench/results/`` of a checkout, as ``../bench/results/<file>``: right on GitHub, but outside
``docs_dir`` for MkDocs. The site carries those files at ``bench/results/`` beside the pages (the
tables as pages left out of the navigation) and the links are read relative to it, so one
Markdown file reads right in both places and a link to a file that is not there still fails
``mkdocs build --strict``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

_RESULTS = "bench/results"


def _results_dir(config: Any) -> Path:
    return Path(config["docs_dir"]).resolve().parent / _RESULTS


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    root = _results_dir(config)
    for path in sorted(root.iterdir()):
        if path.is_file():
            files.append(
                File.generated(
                    config,
                    f"{_RESULTS}/{path.name}",
                    abs_src_path=str(path),
                    inclusion=InclusionLevel.NOT_IN_NAV,
                )
            )
    return files


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri.startswith(f"{_RESULTS}/"):
        return markdown
    return markdown.replace(f"](../{_RESULTS}/", f"]({_RESULTS}/")
