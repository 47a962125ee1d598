"""Fork safety of OpenCV's thread pool (see dataflow._optional.import_cv2)."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import os
import numpy as np
import dataflow.imgaug  # installs the at-fork hooks
import cv2

img = np.zeros((1500, 1500, 3), np.uint8)
for _ in range(3):  # start OpenCV's thread pool in the parent
    cv2.resize(img, (700, 700))
    cv2.GaussianBlur(img, (5, 5), 1)
before = cv2.getNumThreads()
pid = os.fork()
if pid == 0:
    cv2.setNumThreads(1)  # blocked forever without the hooks
    cv2.resize(img, (700, 700))
    os._exit(0)
_, status = os.waitpid(pid, 0)
cv2.resize(img, (700, 700))
print(status, before == cv2.getNumThreads())
"""


def test_forked_child_can_set_opencv_threads():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["0", "True"]
