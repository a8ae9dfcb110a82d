"""The real_model tier: tests that drive the real small model under llama.cpp's llama-server.
Every test collected under this folder carries the ``real_model`` marker (``pytest -m real_model``)."""
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    # This hook sees every collected item, not only this folder's.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.real_model)
