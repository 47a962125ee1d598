"""Autotuned parallelism inside the engine: :mod:`.budget` (how many cores this process may
really use), :mod:`.controller` (the worker-count controller, a pure function of its
measurements) and :mod:`.stage` (a stage's live tuner, which measures windows of a mapper's run
and applies the controller's counts). The public entry points, :func:`dataflow.autotune` and
:func:`dataflow.ParallelMapData`, are in :mod:`dataflow.parallel.tuning`, above the back ends.
"""
