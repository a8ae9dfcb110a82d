"""The engine of agents.py, in rooms (docs/architecture.md draws them):
worker/ over dispatch/ and record/, over session/, over base/; import-linter
keeps each room to the rooms below it (pyproject.toml)."""
