"""tests/forkserver.py: a process it starts is the script run as ``python script
args`` would run it (argv, working directory, environment, log, ``__main__``, the
project's modules imported fresh), answers like ``subprocess.Popen`` (exit codes,
signals, a timeout), and can use LanceDB after the fork."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests import forkserver
from tests.harness import wait_for

pytestmark = pytest.mark.skipif(not forkserver.ENABLED, reason="AGENTSVC_TEST_FORKSERVER=0")

SCRIPT = textwrap.dedent("""
    import json, os, sys
    preloaded = sorted(m for m in ("settings", "store", "runtime", "api") if m in sys.modules)
    import lancedb
    db = lancedb.connect(sys.argv[2])
    table = db.create_table("t", data=[{"n": 1}, {"n": 2}])
    print(json.dumps({"name": __name__, "argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0],
                      "env": os.environ.get("FORKSERVER_CANARY"), "keys": sorted(os.environ),
                      "preloaded": preloaded, "rows": table.count_rows(), "pid": os.getpid(),
                      "hash_randomization": sys.flags.hash_randomization,
                      "on_pythonpath": __import__("canary_plugin").NAME if os.environ.get("PYTHONPATH") else None}))
    sys.exit(int(sys.argv[1]))
""")


def base_env(**more) -> dict:
    """PATH and the variables read at start as this process has them (any other value
    of those gets a fresh interpreter, as the PYTHONHASHSEED test shows)."""
    return {**{k: v for k, v in os.environ.items() if k.startswith(forkserver.AT_START)},
            "PATH": os.environ["PATH"], **more}


def run(tmp_path, *args, env=None) -> forkserver.ForkedProcess:
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    return forkserver.spawn([str(script), *args], cwd=str(tmp_path), log=str(tmp_path / "probe.log"),
                            env=base_env(FORKSERVER_CANARY="yes", **(env or {})))


def test_a_started_script_runs_as_its_own_main_with_its_argv_cwd_env_and_log(tmp_path):
    proc = run(tmp_path, "3", str(tmp_path / "db"))
    assert proc.wait(timeout=120) == 3 and proc.returncode == 3
    seen = json.loads((tmp_path / "probe.log").read_text().strip().splitlines()[-1])
    assert seen["name"] == "__main__"
    assert seen["argv"] == ["3", str(tmp_path / "db")]
    assert seen["cwd"] == str(tmp_path) and seen["path0"] == str(tmp_path)
    assert seen["env"] == "yes" and seen["keys"] == sorted(base_env(FORKSERVER_CANARY="yes"))  # exactly what it was given
    assert seen["preloaded"] == []  # none of the project's modules come from the server
    assert seen["rows"] == 2  # LanceDB works in the forked child
    assert seen["pid"] == proc.pid != os.getpid()


def test_pythonpath_is_searched_and_a_start_variable_gets_a_fresh_interpreter(tmp_path):
    """PYTHONPATH is read when an interpreter starts: the child builds its sys.path
    from the one it was given (a plugin installed there is found).  A variable the
    server cannot give a forked child (PYTHONHASHSEED) makes the start a plain Popen."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "canary_plugin.py").write_text("NAME = 'canary-plugin'\n")
    proc = run(tmp_path, "0", str(tmp_path / "db"), env={"PYTHONPATH": str(tmp_path / "plugins")})
    assert isinstance(proc, forkserver.ForkedProcess) and proc.wait(timeout=120) == 0
    seen = json.loads((tmp_path / "probe.log").read_text().strip().splitlines()[-1])
    assert seen["on_pythonpath"] == "canary-plugin" and seen["hash_randomization"] == 1

    proc = run(tmp_path, "0", str(tmp_path / "db2"), env={"PYTHONHASHSEED": "0"})
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=120) == 0
    seen = json.loads((tmp_path / "probe.log").read_text().strip().splitlines()[-1])
    assert seen["hash_randomization"] == 0


def test_signals_and_timeouts_answer_as_popen_does(tmp_path):
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    proc = forkserver.spawn([str(sleeper)], cwd=str(tmp_path), log=str(tmp_path / "s.log"),
                            env=base_env())
    wait_for(lambda: "up" in (tmp_path / "s.log").read_text(), timeout=120, what="the sleeper to start")
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    proc.kill()  # signalling an ended process does nothing, as with Popen


def test_an_exception_in_the_script_exits_1_with_its_traceback_in_the_log(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('canary-boom')\n")
    proc = forkserver.spawn([str(broken)], cwd=str(tmp_path), log=str(tmp_path / "b.log"),
                            env=base_env())
    assert proc.wait(timeout=120) == 1
    assert "RuntimeError: canary-boom" in (tmp_path / "b.log").read_text()


def test_the_same_script_started_by_popen_says_the_same(tmp_path):
    """The control: a plain interpreter gives what the forked child gave."""
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), "0", str(tmp_path / "db2")], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"], "FORKSERVER_CANARY": "yes"})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert (seen["name"], seen["path0"], seen["env"], seen["preloaded"], seen["rows"]) == \
        ("__main__", str(tmp_path), "yes", [], 2)
