"""This release of stead. The version moves with every schema change:
CHANGELOG.md names, for each release, the schema version its code needs
(`stead --version` prints both), and tests/upgrade/test_versions.py keeps
the three in step."""

__version__ = "0.4.0"
