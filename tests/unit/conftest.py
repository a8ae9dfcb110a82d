"""The unit tier: in-process tests: no child process, no browser; fast.
Every test collected under this folder carries the ``unit`` marker (``pytest -m unit``)."""
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    # This hook sees every collected item, not only this folder's.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.unit)
