"""What many commands share: the options of a command that talks to a service
(and its error handling), and ``--config`` / ``--set`` parsing."""
import functools
import json
import os
import sys

import click

from cli import render
from cli.client import ApiFailure, Client


def remote(command):
    """The options every command that talks to a service has, and its error handling."""
    @click.option("--url", envvar="AGENTSVC_URL", default=None, metavar="URL",
                  help="the service [AGENTSVC_URL, http://127.0.0.1:8765]")
    @click.option("--json", "as_json", is_flag=True, help="print JSON (one document, or one line per event)")
    @functools.wraps(command)
    def wrapper(url, as_json, **kwargs):
        api = Client(url, token=os.environ.get("AGENTSVC_API_TOKEN") or None)
        try:
            return command(api, as_json, **kwargs)
        except ApiFailure as exc:
            if as_json:
                render.as_json({"error": {"code": exc.code, "message": exc.message}})
            render.err.print(f"agentsvc: {exc.message} [{exc.code}]", markup=False)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            sys.exit(0)
    return wrapper


def parse_config(config_json: str | None, settings: tuple[str, ...], interval, max_steps) -> dict:
    config = {}
    if config_json:
        text = open(config_json[1:]).read() if config_json.startswith("@") else config_json
        try:
            config = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--config") from None
        if not isinstance(config, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--config")
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        try:
            config[key] = json.loads(value)
        except ValueError:
            config[key] = value
    if interval is not None:
        config["interval_s"] = interval
    if max_steps is not None:
        config["max_steps"] = max_steps
    return config
