"""The data files' existence check on S3 (moto): a prefix holding many of a plan's files is
listed, the plan's other files get a HEAD each; the mask is the same either way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import obstore
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_delta.core import plan_snapshot
from airflow_provider_delta.errors import MissingDataFileError, StorageAccessError
from airflow_provider_delta.spark.reader import check_files_exist
from airflow_provider_delta.storage import common_folder, missing_file_mask, split_folders
from tests.conftest import S3_BUCKET, S3_SECRET
from tests.moto_s3 import counted_requests, put_tree, scratch_bucket


def _table_of_copies(path: Path, files_by_partition: dict[int, int]) -> None:
    """A Delta table partitioned by ``p`` whose second commit adds copies of its first file:
    ``files_by_partition[p]`` files in folder ``p=<p>``."""
    write_deltalake(str(path), pa.table({"id": [0], "p": [0]}), partition_by=["p"])
    first = next(path.glob("p=0/*.parquet"))
    adds = []
    for part, count in files_by_partition.items():
        (path / f"p={part}").mkdir(exist_ok=True)
        for number in range(count):
            name = f"p={part}/copy-{number:05d}.parquet"
            shutil.copyfile(first, path / name)
            adds.append({"add": {"path": name, "partitionValues": {"p": str(part)},
                                 "size": first.stat().st_size, "modificationTime": 0,
                                 "dataChange": True}})
    commit = [{"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE"}}, *adds]
    (path / "_delta_log" / f"{1:020d}.json").write_text(
        "\n".join(json.dumps(action) for action in commit) + "\n")


def _uploaded_with_some_deleted(tmp_path, s3_store, s3_options, name, files_by_partition,
                                deleted):
    """The table in the bucket, ``deleted`` (paths inside it) removed; its plan, the plan's
    paths and the expected mask."""
    _table_of_copies(tmp_path / name, files_by_partition)
    uri = put_tree(tmp_path / name, name)
    if deleted:
        obstore.delete(s3_store, [f"{name}/{path}" for path in deleted])
    plan = plan_snapshot(uri, storage_options=s3_options)
    paths = plan.file_table.column("path").combine_chunks()
    expected = np.array([p.removeprefix(f"{uri}/") in deleted for p in paths.to_pylist()])
    return plan, paths, expected


def test_a_prefix_with_many_plan_files_is_listed_the_others_headed(tmp_path, s3_store, s3_options):
    deleted = {"p=0/copy-00007.parquet", "p=0/copy-00411.parquet", "p=2/copy-00001.parquet"}
    plan, paths, expected = _uploaded_with_some_deleted(
        tmp_path, s3_store, s3_options, "many-in-one", {0: 600, 1: 3, 2: 3, 3: 3}, deleted)
    assert len(paths) == 610
    with counted_requests(s3_options) as (counted, requests):
        mask = missing_file_mask(paths, plan.table_uri, counted)
        with pytest.raises(MissingDataFileError) as error:
            check_files_exist(plan, counted)
    assert (mask == expected).all() and mask.sum() == 3
    assert error.value.path in {f"{plan.table_uri}/{path}" for path in deleted}
    # Each check: p=0's 601 files by one listing (601 keys: one page), the 9 others by HEADs.
    assert requests == {"GET": 2, "HEAD": 18}, requests


def test_many_partition_folders_of_few_files_are_listed_under_the_table(
        tmp_path, s3_store, s3_options):
    """Partition folders of 2 files each are too small to list one by one; together they are
    listed once from the table's prefix (past its _delta_log), a page per 1,000 keys."""
    deleted = {"p=5/copy-00000.parquet", "p=299/copy-00001.parquet"}
    plan, paths, expected = _uploaded_with_some_deleted(
        tmp_path, s3_store, s3_options, "partitioned", {p: 2 for p in range(300)}, deleted)
    with counted_requests(s3_options) as (counted, requests):
        mask = missing_file_mask(paths, plan.table_uri, counted)
    assert (mask == expected).all() and mask.sum() == 2
    assert requests == {"GET": 1}, requests


def test_a_listing_that_would_cost_more_than_heads_stops(tmp_path, s3_store, s3_options):
    """301 plan files among 10,000 other keys (about 34 before each): the listing stops after
    7 pages, the files past it get HEADs; a missing file is found on either side."""
    name = "crowded"
    _table_of_copies(tmp_path / name, {0: 300})
    uri = put_tree(tmp_path / name, name)
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for number in range(10_000):  # not in the plan: copy-00003.05.old... sorts before copy-00003
        backend.put_object(S3_BUCKET, f"{name}/p=0/copy-{number // 34:05d}.{number % 34:02d}"
                           ".old.parquet", b"")
    deleted = {f"{name}/p=0/copy-00010.parquet", f"{name}/p=0/copy-00299.parquet"}
    obstore.delete(s3_store, list(deleted))
    plan = plan_snapshot(uri, storage_options=s3_options)
    paths = plan.file_table.column("path").combine_chunks()
    with counted_requests(s3_options) as (counted, requests):
        mask = missing_file_mask(paths, plan.table_uri, counted)
    assert {paths[int(row)].as_py() for row in np.flatnonzero(mask)} == {
        f"s3://{S3_BUCKET}/{key}" for key in deleted}
    # Up to 20 keys a plan file: 6,020 keys, 7 pages; they reach about copy-00205.
    assert requests["GET"] == 7 and 50 < requests["HEAD"] < 150, requests


