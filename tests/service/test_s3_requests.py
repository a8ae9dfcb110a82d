"""The S3 request counter the object-storage benchmarks read (tests/servers.py:
``SeaweedProc.requests``, SeaweedFS's own Prometheus counters), checked against
requests whose number is known: boto3 calls one by one, and LanceDB appends.

bench/bench_s3.py turns these counts into requests and dollars per step; if
the counter missed or double-counted a kind, every figure there would be off.
"""
import pyarrow as pa
import pytest

from tests.servers import s3_client, seaweedfs_s3


@pytest.fixture(scope="module")
def seaweedfs(tmp_path_factory):
    proc, endpoint = seaweedfs_s3(str(tmp_path_factory.mktemp("seaweedfs")))
    yield proc, endpoint
    proc.stop()


def delta(before: dict, after: dict) -> dict:
    return {kind: n - before.get(kind, 0) for kind, n in after.items() if n != before.get(kind, 0)}


def test_counts_boto3_calls_by_type(seaweedfs):
    proc, endpoint = seaweedfs
    client = s3_client(endpoint)
    client.create_bucket(Bucket="counted")
    before = proc.requests("counted")
    client.put_object(Bucket="counted", Key="a", Body=b"1")
    client.put_object(Bucket="counted", Key="b", Body=b"2")
    client.get_object(Bucket="counted", Key="a")
    client.head_object(Bucket="counted", Key="a")  # SeaweedFS counts a HEAD as a GET
    client.list_objects_v2(Bucket="counted")
    client.copy_object(Bucket="counted", Key="c", CopySource={"Bucket": "counted", "Key": "a"})
    client.delete_object(Bucket="counted", Key="b")
    assert delta(before, proc.requests("counted")) == {"PUT": 2, "GET": 2, "LIST": 1, "COPY": 1, "DELETE": 1}
    # Another bucket's requests are not this one's; the total counts both.
    client.create_bucket(Bucket="other")
    total = proc.requests()
    client.put_object(Bucket="other", Key="a", Body=b"1")
    assert delta(before, proc.requests("counted")) == {"PUT": 2, "GET": 2, "LIST": 1, "COPY": 1, "DELETE": 1}
    assert delta(total, proc.requests()) == {"PUT": 1}


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
    before = proc.requests("lance")
    for i in range(4):
        table.add(pa.table({"id": [f"r{i}"], "v": [i]}))
    assert delta(before, proc.requests("lance")) == {"PUT": 12, "LIST": 4}
    assert table.count_rows() == 5
