"""Regenerate baml_client/ from baml_src/, with the fix-ups it needs.

    python scripts/baml_generate.py            # rewrite baml_client/ in place
    python scripts/baml_generate.py --check    # exit 1 if baml_client/ is stale

The generated client is committed so that ``pip install -e .`` works with no
extra step; tests/unit/test_baml_moniker.py regenerates into a temporary directory
and fails when the committed copy differs.  Never edit baml_client/ by hand:
change baml_src/ and run this script.

Fix-up: BAML emits the recursive ``JsonValue`` alias as a plain
``typing_extensions.TypeAlias`` whose forward references make pydantic recurse
forever (BoundaryML/baml#2186).  Rewriting it as ``TypeAliasType`` gives
pydantic a named recursive type, which it resolves.
"""
import argparse
import filecmp
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "baml_src"
CLIENT = ROOT / "baml_client"
FIXED_FILES = ("types.py", "stream_types.py")
ALIAS = re.compile(r"^(?P<name>\w+): typing_extensions\.TypeAlias = (?P<value>.+)$", re.MULTILINE)
RECURSIVE_ALIASES = ("JsonValue",)


def run_baml_cli(src: Path) -> None:
    """``baml-cli generate`` through the installed baml_py, so no PATH lookup
    can pick a different CLI version than the runtime."""
    code = "import sys, baml_py; sys.argv = ['baml-cli'] + sys.argv[1:]; sys.exit(baml_py.invoke_runtime_cli())"
    result = subprocess.run([sys.executable, "-c", code, "generate", "--from", str(src)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"baml-cli generate failed:\n{result.stdout}\n{result.stderr}")


def fix_recursive_aliases(client_dir: Path) -> None:
    def rewrite(match: re.Match) -> str:
        if match["name"] not in RECURSIVE_ALIASES:
            return match[0]
        return f'{match["name"]} = typing_extensions.TypeAliasType("{match["name"]}", {match["value"]})'

    for name in FIXED_FILES:
        path = client_dir / name
        text = path.read_text()
        fixed = ALIAS.sub(rewrite, text)
        if "JsonValue" in text and fixed == text:
            raise SystemExit(f"{path}: JsonValue alias not found; the BAML output format changed")
        path.write_text(fixed)


def generate_into(root: Path) -> Path:
    """Generate a fixed-up client under ``root`` (from a copy of baml_src) and return its directory."""
    shutil.copytree(SRC, root / "baml_src")
    run_baml_cli(root / "baml_src")
    fix_recursive_aliases(root / "baml_client")
    return root / "baml_client"


def differences(a: Path, b: Path) -> list[str]:
    """Relative paths of .py files that differ, or exist on one side only."""
    names = {p.relative_to(a) for p in a.rglob("*.py")} | {p.relative_to(b) for p in b.rglob("*.py")}
    return sorted(str(n) for n in names
                  if not ((a / n).exists() and (b / n).exists() and filecmp.cmp(a / n, b / n, shallow=False)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report whether baml_client/ is stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate_into(Path(tmp))
        stale = differences(fresh, CLIENT) if CLIENT.exists() else ["(baml_client/ missing)"]
        if args.check:
            print("baml_client/ is stale: " + ", ".join(stale) if stale else "baml_client/ is up to date")
            return 1 if stale else 0
        if CLIENT.exists():
            shutil.rmtree(CLIENT)
        shutil.copytree(fresh, CLIENT, ignore=shutil.ignore_patterns("__pycache__"))
    print(f"generated {CLIENT.relative_to(ROOT)}/ from baml_src/ ({len(stale)} file(s) changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
