"""The dashboard's files: ``templates/`` (the pages) and ``static/`` (their
scripts, styles and vendored libraries).

A package only so that the files travel with the code: a wheel installs them
beside the modules (pyproject.toml's package-data), and api/routes/dashboard.py
finds them through ``DIRECTORY``, in a checkout and in site-packages alike.
"""
import os

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(DIRECTORY, "templates")
STATIC = os.path.join(DIRECTORY, "static")
