"""Every file the docs name exists: docs/architecture.md above all (a newcomer
follows its paths), README.md and docs/*.md, and the docstrings and comments of
the code, which name the modules they hand over to.  A move or a removal that
leaves a mention behind fails here, naming the line."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A path with at least one folder, ending in a file name with one of these
# extensions, not itself part of a longer path or URL.
PATH = re.compile(r"(?<![\w/.:-])((?:[A-Za-z_][\w-]*/)+[\w-]+\.(?:py|md|js|toml|sh|yaml|yml|json|css|html|baml))\b")
SKIP_DIRS = {".git", "baml_client", "node_modules", "__pycache__"}


def tops() -> set[str]:
    """The repository's top-level folders: a path starting elsewhere (a URL's
    path, ``pages/agents.js`` relative to its folder) is not a repository path."""
    return {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}


def documents() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("*.py"))]
    for top in sorted(tops()):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".py", ".md") and not SKIP_DIRS & set(path.relative_to(ROOT).parts) \
                    and not path.relative_to(ROOT).parts[0].startswith(".venv"):
                found.append(path)
    return found


def missing_in(path: Path, folders: set[str]) -> list[str]:
    wrong = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        for named in PATH.findall(line):
            if named.split("/")[0] not in folders:
                continue
            if not (ROOT / named).exists() and not (path.parent / named).exists():
                wrong.append(f"{path.relative_to(ROOT)}:{number} names {named}")
    return wrong


def test_the_architecture_document_names_only_files_that_exist():
    doc = ROOT / "docs" / "architecture.md"
    assert len(PATH.findall(doc.read_text())) > 50  # it does name files: the check is not vacuous
    assert missing_in(doc, tops()) == []


def test_docs_and_docstrings_name_only_files_that_exist():
    folders = tops()
    wrong = [w for path in documents() for w in missing_in(path, folders)]
    assert wrong == []
