"""dataflow.utils.utils: tensorpack's utils.utils helpers."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import dataflow
from dataflow.utils import utils


@pytest.mark.parametrize(("sec", "text"), [
    (0, "0 seconds"),
    (0.01, "0.01 seconds"),
    (1, "1 second"),
    (61, "1 minute 1 second"),
    (87.6, "1 minute 27 seconds"),
    (3600, "1 hour"),
    (3661, "1 hour 1 minute 1 second"),
    (86400 + 1, "1 day 1 second"),
    (86400 + 9 * 3600 + 2 * 60 + 3, "1 day 9 hours 2 minutes 3 seconds"),
    (2 * 86400 + 7200, "2 days 2 hours"),
])
def test_humanize_time_delta(sec, text):
    assert utils.humanize_time_delta(sec) == text


def test_humanize_time_delta_rejects_negative():
    with pytest.raises(ValueError, match="`sec` must be >= 0"):
        utils.humanize_time_delta(-1)


def test_change_env_sets_unsets_and_restores(monkeypatch):
    monkeypatch.setenv("DATAFLOW_TEST_VAR", "old")
    with utils.change_env("DATAFLOW_TEST_VAR", "new"):
        assert os.environ["DATAFLOW_TEST_VAR"] == "new"
    assert os.environ["DATAFLOW_TEST_VAR"] == "old"
    with utils.change_env("DATAFLOW_TEST_VAR", None):
        assert "DATAFLOW_TEST_VAR" not in os.environ
    assert os.environ["DATAFLOW_TEST_VAR"] == "old"
    monkeypatch.delenv("DATAFLOW_TEST_VAR")
    with pytest.raises(KeyError), utils.change_env("DATAFLOW_TEST_VAR", "x"):
        raise KeyError("restored on errors too")
    assert "DATAFLOW_TEST_VAR" not in os.environ


def test_execute_only_once_is_true_once_per_line():
    first = [utils.execute_only_once() for _ in range(3)]
    second = [utils.execute_only_once() for _ in range(2)]
    assert (first, second) == ([True, False, False], [True, False])


def test_fix_rng_seed_gives_every_get_rng_the_same_stream():
    utils.fix_rng_seed(5)
    a, b = utils.get_rng().randint(0, 1000, 5), utils.get_rng().randint(0, 1000, 5)
    assert a.tolist() == b.tolist()
    assert dataflow.get_seed() == 5
    assert np.random.rand() == np.random.RandomState(5).rand()
    assert random.random() == random.Random(5).random()
    utils.fix_rng_seed(6)
    assert utils.get_rng().randint(0, 1000, 5).tolist() != a.tolist()


def test_they_are_the_packages_functions():
    assert utils.get_rng is dataflow.rng.get_rng
    assert dataflow.utils.fix_rng_seed is utils.fix_rng_seed
    assert dataflow.utils.get_tqdm is utils.get_tqdm


def test_get_tqdm_kwargs_reads_tensorpacks_refresh_variable():
    with utils.change_env("DATAFLOW_PROGRESS_REFRESH", None), \
            utils.change_env("TENSORPACK_PROGRESS_REFRESH", "2.5"):
        kw = utils.get_tqdm_kwargs(leave=False)
    assert (kw["mininterval"], kw["leave"], kw["smoothing"], kw["ascii"]) == (2.5, False, 0.5,
                                                                               True)
