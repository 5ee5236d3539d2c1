"""scripts/changelog.py: CHANGELOG.md made from the commits, one section per day (newest first), each commit's
subject and the first paragraph of its body; a range with --since; a bad revision named; --out written whole."""

import os
import subprocess

import pytest
from helpers import load_script

changelog = load_script("changelog")


def _repo(tmp_path):
    """A git repository of three commits over two days."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    messages = [("2026-12-01T10:00:00", "First thing\n\nWhy it came:\nbecause of this.\n\nA second paragraph."),
                ("2026-12-02T09:00:00", "Second thing"),
                ("2026-12-02T11:00:00", "RESULTS #32: third thing (#29)\n\nIts reason (pytorch/pytorch#38228).")]
    for i, (date, message) in enumerate(messages):
        (repo / f"f{i}").write_text(str(i))
        subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
        subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", message], check=True,
                       env={**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return repo


@pytest.mark.slow
def test_the_changelog_is_the_commits_by_day_with_their_why(tmp_path, capsys):
    repo = _repo(tmp_path)
    out = tmp_path / "CHANGELOG.md"
    assert changelog.main(["--repo", str(repo), "--out", str(out)]) == 0
    text = out.read_text()
    assert [line for line in text.splitlines() if line.startswith("## ")] == ["## 2026-12-02", "## 2026-12-01"]
    body = text[text.index("## 2026-12-02"):]
    assert body.index("**RESULTS: third thing**") < body.index("**Second thing**") < body.index("**First thing**")
    assert "  Why it came: because of this." in text and "second paragraph" not in text
    assert "  Its reason (pytorch/pytorch#38228)." in text  # an upstream reference stays; the project's go
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CHANGELOG.md", "repo"]  # no temporary file left
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert f"up to {head}" in text
    # a range: what came since the first commit
    assert changelog.main(["--repo", str(repo), "--since", "HEAD~2"]) == 0
    since = capsys.readouterr().out
    assert "Second thing" in since and "third thing" in since and "First thing" not in since


@pytest.mark.slow
def test_a_bad_revision_is_named(tmp_path, capsys):
    repo = _repo(tmp_path)
    assert changelog.main(["--repo", str(repo), "--until", "no-such-rev"]) == 2
    assert "changelog.py: git log no-such-rev" in capsys.readouterr().err
