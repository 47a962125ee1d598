"""Dataset tests never touch the network: only ``file://`` URLs may be opened."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from dataflow.dataset import _download


def _offline_urlopen(url, *args, **kwargs):
    if isinstance(url, str) and url.startswith("file://"):
        return urllib.request.urlopen(url, *args, **kwargs)
    raise urllib.error.URLError(f"network access is disabled in tests ({url})")


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    monkeypatch.setattr(_download, "urlopen", _offline_urlopen)
    for var in _download.DATASET_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
