from __future__ import annotations

import pickle

import pytest

import dataflow as df
from dataflow.base import DataFlowReentrantGuard
from dataflow.errors import DataFlowReentrantError, UnknownLengthError


class LegacyFlow(df.DataFlow):
    """Defined with tensorpack's old method names only."""

    def get_data(self):
        yield from ([i] for i in range(3))

    def size(self):
        return 3


class NoLength(df.DataFlow):
    def __iter__(self):
        yield [1]
        yield [2]


def test_legacy_names_define_iter_and_len():
    flow = LegacyFlow()
    assert list(flow) == [[0], [1], [2]]
    assert len(flow) == 3
    assert list(flow.get_data()) == [[0], [1], [2]]
    assert flow.size() == 3


def test_legacy_names_call_new_methods():
    flow = df.DataFromList([[1], [2]], shuffle=False)
    assert list(flow.get_data()) == [[1], [2]]
    assert flow.size() == 2


def test_unknown_length_is_not_implemented_and_list_still_works():
    flow = NoLength()
    with pytest.raises(NotImplementedError, match="does not know its length"):
        len(flow)
    with pytest.raises(UnknownLengthError):
        flow.size()
    assert list(flow) == [[1], [2]]  # tensorpack raised here
    assert bool(flow) is True


def test_dataflow_is_abstract():
    with pytest.raises(TypeError):
        df.DataFlow()


def test_proxy_forwards_everything():
    inner = df.DataFromList([[1], [2], [3]], shuffle=False)
    proxy = df.ProxyDataFlow(inner)
    proxy.reset_state()
    assert len(proxy) == 3
    assert list(proxy) == [[1], [2], [3]]


def test_proxy_rejects_non_dataflow():
    with pytest.raises(TypeError, match=r"`ds` must be a DataFlow, got list.*DataFromList"):
        df.ProxyDataFlow([1, 2])


def test_reentrant_guard_message_and_type():
    guard = DataFlowReentrantGuard("X")
    with guard, pytest.raises(RuntimeError, match=r"X is not reentrant.*it\.close\(\)"):
        guard.__enter__()
    with guard:  # released again
        pass
    assert isinstance(DataFlowReentrantError("x"), RuntimeError)


def test_non_reentrant_flow_raises_while_iterating_and_recovers_after_close():
    flow = df.FixedSizeData(df.DataFromList([[i] for i in range(5)], shuffle=False), 4)
    flow.reset_state()
    it = iter(flow)
    assert next(it) == [0]
    with pytest.raises(DataFlowReentrantError, match="FixedSizeData is not reentrant"):
        next(iter(flow))
    it.close()
    assert list(flow) == [[1], [2], [3], [4]]


def test_guard_pickles_unlocked():
    guard = DataFlowReentrantGuard("Y")
    with guard:
        copy = pickle.loads(pickle.dumps(guard))
    with copy:
        pass


def test_context_manager_closes():
    closed = []

    class Closing(df.DataFlow):
        def __iter__(self):
            yield [0]

        def close(self):
            closed.append(True)

    with df.MapData(Closing(), lambda dp: dp) as flow:
        assert list(flow) == [[0]]
    assert closed == [True]


def test_data_flow_terminated_is_base_exception():
    assert issubclass(df.DataFlowTerminated, BaseException)
    assert not issubclass(df.DataFlowTerminated, Exception)


def test_worker_error_message_and_pickle():
    err = df.WorkerError("ValueError", "bad value", "Traceback...\nValueError: bad value\n",
                         worker_id=3, index=17, stage="MultiProcessMapDataZMQ")
    text = str(err)
    assert text.startswith("ValueError: bad value (raised in MultiProcessMapDataZMQ, worker 3, "
                           "input index 17)")
    assert "Remote traceback:\nTraceback...\nValueError: bad value" in text
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.exc_type, copy.exc_message, copy.worker_id, copy.index, copy.stage) == (
        "ValueError", "bad value", 3, 17, "MultiProcessMapDataZMQ")
    assert isinstance(copy, RuntimeError)
