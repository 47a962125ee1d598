from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dataflow.__main__ import main
from dataflow.demo import DecodeAndAugment, make_jpegs


def test_demo_command_prints_report_and_profile(capsys):
    assert main(["demo", "--images", "32", "--batch-size", "8", "--batches", "3",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "TestDataSpeed report" in out
    assert "batch           : (8, 224, 224, 3) uint8, (8,) int32" in out
    assert "timed batches   : 3 in " in out
    assert "Pipeline profile" in out
    assert "bottleneck: stage" in out


def _profile_rows(out: str) -> tuple[dict[str, int], dict[str, str]]:
    """The ``out`` and ``in`` columns of the profile table, by stage."""
    lines = out.split("Pipeline profile", 1)[1].splitlines()
    rows = lines[lines.index(next(x for x in lines if x.startswith("---"))) + 1:]
    items, taken = {}, {}
    for row in rows:
        if not row.strip():
            break
        cells = row.split()
        items[cells[1]], taken[cells[1]] = int(cells[3]), cells[2]
    return items, taken


def test_demo_profile_counts_every_stage_and_one_proc_is_singular(capsys):
    from dataflow.demo import PROFILE_BATCHES

    assert main(["demo", "--images", "64", "--batch-size", "8", "--batches", "2",
                 "--num-proc", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "MultiProcessMapDataZMQ(decode, crop, flip, lighting; 1 proc) -> BatchData(8)" in out
    items, taken = _profile_rows(out)
    assert list(items) == ["BatchData", "MultiProcessMapDataZMQ", "LocallyShuffleData",
                           "LMDBData"]
    # what each stage took in is what the stage below it gave
    assert taken == {"BatchData": str(items["MultiProcessMapDataZMQ"]),
                     "MultiProcessMapDataZMQ": str(items["LocallyShuffleData"]),
                     "LocallyShuffleData": str(items["LMDBData"]), "LMDBData": "-"}
    assert items["BatchData"] == PROFILE_BATCHES == 20
    assert items["MultiProcessMapDataZMQ"] == 20 * 8
    # the mapper reads ahead by its in-flight buffer, so the stage below it delivered more
    assert items["LocallyShuffleData"] >= 160
    # everything the LMDB reader gave is delivered or still in the 256-item shuffle buffer
    assert items["LMDBData"] == items["LocallyShuffleData"] + 256


def test_demo_data_is_real_jpeg_and_seeded():
    cv2 = pytest.importorskip("cv2")
    a, b = make_jpegs(3, seed=1), make_jpegs(3, seed=1)
    assert [x[0] for x in a] == [x[0] for x in b]
    assert [x[1] for x in a] == [0, 1, 2]
    img = cv2.imdecode(np.frombuffer(a[0][0], np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (375, 500, 3)
    out = DecodeAndAugment()([a[0][0], 7])
    assert out[0].shape == (224, 224, 3) and out[0].dtype == np.uint8 and out[1] == 7


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow", "demo", "--images", "16", "--batch-size", "8",
         "--batches", "2", "--no-progress"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "images/s" in proc.stdout


def test_preview_command_writes_png(tmp_path):
    out = tmp_path / "grid.png"
    assert main(["preview", "-n", "3", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _run(args, cwd=None):
    return subprocess.run([sys.executable, "-m", "dataflow", *args], capture_output=True,
                          text=True, timeout=120, check=False, cwd=cwd)


def test_no_command_prints_the_help_on_stderr_with_status_2():
    proc = _run([])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(
        "usage: dataflow [-h] [--version]\n"
        "                {demo,profile,index-shards,preview,serve,service}")
    assert "Exit status: 0 on success, 2 for a usage error (also: no command), printed as one " \
           "line on stderr." in " ".join(proc.stderr.split())


def test_version():
    from dataflow import __version__

    proc = _run(["--version"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0, f"dataflow-reloaded {__version__}\n", "")


_PIPELINES = """
import dataflow as df

def build():
    return df.DataFromList([[i] for i in range(50)], shuffle=False)

def as_list():
    return [[1], [2]]

def needs(x):
    return build()

def fails():
    raise FileNotFoundError("no such file: 'train.lmdb'")

def fails_on_two_lines():
    raise ValueError("first line\\n  second line")

def fails_when_run():
    def boom(dp):
        raise RuntimeError("bad datapoint")
    return df.MapData(build(), boom)

class Holder:
    @property
    def build(self):
        raise KeyError("build")

holder = Holder()

VALUE = 3
"""


@pytest.mark.parametrize(("target", "message"), [
    ("pipes:nothing", "'pipes:nothing': module 'pipes' has no attribute 'nothing'; name a "
                      "function that returns the dataflow to profile."),
    ("pipes:VALUE", "'pipes:VALUE' is a int, not a function; name a function that returns the "
                    "dataflow to profile."),
    ("pipes:as_list", "'pipes:as_list' returned a list, not a DataFlow; return the pipeline "
                      "itself (wrap a list with DataFromList(lst, shuffle=False))."),
    ("pipes:needs", "'pipes:needs' must be callable without arguments: missing a required "
                    "argument: 'x'."),
    ("nosuchmodule:build", "cannot import 'nosuchmodule' for 'nosuchmodule:build': no module "
                           "named 'nosuchmodule'; run from the directory that holds it, or add "
                           "that directory to PYTHONPATH."),
    ("broken:build", "importing 'broken' for 'broken:build' failed: ModuleNotFoundError: No "
                     "module named 'not_installed_dependency'"),
    ("raising:build", "importing 'raising' for 'raising:build' failed: RuntimeError: no GPU"),
    ("badsyntax:build", "importing 'badsyntax' for 'badsyntax:build' failed: SyntaxError: "
                        "invalid syntax (badsyntax.py, line 1)"),
    ("pipes:fails", "calling 'pipes:fails' failed: FileNotFoundError: no such file: "
                    "'train.lmdb'"),
    ("pipes:fails_on_two_lines", "calling 'pipes:fails_on_two_lines' failed: ValueError: first "
                                 "line second line"),
    ("pipes:holder.build", "'pipes:holder.build': getting 'build' from Holder 'pipes' failed: "
                           "KeyError: 'build'"),
    ("pipes", "`target` must look like module:function (e.g. mypipeline:build), got 'pipes'."),
    ("pipes:build:x", "`target` must look like module:function (e.g. mypipeline:build), got "
                      "'pipes:build:x'."),
    (":build", "`target` must look like module:function (e.g. mypipeline:build), got ':build'."),
])
def test_bad_profile_target_is_one_line_and_status_2(tmp_path, target, message):
    (tmp_path / "pipes.py").write_text(_PIPELINES)
    (tmp_path / "broken.py").write_text("import not_installed_dependency\n")
    (tmp_path / "raising.py").write_text("raise RuntimeError('no GPU')\n")
    (tmp_path / "badsyntax.py").write_text("def (:\n")
    proc = _run(["profile", target], cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"dataflow profile: error: {message}\n"


def test_profile_target_help_states_the_exit_status():
    proc = _run(["profile", "--help"])
    assert proc.returncode == 0
    assert " ".join(proc.stdout.split()).endswith(
        "Exit status: 0 on success; 2, with one line on stderr naming the target and the "
        "exception (Type: message), when the target cannot be imported, is not a function, "
        "raises while it builds the flow or does not return a DataFlow. An error raised while "
        "the flow runs shows its traceback (status 1).")


def test_an_error_while_the_flow_runs_keeps_its_traceback(tmp_path):
    (tmp_path / "pipes.py").write_text(_PIPELINES)
    proc = _run(["profile", "pipes:fails_when_run", "--num", "5", "--warmup", "0"], cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith("Traceback (most recent call last):")
    assert proc.stderr.endswith("RuntimeError: bad datapoint\n")


@pytest.mark.parametrize(("args", "message"), [
    (["profile"], "dataflow profile: error: the following arguments are required: target "
                  "(see dataflow profile --help)"),
    (["demo", "--images", "x"], "dataflow demo: error: argument --images: invalid int value: "
                                "'x' (see dataflow demo --help)"),
    (["preview", "--bogus"], "python -m dataflow preview: error: unrecognized arguments: "
                             "--bogus (see python -m dataflow preview --help)"),
])
def test_a_bad_option_is_one_line_and_status_2(args, message):
    proc = _run(args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message + "\n")


def test_an_unknown_command_is_one_line_and_status_2():
    proc = _run(["nosuchcommand"])
    assert (proc.returncode, proc.stdout, proc.stderr.count("\n")) == (2, "", 1)
    # (how argparse quotes the choices depends on the Python version)
    assert proc.stderr.startswith(
        "dataflow: error: argument command: invalid choice: 'nosuchcommand' (choose from ")
    assert proc.stderr.endswith(") (see dataflow --help)\n")


def test_good_profile_target_runs(tmp_path):
    (tmp_path / "pipes.py").write_text(_PIPELINES)
    proc = _run(["profile", "pipes:build", "--num", "20", "--warmup", "0"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "20 datapoints in " in proc.stdout and "DataFromList" in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["-a", "Flip(horiz=True"], "-a/--augs: cannot parse augmentor 'Flip(horiz=True': "
                                "SyntaxError: "),
    (["-a", "NoSuchAug(3)"], "-a/--augs: unknown augmentor 'NoSuchAug'; `python -m dataflow "
                             "preview --list` lists them all.\n"),
    (["-a", "Flip(horiz=yes)"], "-a/--augs: cannot parse augmentor 'Flip(horiz=yes)': "
                                "ValueError: "),
    (["-a", ";"], "-a/--augs: the augmentor spec ';' holds no augmentor."),
    (["-n", "0"], "-n/--num must be >= 1, got 0."),
    (["-o", "/nonexistent-dir/x.png"], "-o/--output: the directory '/nonexistent-dir' does not "
                                       "exist; create it first."),
])
def test_bad_preview_input_is_one_line_and_status_2(tmp_path, args, message):
    proc = _run(["preview", *args, "-o", str(tmp_path / "p.png")] if "-o" not in args
                else ["preview", *args])
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith(f"python -m dataflow preview: error: {message}")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "p.png").exists()


def test_preview_unknown_augmentor_suggests_and_says_how_to_list(tmp_path):
    proc = _run(["preview", "-a", "RandomCrp(224)", "-o", str(tmp_path / "p.png")])
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "python -m dataflow preview: error: -a/--augs: unknown augmentor 'RandomCrp'; did you "
        "mean RandomCrop, RandomCutout or RandomOrderAug? `python -m dataflow preview --list` "
        "lists them all.\n")
    assert not (tmp_path / "p.png").exists()
    listed = _run(["preview", "--list"])
    assert (listed.returncode, listed.stderr) == (0, "")
    assert "RandomCrop\nRandomCropRandomShape\nRandomCutout\n" in listed.stdout


def test_preview_takes_names_as_the_readme_writes_them(tmp_path):
    out = tmp_path / "p.png"
    assert main(["preview", "-a", "imgaug.Flip(horiz=True); dataflow.imgaug.Brightness(30)",
                 "-n", "2", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
