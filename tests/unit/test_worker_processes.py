"""agents.py --processes (runtime/worker/processes.py): each worker's options."""
import pytest

import agents
from runtime.worker.processes import default_processes, worker_argv


def test_each_worker_runs_one_process_on_its_own_ports_and_id():
    argv = ["--data-dir", "/srv/a", "--processes", "3", "--health-port", "9101"]
    args = agents.parse_args(argv)
    second = agents.parse_args(worker_argv(argv, 1, worker_id="box", health_port=args.health_port,
                                           metrics_port=args.metrics_port))
    assert (second.processes, second.health_port, second.metrics_port, second.worker_id) == (1, 9102, 0, "box-1")
    assert second.data_dir == "/srv/a"
    first = agents.parse_args(worker_argv(argv, 0, worker_id=None, health_port=args.health_port, metrics_port=0))
    assert (first.health_port, first.worker_id) == (9101, None)
    # table upkeep in worker 0 alone
    assert first.maintain_every_versions == args.maintain_every_versions > 0 and second.maintain_every_versions == 0


def test_each_worker_paces_its_commits_by_the_number_of_workers():
    """--commit-interval is the whole agents.py's: each of 3 workers paces 3 times
    as far apart, a value given by the operator (flag or environment) included."""
    for argv, interval in ((["--processes", "3"], 0.05), (["--processes", "3", "--commit-interval", "0.2"], 0.2)):
        args = agents.parse_args(argv)
        assert args.commit_interval == interval
        workers = [agents.parse_args(worker_argv(argv, i, worker_id=None, health_port=0, metrics_port=0,
                                                 commit_interval_s=args.commit_interval, processes=3))
                   for i in range(3)]
        assert [w.commit_interval for w in workers] == [pytest.approx(3 * interval)] * 3
        assert all(w.processes == 1 for w in workers)
    one = agents.parse_args(worker_argv(["--processes", "1"], 0, worker_id=None, health_port=0, metrics_port=0,
                                        commit_interval_s=0.05, processes=1))
    assert one.commit_interval == 0.05


def test_the_default_is_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.delenv("AGENTSVC_PROCESSES", raising=False)
    assert agents.parse_args([]).processes == default_processes() >= 1
    monkeypatch.setenv("AGENTSVC_PROCESSES", "3")
    assert agents.parse_args([]).processes == 3
