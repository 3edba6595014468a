"""run_dir/manifest.json, the record of a run's sessions."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from translator import versions
from translator.train import manifest
from translator.train.manifest import RunManifest


def test_a_damaged_run_manifest_is_kept_aside_and_a_new_record_starts(prepared, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text('{"sessions": [{"started": "2026-')
    RunManifest(run_dir, prepared, world_size=1, start_step=3)
    assert len(json.loads((run_dir / "manifest.json").read_text())["sessions"]) == 1
    assert (run_dir / "manifest.json.damaged").read_text().startswith('{"sessions"')
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest.json: damaged" in err and "new record" in err


def test_data_checksums_of_an_older_prepare_hash_separate_vocabularies(tmp_path, monkeypatch):
    """A manifest from before prepare recorded sha256s: every id array and SentencePiece model is
    hashed, the two models of separate vocabularies included (there is no spm.model then)."""
    for name in ("train.src.ids.npy", "spm.src.model", "spm.tgt.model"):
        (tmp_path / name).write_bytes(name.encode())
    monkeypatch.setattr(manifest, "prepared_dir", lambda data: tmp_path)
    monkeypatch.setattr(manifest, "load_manifest", lambda data, vocab_from=None: {})
    sums = manifest.data_checksums(None)["sha256"]
    assert sums == {n: hashlib.sha256(n.encode()).hexdigest() for n in sorted(sums)}
    assert sorted(sums) == ["spm.src.model", "spm.tgt.model", "train.src.ids.npy"]


def test_an_installed_copy_inside_another_project_s_repository_names_no_commit(
    tmp_path, monkeypatch
):
    """site-packages of an environment kept inside some project's git repository: git would
    answer with that project's commit; the manifest must not record it as the code that ran."""
    project = tmp_path / "project"
    site = project / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
    env["GIT_COMMITTER_EMAIL"] = "a@b"
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "theirs"]):
        subprocess.run(["git", *args], cwd=project, check=True, env={**os.environ, **env})
    monkeypatch.setattr(versions, "PACKAGE_ROOT", site)
    assert versions.git_state() == {"commit": None, "dirty": None}
    monkeypatch.setattr(versions, "PACKAGE_ROOT", project)  # a checkout: its own commit
    assert len(versions.git_state()["commit"]) == 40


def test_a_session_records_its_thread_count(prepared, tmp_path):
    """Training is bit-reproducible for a seed only at the same thread count (float sums follow
    it), so the record of a run must say it."""
    import torch

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        RunManifest(tmp_path, prepared, world_size=1, start_step=0)
    finally:
        torch.set_num_threads(threads)
    assert json.loads((tmp_path / "manifest.json").read_text())["sessions"][0]["threads"] == 1


def test_a_fresh_start_marks_earlier_sessions_discarded_and_leaves_them_out_of_wall_seconds(
    prepared, tmp_path
):
    """A run killed before its first save starts over: its session stays on record, but the
    run's training time is not its."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = RunManifest(run_dir, prepared, world_size=1, start_step=0)
    first.session["seconds"] = 10.0
    first.write()
    resumed = RunManifest(run_dir, prepared, world_size=1, start_step=0, changed={})
    resumed.session["seconds"] = 5.0
    resumed.write()
    record = json.loads((run_dir / "manifest.json").read_text())
    assert record["wall_seconds"] == 15.0 and not any(
        s.get("discarded") for s in record["sessions"]
    )
    again = RunManifest(run_dir, prepared, world_size=1, start_step=0)  # a fresh start
    again.session["seconds"] = 2.0
    again.write()
    record = json.loads((run_dir / "manifest.json").read_text())
    assert [s.get("discarded", False) for s in record["sessions"]] == [True, True, False]
    assert record["wall_seconds"] == 2.0


def test_a_new_module_of_the_package_makes_the_checkout_dirty_a_scratch_file_does_not(
    tmp_path, monkeypatch
):
    """An uncommitted new module runs like committed code: `dirty: false` hid it."""
    project = tmp_path / "project"
    (project / "translator").mkdir(parents=True)
    (project / "translator" / "__init__.py").write_text("")
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
    env["GIT_COMMITTER_EMAIL"] = "a@b"
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "ours"]):
        subprocess.run(["git", *args], cwd=project, check=True, env={**os.environ, **env})
    monkeypatch.setattr(versions, "PACKAGE_ROOT", project)
    assert versions.git_state()["dirty"] is False
    (project / "notes.txt").write_text("scratch")
    assert versions.git_state()["dirty"] is False
    (project / "translator" / "new.py").write_text("x = 1")
    assert versions.git_state()["dirty"] is True


def test_the_command_of_a_module_run_as_a_program_names_the_module(monkeypatch):
    """The recipe's members train in `python -m translator.recipe`'s process: their manifests
    recorded `python -m translator CONFIG ...`, which does not run."""
    import types

    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="translator.recipe.__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/x/translator/recipe/__main__.py", "configs/a.yaml"])
    assert manifest.command_line() == "python -m translator.recipe configs/a.yaml"
    main.__spec__ = None  # a script path (torchrun's)
    monkeypatch.setattr(sys, "argv", ["/x/translator/__main__.py", "train", "c.yaml"])
    assert manifest.command_line() == "python -m translator train c.yaml"
