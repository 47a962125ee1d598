"""Data-directory resolution, safe downloads and archive extraction (file:// URLs only)."""

from __future__ import annotations

import os
import tarfile

import pytest

from dataflow.dataset import (
    DatasetNotFoundError,
    DownloadError,
    _download,
    download,
    get_dataset_path,
)
from tests.dataset.writers import bytes_io_tar


def _leftovers(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if ".tmp-" in n or ".extract" in n)


def test_dataset_path_prefers_dataflow_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DATAFLOW_DATASET", str(tmp_path / "a"))
    monkeypatch.setenv("TENSORPACK_DATASET", str(tmp_path / "b"))
    assert get_dataset_path("mnist_data") == str(tmp_path / "a" / "mnist_data")


def test_dataset_path_falls_back_to_tensorpack_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORPACK_DATASET", str(tmp_path / "b"))
    assert get_dataset_path("x", "y") == str(tmp_path / "b" / "x" / "y")


def test_dataset_path_default_is_under_home_and_creates_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert get_dataset_path("cifar10_data") == str(tmp_path / "dataflow_data" / "cifar10_data")
    assert os.listdir(tmp_path) == []


def test_download_file_url(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"0123456789" * 1000)
    out = download(src.as_uri(), tmp_path / "dst", expect_size=10000)
    assert out == str(tmp_path / "dst" / "src.bin")
    assert (tmp_path / "dst" / "src.bin").read_bytes() == b"0123456789" * 1000
    assert _leftovers(tmp_path / "dst") == []


def test_download_wrong_size_leaves_nothing(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"abc")
    with pytest.raises(DownloadError, match=r"gave 3 bytes, expected 4"):
        download(src.as_uri(), tmp_path / "dst", "f.bin", expect_size=4)
    assert not (tmp_path / "dst").exists()  # the folder it made is removed too


def test_download_empty_is_an_error(tmp_path):
    src = tmp_path / "empty"
    src.write_bytes(b"")
    with pytest.raises(DownloadError, match="empty"):
        download(src.as_uri(), tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


class _BrokenResponse:
    """A response whose stream breaks after the first chunk (a dropped connection)."""

    headers = None

    def __init__(self):
        self.calls = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self, n):
        self.calls += 1
        if self.calls == 1:
            return b"partial"
        raise ConnectionResetError("connection reset by peer")


def test_interrupted_download_never_remains_under_final_name(monkeypatch, tmp_path):
    monkeypatch.setattr(_download, "urlopen", lambda url, timeout: _BrokenResponse())
    with pytest.raises(ConnectionResetError):
        download("http://example.invalid/data.bin", tmp_path)
    assert os.listdir(tmp_path) == []


def test_existing_file_of_right_size_is_kept_without_network(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"1234")
    assert download("http://example.invalid/f.bin", tmp_path, expect_size=4) == str(
        tmp_path / "f.bin"
    )


def test_existing_file_of_wrong_size_is_downloaded_again(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.bin").write_bytes(b"fresh")
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "f.bin").write_bytes(b"old")
    download((src / "f.bin").as_uri(), dst, expect_size=5)
    assert (dst / "f.bin").read_bytes() == b"fresh"


def test_download_rejects_a_path_as_filename(tmp_path):
    with pytest.raises(ValueError, match="plain file name"):
        download("http://example.invalid/x", tmp_path, filename="../x")


def test_ensure_files_error_names_files_url_and_folder(tmp_path):
    folder = str(tmp_path / "data")
    with pytest.raises(DatasetNotFoundError) as info:
        _download.ensure_files("Thing", folder, "http://example.invalid/base/", {"a.gz": 10})
    msg = str(info.value)
    assert "'a.gz'" in msg
    assert "http://example.invalid/base/a.gz" in msg
    assert repr(folder) in msg
    assert isinstance(info.value, FileNotFoundError)
    assert not os.path.exists(folder)


