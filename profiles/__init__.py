"""Agent profiles: agents defined in YAML files instead of code (docs/profiles.md).

The shipped profiles (``*.yaml``) live beside this package's modules, so the
default ``--profiles-dir ./profiles`` finds them from the repository root.
"""
