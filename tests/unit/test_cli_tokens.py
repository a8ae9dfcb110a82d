"""``agentsvc token new``: the token printed once, only its hash kept, the file private."""
import os
import stat

from click.testing import CliRunner

from domain.tokens import TokenRing
from cli.tokens import token


def test_a_new_token_is_printed_once_and_only_its_hash_is_kept(tmp_path):
    path = tmp_path / "tokens.toml"
    runner = CliRunner()
    made = runner.invoke(token, ["new", "ann", "--role", "operator", "--file", str(path)])
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip().splitlines()[0]
    assert secret.startswith("agt_") and secret not in path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    principal = TokenRing(str(path)).identify(secret)
    assert (principal.name, principal.role) == ("ann", "operator")
    again = runner.invoke(token, ["new", "ann", "--role", "viewer", "--file", str(path)])
    assert again.exit_code == 2 and "already" in again.output
    bad = runner.invoke(token, ["new", "no spaces", "--role", "viewer", "--file", str(path)])
    assert bad.exit_code == 2
    assert TokenRing(str(path)).identify(secret) is not None  # a refused call changed nothing
