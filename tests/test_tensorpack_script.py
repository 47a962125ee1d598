"""A script written for tensorpack (and the standalone ``dataflow`` package) runs unchanged:
``from dataflow import *``, then ``dataset``, ``imgaug``, the Plasma stages and
``dataflow.utils.serialize``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, pickle, sys
import msgpack, msgpack_numpy
import numpy as np
from dataflow import *
from dataflow.utils import serialize

meta = dataset.ILSVRCMeta(sys.argv[1])
words = meta.get_synset_words_1000()

augmentors = imgaug.AugmentorList([imgaug.Resize((4, 6)), imgaug.Flip(horiz=True, prob=1.0)])
img = np.zeros((2, 3, 3), np.uint8)
img[:, 0] = 255
out = augmentors.augment(img)

ds = DataFromList([[np.full((256, 256), i, np.float32), i] for i in range(3)], shuffle=False)
flow = PlasmaGetData(PlasmaPutData(ds))
flow.reset_state()
got = [(float(dp[0].sum()), dp[1]) for dp in flow]
flow.close()

value = serialize.loads(msgpack.packb([np.arange(3), "x"], use_bin_type=True,
                                      default=msgpack_numpy.encode))
value2 = serialize.loads(pickle.dumps((np.arange(2), "y"), protocol=-1))
print(json.dumps({"words": {str(k): v for k, v in words.items()}, "shape": list(out.shape),
                  "right_column": out[:, -1, 0].tolist(), "left_column": out[:, 0, 0].tolist(),
                  "plasma": got, "msgpack": [value[0].tolist(), value[1]],
                  "pickle": [value2[0].tolist(), value2[1]]}))
"""


def test_a_tensorpack_script_runs(tmp_path):
    meta = tmp_path / "meta"
    meta.mkdir()
    (meta / "synsets.txt").write_text("n01440764\nn01443537\n")
    (meta / "synset_words.txt").write_text("n01440764 tench, Tinca tinca\n"
                                           "n01443537 goldfish, Carassius auratus\n")
    script = tmp_path / "bench.py"
    script.write_text(textwrap.dedent(SCRIPT))
    res = subprocess.run([sys.executable, str(script), str(meta)], capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert out == {
        "words": {"0": "n01440764 tench, Tinca tinca",
                  "1": "n01443537 goldfish, Carassius auratus"},
        "shape": [4, 6, 3],
        "right_column": [255, 255, 255, 255],  # the white left column, resized then flipped
        "left_column": [0, 0, 0, 0],
        "plasma": [[0.0, 0], [65536.0, 1], [131072.0, 2]],
        "msgpack": [[0, 1, 2], "x"],
        "pickle": [[0, 1], "y"],
    }
