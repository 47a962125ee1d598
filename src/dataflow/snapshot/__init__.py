"""Persistent snapshots of a pipeline's deterministic part, read by position.

``source``: the shared by-position reader of flows (also used by the data service, which reads
this layer and is never imported by it).
"""
