"""The S3 request counter the object-storage benchmarks read (tests/servers.py:
``SeaweedProc.requests``, SeaweedFS's own Prometheus counters), checked against
requests whose number is known: boto3 calls one by one, and LanceDB appends.

bench/bench_s3.py turns these counts into requests and dollars per step; if
the counter missed or double-counted a kind, every figure there would be off.
"""
import time

import pyarrow as pa
import pytest

from tests.harness import wait_for
from tests.servers import s3_client, seaweedfs_s3


@pytest.fixture(scope="module")
def seaweedfs(tmp_path_factory):
    proc, endpoint = seaweedfs_s3(str(tmp_path_factory.mktemp("seaweedfs")))
    yield proc, endpoint
    proc.stop()


def delta(before: dict, after: dict) -> dict:
    return {kind: n - before.get(kind, 0) for kind, n in after.items() if n != before.get(kind, 0)}


def counted(proc, expected: dict, before: dict, bucket: str | None = None) -> None:
    """The counter shows ``expected`` requests since ``before``.  SeaweedFS may
    count a request after it has answered it, so the counter is read until it
    shows them (a count above them never comes down: the wait then fails)."""
    wait_for(lambda: delta(before, proc.requests(bucket)) == expected, timeout=30,
             what=f"the counter to show {expected} (it shows {delta(before, proc.requests(bucket))})")


def settled(proc, bucket: str | None = None) -> dict:
    """The count once it has stopped moving: every request answered so far is in it."""
    def same_twice():
        first = proc.requests(bucket)
        time.sleep(0.5)
        return first == proc.requests(bucket) and first
    return wait_for(same_twice, timeout=30, what="the count to settle")


def test_counts_boto3_calls_by_type(seaweedfs):
    proc, endpoint = seaweedfs
    client = s3_client(endpoint)
    client.create_bucket(Bucket="counted")
    before = settled(proc, "counted")
    client.put_object(Bucket="counted", Key="a", Body=b"1")
    client.put_object(Bucket="counted", Key="b", Body=b"2")
    client.get_object(Bucket="counted", Key="a")
    client.head_object(Bucket="counted", Key="a")  # SeaweedFS counts a HEAD as a GET
    client.list_objects_v2(Bucket="counted")
    client.copy_object(Bucket="counted", Key="c", CopySource={"Bucket": "counted", "Key": "a"})
    client.delete_object(Bucket="counted", Key="b")
    counted(proc, {"PUT": 2, "GET": 2, "LIST": 1, "COPY": 1, "DELETE": 1}, before, "counted")
    # Another bucket's requests are not this one's; the total counts both.
    client.create_bucket(Bucket="other")
    total = settled(proc)
    client.put_object(Bucket="other", Key="a", Body=b"1")
    counted(proc, {"PUT": 1}, total)
    assert delta(before, proc.requests("counted")) == {"PUT": 2, "GET": 2, "LIST": 1, "COPY": 1, "DELETE": 1}


def test_counts_a_lancedb_append(seaweedfs):
    """A LanceDB append on object storage is three PUTs (data file, transaction,
    manifest) and one LIST (the latest manifest, looked up before committing)."""
    import lancedb
    proc, endpoint = seaweedfs
    s3_client(endpoint).create_bucket(Bucket="lance")
    options = {"aws_endpoint": endpoint, "aws_region": "us-east-1", "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing", "allow_http": "true"}
    table = lancedb.connect("s3://lance/db", storage_options=options).create_table(
        "t", pa.table({"id": ["a"], "v": [0]}))
    before = settled(proc, "lance")  # the create's last PUT was once counted after a read here
    for i in range(4):
        table.add(pa.table({"id": [f"r{i}"], "v": [i]}))
    counted(proc, {"PUT": 12, "LIST": 4}, before, "lance")
    assert table.count_rows() == 5


def test_an_idle_service_on_object_storage_stays_under_half_the_old_rate(seaweedfs, tmp_path):
    """agents.py and app.py on a bucket, nothing to do, agents.py's defaults (on
    object storage: idle saving, heartbeat every dead-after / 4 = 7.5 s, idle
    poll up to 2 s): the requests of a 30 s window, scaled to an hour, stay
    under 30,000, half of what an idle service made before idle saving (59,792
    to 62,015 an hour, BENCHMARKS.md "What the store costs on S3"; ~8,000 after).
    A loaded machine only makes fewer requests: every chore waits its period."""
    import json
    import time

    from tests.harness import Service, wait_for

    proc, endpoint = seaweedfs
    bucket = "idle"
    s3_client(endpoint).create_bucket(Bucket=bucket)
    options = {"aws_endpoint": endpoint, "aws_region": "us-east-1", "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing", "allow_http": "true"}
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AGENTSVC_DB_URI": f"s3://{bucket}/agents", "AGENTSVC_STORAGE_OPTIONS": json.dumps(options)}
    (tmp_path / "logs").mkdir()
    svc = Service(str(tmp_path / "data"), str(tmp_path / "logs"), env=env).start()
    try:
        wait_for(lambda: svc.http.get(svc.url + "/readyz", timeout=10).status_code == 200, timeout=180,
                 what="the worker polling the queue")
        before, start = proc.requests(bucket), time.monotonic()
        time.sleep(30)  # the window: what an idle hour costs is a rate
        counts, elapsed = delta(before, proc.requests(bucket)), time.monotonic() - start
    finally:
        svc.stop()
    per_hour = {kind: round(n * 3600 / elapsed) for kind, n in counts.items()}
    assert sum(per_hour.values()) < 30_000, per_hour
