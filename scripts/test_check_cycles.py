"""Tests of scripts/check-cycles.py: a cycle planted between two module files of a small crate
fails, an allowed one passes, a stale allowance fails, and paths in comments, strings, inline
test modules and extern crates draw no edge. Run by scripts/test.sh."""

import importlib.util
import io
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_spec = importlib.util.spec_from_file_location(
    "check_cycles", os.path.join(HERE, "check-cycles.py"))
check_cycles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_cycles)


def crate(tmp_path, files):
    """A tree with crates/demo/src/<files>; returns its root."""
    src = tmp_path / "crates" / "demo" / "src"
    for relative, text in files.items():
        path = src / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def run(root):
    out = io.StringIO()
    problems = check_cycles.check(root, out=out)
    return problems, out.getvalue()


LIB = "//! A demo crate.\n\npub mod a;\npub mod b;\npub mod c;\n"
ACYCLIC = {
    "lib.rs": LIB,
    "a.rs": "use crate::b::Thing;\npub fn f() -> Thing { Thing }\n",
    "b.rs": "pub struct Thing;\npub fn g() { crate::c::h() }\n",
    "c.rs": "pub fn h() {}\n",
}


def test_an_acyclic_crate_passes(tmp_path):
    assert run(crate(tmp_path, ACYCLIC)) == (0, "")


def test_a_planted_cycle_fails_and_names_its_edges(tmp_path):
    files = dict(ACYCLIC)
    files["c.rs"] = "pub fn h() { let _ = crate::a::f(); }\n"
    problems, report = run(crate(tmp_path, files))
    assert problems == 1
    assert "demo: cycle a ↔ b ↔ c" in report
    assert "c -> a  (c.rs:1 crate::a::f)" in report
    assert check_cycles.main([crate(tmp_path, files)]) == 1


def test_a_cycle_through_a_use_tree_and_super_fails(tmp_path):
    problems, report = run(crate(tmp_path, {
        "lib.rs": "pub mod outer;\n",
        "outer.rs": "mod inner;\npub use inner::{Inner as Renamed};\npub struct Shared;\n",
        "outer/inner.rs": "use super::{Shared};\npub struct Inner(Shared);\n",
    }))
    assert problems == 1
    assert "outer ↔ outer::inner" in report


def test_comments_strings_inline_tests_and_extern_crates_draw_no_edge(tmp_path):
    files = dict(ACYCLIC)
    files["c.rs"] = "\n".join([
        "// crate::a::f() in a comment",
        "/* crate::a::f() /* nested */ crate::a::f() */",
        'pub fn h() { let _ = "crate::a::f()"; let _ = r#"crate::a::f()"#; let _ = \'"\'; }',
        "pub fn i<'a>(x: &'a str) -> &'a str { other_crate::a::f(); x }",
        "#[cfg(test)]",
        "mod tests {",
        "    use super::*;",
        "    #[test]",
        "    fn t() { h() }",
        "}",
    ]) + "\n"
    assert run(crate(tmp_path, files)) == (0, "")


def test_an_allowed_cycle_passes_and_a_stale_allowance_fails(tmp_path):
    files = dict(ACYCLIC)
    files["c.rs"] = "pub fn h() { let _ = crate::a::f(); }\n"
    files["lib.rs"] = "//! Allowed cycle: `a` ↔ `b` ↔ `c` — planted for the test\n" + LIB
    problems, report = run(crate(tmp_path, files))
    assert problems == 0
    assert "allowed cycle a ↔ b ↔ c (planted for the test)" in report
    # An allowance must name the whole component: a smaller set does not cover it.
    files["lib.rs"] = "//! Allowed cycle: `a` ↔ `b` — planted for the test\n" + LIB
    problems, report = run(crate(tmp_path, files))
    assert problems == 2, report
    # Once the cycle is gone, the allowance is stale.
    files["lib.rs"] = "//! Allowed cycle: `a` ↔ `b` ↔ `c` — planted for the test\n" + LIB
    files["c.rs"] = ACYCLIC["c.rs"]
    problems, report = run(crate(tmp_path, files))
    assert problems == 1 and "no longer a cycle" in report



def test_the_server_policy_and_sim_crates_have_no_cycle():
    out = io.StringIO()
    assert check_cycles.check(ROOT, {"server", "policy", "sim"}, out=out) == 0, out.getvalue()
