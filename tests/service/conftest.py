"""The service tier: tests that start real processes: agents.py, app.py, Redis, SeaweedFS, MCP servers, node.
Every test collected under this folder carries the ``service`` marker (``pytest -m service``)."""
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    # This hook sees every collected item, not only this folder's.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.service)
