"""The end-to-end pipeline feeding a PyTorch training step: dataflow through ``to_torch`` against
a plain ``DataLoader`` with 2 workers over a map-style dataset doing the same work, in one run.

    flock /tmp/bench.lock .venv/bin/python benchmarks/bench_bridges.py [--images 3000]
        [--batches 50] [--rounds 3]

Workload (from bench_e2e.py): generated JPEGs (500x375, q90) in an LMDB; decode,
GoogleNetRandomCropAndResize(224), Flip(horiz), PCA Lighting; batches of 64. Training step (the
same in both): a small CNN on the batch subsampled 8x (every 8th pixel, uint8 NHWC -> float NCHW
28x28, conv 3->16, ReLU, pool, linear to 1000 classes, cross-entropy, SGD; ~3 ms), one intra-op
thread, in the main process: light enough that the input pipeline sets the pace.

  bridge      LMDBSerializer.load -> LocallyShuffleData(500) -> MultiProcessMapDataZMQ(2 procs,
              decode+augment) -> BatchData(64) -> to_torch -> DataLoader(batch_size=None,
              num_workers=0)
  bridge-mapbatch  the same with MultiProcessMapAndBatchDataZMQ (stacking in the workers)
  dataloader  torch Dataset (__getitem__: decode+augment of record i, records held in memory) ->
              DataLoader(batch_size=64, shuffle=True, num_workers=2, persistent_workers=True)

Each implementation runs in its own subprocess, alternating, ``--rounds`` times; the table shows
the best round of each (steps/s and images/s over ``--batches`` steps after 5 warm-up steps).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_e2e import (
    BATCH,
    SHUFFLE_BUFFER,
    DecodeAugment,
    _read_lmdb,
    lmdb_path,
    make_data,
)

IMPLS = ["bridge", "bridge-mapbatch", "dataloader"]
NPROC = 2
WARMUP = 5


def _train_step():
    import torch
    import torch.nn.functional as nnf

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(16 * 16, 1000),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(images, labels):
        x = images[:, ::8, ::8, :].permute(0, 3, 1, 2).float().div_(255.0)  # 224 -> 28
        loss = nnf.cross_entropy(model(x), labels.long())
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def _time(batches_itr, step, batches: int) -> float:
    for _ in range(WARMUP):
        step(*next(batches_itr))
    t0 = time.perf_counter()
    for _ in range(batches):
        step(*next(batches_itr))
    return time.perf_counter() - t0


def run_bridge(path: Path, batches: int, mapbatch: bool = False) -> float:
    import torch
    from torch.utils.data import DataLoader

    from dataflow import imgaug
    from dataflow.parallel import MultiProcessMapAndBatchDataZMQ, MultiProcessMapDataZMQ
    from dataflow.serialize import LMDBSerializer
    from dataflow.torch import to_torch
    from dataflow.wrappers import BatchData, LocallyShuffleData, RepeatedData

    torch.set_num_threads(1)
    ds = LMDBSerializer.load(str(path), shuffle=False)
    ds = LocallyShuffleData(ds, SHUFFLE_BUFFER)
    if mapbatch:  # decode, augment and stack in the workers
        ds = MultiProcessMapAndBatchDataZMQ(ds, NPROC, DecodeAugment(imgaug), BATCH)
    else:
        ds = MultiProcessMapDataZMQ(ds, NPROC, DecodeAugment(imgaug), buffer_size=200)
        ds = RepeatedData(BatchData(ds, BATCH), -1)
    dataset = to_torch(ds)
    loader = DataLoader(dataset, batch_size=None, num_workers=0)
    itr = iter(loader)
    try:
        return _time(itr, _train_step(), batches)
    finally:
        del itr
        dataset.close()


def _init_worker(_: int) -> None:
    import cv2
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)


def run_dataloader(path: Path, batches: int) -> float:
    import torch
    from torch.utils.data import DataLoader, Dataset

    from dataflow import imgaug

    torch.set_num_threads(1)
    items = _read_lmdb(path)

    class Images(Dataset):
        def __init__(self) -> None:
            self.func = DecodeAugment(imgaug)

        def __len__(self) -> int:
            return len(items)

        def __getitem__(self, i: int):
            img, label = self.func(items[i])
            return torch.from_numpy(img), label

    loader = DataLoader(Images(), batch_size=BATCH, shuffle=True, num_workers=NPROC,
                        persistent_workers=True, worker_init_fn=_init_worker)

    def forever(loader):
        while True:
            yield from loader

    itr = forever(loader)
    try:
        return _time(itr, _train_step(), batches)
    finally:
        itr.close()


def measure(impl: str, n: int, batches: int) -> dict:
    path = lmdb_path(n)
    if impl == "dataloader":
        seconds = run_dataloader(path, batches)
    else:
        seconds = run_bridge(path, batches, mapbatch=impl == "bridge-mapbatch")
    return {"steps_per_second": batches / seconds, "images_per_second": batches * BATCH / seconds}


def main() -> None:
    from _common import e2e_parser, markdown_table, run_impl

    parser = e2e_parser(__doc__, IMPLS, batches=50, rounds=3)
    args = parser.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl, args.images, args.batches)))
        return
    make_data(args.images)
    script = Path(__file__).resolve()
    impls = args.only or IMPLS
    runs: dict[str, list[dict]] = {impl: [] for impl in impls}
    for r in range(args.rounds):
        for impl in impls if r % 2 == 0 else impls[::-1]:
            res = run_impl(script, impl, "--images", str(args.images), "--batches",
                           str(args.batches), timeout=600)
            runs[impl].append(res)
            print(f"round {r + 1} {impl}: {res['images_per_second']:,.0f} images/s",
                  file=sys.stderr)
    best = {impl: max(rs, key=lambda x: x["images_per_second"]) for impl, rs in runs.items()}
    base = best["dataloader"]["images_per_second"] if "dataloader" in best else None
    rows = [[impl, f"{b['steps_per_second']:.1f}", f"{b['images_per_second']:,.0f}",
             f"{b['images_per_second'] / base:.2f}" if base else "n/a",
             ", ".join(f"{x['images_per_second']:,.0f}" for x in runs[impl])]
            for impl, b in best.items()]
    print(markdown_table(["pipeline", "train steps/s", "images/s", "vs DataLoader",
                          "all rounds (images/s)"], rows))


if __name__ == "__main__":
    main()
