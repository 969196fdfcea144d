"""The one compiler cache experiments share: inductor's precompiled headers."""

from pathlib import Path

import pytest

from experiment_runner.core.compiler_caches import (
    PRECOMPILED_HEADERS,
    inductor_tmp_folder,
    precompiled_headers,
    share_precompiled_headers,
)


def test_the_experiments_header_folder_is_the_machines(tmp_path: Path) -> None:
    machine, experiment = tmp_path / "machine", tmp_path / "experiment" / "scratch" / "tmp"
    experiment.mkdir(parents=True)
    assert share_precompiled_headers(experiment, machine)
    assert share_precompiled_headers(experiment, machine), "a second launch of the same attempt folder"
    (inductor_tmp_folder(experiment) / PRECOMPILED_HEADERS / "abc.h.gch").write_bytes(b"pch")
    assert (inductor_tmp_folder(machine) / PRECOMPILED_HEADERS / "abc.h.gch").read_bytes() == b"pch"
    assert precompiled_headers(experiment) == precompiled_headers(machine) == {"abc.h.gch"}


def test_inductor_folder_is_named_as_torch_names_it(tmp_path: Path) -> None:
    import tempfile

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        assert Path(default_cache_dir()) == inductor_tmp_folder(tmp_path)
    finally:
        tempfile.tempdir = before


def test_an_unusable_machine_folder_leaves_the_experiment_its_own(tmp_path: Path) -> None:
    blocker = tmp_path / "machine"
    blocker.write_text("a file where a folder should be")
    experiment = tmp_path / "experiment"
    experiment.mkdir()
    assert not share_precompiled_headers(experiment, blocker)
    assert not (inductor_tmp_folder(experiment) / PRECOMPILED_HEADERS).is_symlink()
    assert precompiled_headers(experiment) == set()


@pytest.mark.e2e
def test_torch_keeps_its_precompiled_headers_where_the_link_is(tmp_path: Path) -> None:
    """If a torch release moves them (e.g. under TORCHINDUCTOR_CACHE_DIR), this link stops
    mattering, and this test says so."""
    import os
    import subprocess
    import sys

    code = "import torch._inductor.codecache as c; print(c._HEADER_DIR)"
    env = dict(os.environ, TMPDIR=str(tmp_path), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "elsewhere"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()) == inductor_tmp_folder(tmp_path) / PRECOMPILED_HEADERS
