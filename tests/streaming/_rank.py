"""One training rank, run as its own process by the elastic tests.

Its identity comes from ``RANK``/``WORLD_SIZE``; it reads ``StreamingShards`` through
``dataflow.torch`` with ``WORKERS`` DataLoader workers (0: none; then without torch), optionally
loads a state first (``STATE_IN``), stops after ``STOP`` samples, and prints one JSON line:
``{"cls": [...], "state": ...}``.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    from dataflow import MapData
    from dataflow.streaming.source import StreamingShards

    urls = json.loads(os.environ["URLS"])
    workers = int(os.environ["WORKERS"])
    stop = int(os.environ.get("STOP", "-1"))
    ds = StreamingShards(urls, seed=11, window=9)
    ds.reset_state()
    if os.environ.get("STATE_IN"):
        ds.load_state_dict(json.loads(os.environ["STATE_IN"]))
    out: list[int] = []
    state = None
    if workers == 0:
        it = iter(ds)  # held until the state is taken: a closed iterator ends its epoch
        for dp in it:
            out.append(int(dp["cls"]))
            if len(out) == stop:
                break
        state = ds.state_dict() if stop >= 0 else None
        it.close()
    else:
        from torch.utils.data import DataLoader

        from dataflow.torch import to_torch

        flow = MapData(ds, lambda d: int(d["cls"]))
        loader = DataLoader(to_torch(flow), batch_size=None, num_workers=workers)
        out = [int(x) for x in loader]
    ds.close()
    sys.stdout.write(json.dumps({"cls": out, "state": state}) + "\n")


if __name__ == "__main__":
    main()
