"""``agentsvc token new NAME --role ROLE [--file FILE]``: make an API token.

The token is printed once and never stored: the tokens file (app.py
``--tokens-file``, AGENTSVC_TOKENS_FILE) gets its name, role and SHA-256
(domain/tokens.py), and app.py reads the file again when it changes, so the
token works at once.  ``agentsvc whoami`` says which token a command sends
(AGENTSVC_API_TOKEN) and its role.
"""
import os
import sys

import click

from domain.tokens import NAME_PATTERN, ROLES, TokenError, entry_text, new_token, parse
from cli import render
from cli.options import remote


@click.group("token")
def token():
    """API tokens with roles (docs/security.md)."""


@token.command("new")
@click.argument("name")
@click.option("--role", type=click.Choice(ROLES), required=True,
              help="viewer reads; operator also creates and controls; admin also bulk-destroys, runs evals, "
                   "reloads profiles")
@click.option("--file", "path", envvar="AGENTSVC_TOKENS_FILE", required=True, metavar="FILE",
              help="the tokens file app.py reads [AGENTSVC_TOKENS_FILE]")
def new(name, role, path):
    """Make a token named NAME, add it to the tokens file, print it once."""
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    try:
        known = {p.name for p in parse(text).values()}
    except TokenError as exc:
        raise click.UsageError(f"{path}: {exc}") from None
    if name in known:
        raise click.UsageError(f"{path} has a token named {name!r} already (remove its entry to replace it)")
    made = new_token()
    candidate = text + entry_text(name, role, made)
    try:
        parse(candidate)
    except TokenError as exc:
        raise click.UsageError(f"{exc} (names match {NAME_PATTERN})") from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(entry_text(name, role, made))
    print(made)
    print(f"agentsvc: {name} ({role}) added to {path}; the token above is shown only now", file=sys.stderr)


@click.command("whoami")
@remote
def whoami(api, as_json):
    """The token this command sends (AGENTSVC_API_TOKEN): its name and role."""
    who = api.get("/api/whoami")
    if as_json:
        render.as_json(who)
    elif not who["auth"]:
        print("this service has no tokens: everyone may do everything")
    else:
        print(f"{who['name']} ({who['role']})")


COMMANDS = [token, whoami]
