"""Tests of scripts/check-figures.py: the committed tree passes, and a figure planted wrong in a
copy of a README (or a marker pointing at a missing file or member) fails. Run by
scripts/test.sh."""

import importlib.util
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_spec = importlib.util.spec_from_file_location(
    "check_figures", os.path.join(ROOT, "scripts", "check-figures.py"))
check_figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_figures)


def small_tree(tmp_path, readme_text, results):
    """A tree with experiments/demo/{README.md,results.json}."""
    folder = tmp_path / "experiments" / "demo"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "README.md").write_text(readme_text)
    return str(tmp_path)


RESULTS = {
    "summary": {"ratio": 0.6812, "misses": 30110, "share": 0.8623,
                "a.b": {"x": -1.25}},
    "rows": [{"case": "open-50", "target": "lto", "p99_us": 734.719},
             {"case": "open-50", "target": "memcached", "p99_us": 621.055}],
}


def failures_of(root):
    failures = []
    checked = 0
    for readme in check_figures.readmes(root):
        count, failed = check_figures.check_readme(readme, root)
        checked += count
        failures.extend(failed)
    return checked, failures


def test_figures_that_match_pass(tmp_path):
    root = small_tree(tmp_path, "\n".join([
        "ratio <!-- fig results.json:summary.ratio -->0.68 of cold",
        "misses <!-- fig results.json:summary.misses -->30 110 in all",
        "share <!-- fig results.json:summary.share *100 -->86 %",
        "quoted <!-- fig results.json:summary[\"a.b\"].x -->−1.2 (rounds either way at the half)",
        "p99 <!-- fig results.json:rows[case=open-50,target=lto].p99_us /1000 -->0.735 ms",
        "last <!-- fig results.json:rows[-1].p99_us -->621 µs",
    ]), RESULTS)
    assert failures_of(root) == (6, [])


def test_a_planted_mismatch_fails(tmp_path):
    root = small_tree(tmp_path, "ratio <!-- fig results.json:summary.ratio -->0.69 of cold\n",
                      RESULTS)
    checked, failures = failures_of(root)
    assert checked == 1
    assert len(failures) == 1 and "experiments/demo/README.md:1" in failures[0]
    assert check_figures.main(["--root", root]) == 1


def test_missing_files_members_and_ambiguous_rows_fail(tmp_path):
    root = small_tree(tmp_path, "\n".join([
        "<!-- fig nothing.json:summary.ratio -->0.68",
        "<!-- fig results.json:summary.nothing -->0.68",
        "<!-- fig results.json:rows[case=open-50].p99_us -->734",
        "<!-- fig results.json:summary.ratio -->no number",
    ]), RESULTS)
    checked, failures = failures_of(root)
    assert len(failures) == 4, failures


def test_the_committed_tree_passes_and_a_planted_mismatch_in_it_fails(tmp_path):
    assert check_figures.main(["--root", ROOT]) == 0
    copy = tmp_path / "tree"
    (copy / "experiments").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "README.md"), copy / "README.md")
    shutil.copytree(os.path.join(ROOT, "experiments"), copy / "experiments",
                    ignore=shutil.ignore_patterns("*.png", "*.svg", "__pycache__"),
                    dirs_exist_ok=True)
    checked, failures = failures_of(str(copy))
    assert checked >= 10 and failures == []
    # Change the first marked figure of each of these READMEs by one in its last digit: that
    # README alone fails.
    for relative in ["experiments/warmup/README.md", "experiments/chaos/README.md",
                     "experiments/minos/README.md", "README.md"]:
        readme = copy / relative
        text = readme.read_text()
        marker = next(m for m in check_figures.MARKER.finditer(text) if m.group("number"))
        number = marker.group("number")
        planted = number[:-1] + ("1" if number[-1] != "1" else "2")
        readme.write_text(text[:marker.start("number")] + planted + text[marker.end("number"):])
        checked, failures = failures_of(str(copy))
        assert len(failures) == 1 and relative in failures[0], failures
        readme.write_text(text)
