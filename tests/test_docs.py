"""The documentation site builds strictly (as bin/test builds it: without --quiet, which
would hide the warnings that --strict counts), the README stays short
and every page it links to exists, and the site has every page of docs/ in its navigation."""

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def build(tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_documentation_builds_strictly(tmp_path):
    result = build(tmp_path, ROOT / "mkdocs.yml")

    assert result.returncode == 0, result.stderr
    for page in ("index", "review", "generate", "sandboxes", "api", "operate", "architecture"):
        built = tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), page


def test_a_broken_link_fails_the_build(tmp_path):
    """--strict means it: a page linking to a page that is not there stops the build."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the API](api-gone.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"site_name: t\ndocs_dir: {docs}\ntheme:\n  name: material\n")

    result = build(tmp_path, config)

    assert result.returncode != 0 and "api-gone.md" in result.stderr


def nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for item in nav:
        for value in item.values():
            pages |= nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_page_is_in_the_navigation_and_every_readme_link_leads_somewhere():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert nav_pages(config["nav"]) == pages

    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\((docs/[^)#]*)", readme)
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).exists(), link
    # The two screenshots, the two commands.
    assert readme.count("](docs/screenshots/") == 2
    assert "```sh\nbin/start\n```" in readme and "```sh\nbin/test\n```" in readme
