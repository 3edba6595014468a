"""run_dir/manifest.json, the record of a run's sessions."""

from __future__ import annotations

import json

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