@pytest.mark.slow  # 100,000 keys in moto, which scans them all on each listing: minutes
def test_a_plan_of_100000_files_in_a_few_prefixes_lists_a_page_per_1000(s3_options):
    """100,000 files in 4 partition folders: each folder is listed from its first file to its
    last, 1,000 keys a page (S3's most), so the check sends one request a page (100 here,
    against 100,000 HEADs) and none per file; files missing in every folder are found."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    keys = [f"big/p={n % 4}/part-{n:06d}.parquet" for n in range(100_000)]
    deleted = {keys[n] for n in (7, 24_996, 49_985, 74_974)}  # one in each folder
    with scratch_bucket("many-files") as bucket:
        for key in keys:
            if key not in deleted:
                backend.put_object(bucket, key, b"")
        uris = pa.array([f"s3://{bucket}/{key}" for key in keys], pa.string())
        with counted_requests(s3_options) as (counted, requests):
            mask = missing_file_mask(uris, f"s3://{bucket}/big", counted)
    assert {keys[row] for row in np.flatnonzero(mask)} == deleted and len(deleted) == 4
    assert requests == {"GET": 100}, requests


def test_refused_credentials_on_a_listing_are_permanent(tmp_path, s3_store, s3_options, request):
    plan, paths, _ = _uploaded_with_some_deleted(
        tmp_path, s3_store, s3_options, "refused", {0: 300}, set())
    request.getfixturevalue("moto_checks_credentials")
    wrong = {**s3_options, "AWS_ACCESS_KEY_ID": "AKIAWRONG"}
    with pytest.raises(StorageAccessError) as caught:
        check_files_exist(plan, wrong)
    message = str(caught.value)
    assert caught.value.permanent and plan.table_uri in message and "403" in message
    assert "AWS_ACCESS_KEY_ID" in message and S3_SECRET not in message


def test_local_files_listed_or_statted_give_the_same_mask(tmp_path):
    """The local rule the object-store one follows: p=0's 301 files by one listing, the others
    by a stat each."""
    path = tmp_path / "local"
    _table_of_copies(path, {0: 300, 1: 3})
    deleted = {"p=0/copy-00123.parquet", "p=1/copy-00002.parquet"}
    for name in deleted:
        (path / name).unlink()
    plan = plan_snapshot(str(path))
    paths = plan.file_table.column("path").combine_chunks()
    mask = missing_file_mask(paths, plan.table_uri, None)
    assert {paths[int(row)].as_py().rpartition("/local/")[2] for row in np.flatnonzero(mask)
            } == deleted


def test_local_paths_split_into_folder_and_name():
    """The split the local check groups by (one folder is listed once, without hashing)."""
    paths = pa.array(["/t/p=1/a.parquet", "/t/b.parquet", "/c.parquet", "/t/_x=1/.d", "e"])
    folders, names = split_folders(paths)
    assert folders.to_pylist() == ["/t/p=1", "/t", "", "/t/_x=1", ""]
    assert names.to_pylist() == ["a.parquet", "b.parquet", "c.parquet", ".d", "e"]



def test_files_of_one_folder_are_looked_up_in_its_listing(tmp_path):
    """All of a plan's files in one folder (p=0 alone): the folder is taken from the first path,
    listed once, and the missing ones still found, whatever URI spells the table."""
    path = tmp_path / "one folder"
    _table_of_copies(path, {0: 300})
    deleted = {"p=0/copy-00000.parquet", "p=0/copy-00299.parquet"}
    for name in deleted:
        (path / name).unlink()
    for location in (str(path), f"file://{path}", f"file://localhost{path}"):
        paths = plan_snapshot(location).file_table.column("path").combine_chunks()
        mask = missing_file_mask(paths, location, None)
        assert sorted(paths.filter(pa.array(mask)).to_pylist()) == sorted(
            p for p in paths.to_pylist() if p.rpartition("/one folder/")[2] in deleted)
    (path / "p=0").rename(tmp_path / "moved")
    paths = plan_snapshot(str(path)).file_table.column("path").combine_chunks()
    assert missing_file_mask(paths, str(path), None).all()


def test_the_common_folder_of_paths():
    assert common_folder(pa.array(["file:///t/a", "file:///t/b"])) == (
        "file:///t/", pa.array(["a", "b"]))
    assert common_folder(pa.array(["/t/p=1/a", "/t/p=1/b"]))[0] == "/t/p=1/"
    for several in (["/t/a", "/t/p=1/b"], ["/t/p=1/a", "/t/b"], ["/t/a", "/u/b"], ["a", "b"],
                    ["/t/a", None], []):
        assert common_folder(pa.array(several, pa.string())) is None