def test_ensure_files_keeps_present_files_whatever_their_size(tmp_path):
    (tmp_path / "a.gz").write_bytes(b"x")
    _download.ensure_files("Thing", str(tmp_path), "http://example.invalid/", {"a.gz": 999})
    assert (tmp_path / "a.gz").read_bytes() == b"x"


def test_ensure_extracted_downloads_and_extracts(tmp_path):
    archive = tmp_path / "pkg.tar.gz"
    archive.write_bytes(bytes_io_tar({"top/a.txt": b"A", "top/sub/b.txt": b"B"}))
    folder = tmp_path / "data"
    size = archive.stat().st_size
    out = _download.ensure_extracted("T", str(folder), "top", archive.as_uri(), "p.tgz", size)
    assert out == str(folder / "top")
    assert (folder / "top" / "sub" / "b.txt").read_bytes() == b"B"
    assert sorted(os.listdir(folder)) == ["p.tgz", "top"]
    # a second call finds the extracted folder and touches nothing
    (folder / "p.tgz").unlink()
    assert _download.ensure_extracted("T", str(folder), "top", "http://x.invalid/", "p.tgz", 1)


def test_ensure_extracted_error_mentions_archive_and_folder(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        _download.ensure_extracted(
            "T", str(tmp_path), "top", "http://example.invalid/p.tgz", "p.tgz", 5
        )
    msg = str(info.value)
    assert "'top'" in msg
    assert "'p.tgz'" in msg
    assert "http://example.invalid/p.tgz" in msg
    assert repr(str(tmp_path)) in msg


def test_ensure_extracted_wrong_archive_content(tmp_path):
    (tmp_path / "p.tgz").write_bytes(bytes_io_tar({"other/a.txt": b"A"}))
    with pytest.raises(DatasetNotFoundError, match=r"does not contain 'top'"):
        _download.ensure_extracted("T", str(tmp_path), "top", "http://x.invalid/", "p.tgz", None)


def test_ensure_extracted_damaged_archive(tmp_path):
    (tmp_path / "p.tgz").write_bytes(b"this is not a tarball")
    with pytest.raises(ValueError, match="damaged"):
        _download.ensure_extracted("T", str(tmp_path), "top", "http://x.invalid/", "p.tgz", None)
    assert _leftovers(tmp_path) == []


def test_ensure_extracted_refuses_members_escaping_the_folder(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "p.tgz").write_bytes(bytes_io_tar({"top/ok.txt": b"ok", "../evil.txt": b"x"}))
    with pytest.raises(ValueError, match="cannot extract") as info:
        _download.ensure_extracted("T", str(folder), "top", "http://x.invalid/", "p.tgz", None)
    assert isinstance(info.value.__cause__, tarfile.TarError)
    assert not (tmp_path / "evil.txt").exists()
    assert not (folder / "top").exists()


def test_download_checks_md5(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"hello")
    good = "5d41402abc4b2a76b9719d911017c592"  # md5(b"hello")
    with pytest.raises(DownloadError, match=f"MD5 {good}, expected 0123"):
        download(src.as_uri(), tmp_path / "dst", expect_md5="0123")
    assert not (tmp_path / "dst").exists()
    download(src.as_uri(), tmp_path / "dst", expect_md5=good.upper())
    assert (tmp_path / "dst" / "src.bin").read_bytes() == b"hello"


def test_downloaded_file_is_world_readable(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"x")
    out = download(src.as_uri(), tmp_path / "dst")
    assert os.stat(out).st_mode & 0o777 == 0o644


def test_failed_download_keeps_a_folder_that_existed(tmp_path):
    (tmp_path / "dst").mkdir()
    src = tmp_path / "src.bin"
    src.write_bytes(b"abc")
    with pytest.raises(DownloadError, match=r"gave 3 bytes, expected 4"):
        download(src.as_uri(), tmp_path / "dst" / "a" / "b", "f.bin", expect_size=4)
    assert sorted(os.listdir(tmp_path)) == ["dst", "src.bin"]
    assert os.listdir(tmp_path / "dst") == []
