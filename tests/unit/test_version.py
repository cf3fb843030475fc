"""One version, in three places that must agree: the distribution's metadata (``pyproject.toml``),
``twopc.__version__``, and the newest release in ``CHANGELOG.md``."""

import importlib.metadata
import re

import twopc

from tests._paths import REPO_ROOT


def test_the_package_reports_the_distributions_version() -> None:
    assert twopc.__version__ == importlib.metadata.version("pyspark-twopc")


def test_the_newest_release_in_the_changelog_is_the_version() -> None:
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (REPO_ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert releases, "CHANGELOG.md lists no release (## [x.y.z] - date)"
    assert releases[0] == twopc.__version__, (
        f"CHANGELOG.md's newest release is {releases[0]}, the package says {twopc.__version__}: "
        "move the version in pyproject.toml and twopc/__init__.py with the changelog")
