"""scripts/baml_generate.py run as a command: --check says the committed
client is what the generator makes now."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_check_command_reports_fresh_client():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "baml_generate.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
