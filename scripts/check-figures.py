#!/usr/bin/env python3
"""Checks that the figures a README quotes as claims are in the result files beside it.

Convention. A figure that a README states as a measured result is marked with an HTML comment
(invisible when rendered) right before the number:

    cold's peak was <!-- fig results.json:summary.programs.tailtrim.runs.cold.peak_excess_ms.median -->1.13 ms

  - FILE (before the first `:`) is relative to the README's folder; it must be JSON.
  - PATH selects one number in it, segment by segment, separated by dots:
        name              an object's member (`["a.b"]` when the name holds a dot or bracket)
        [3]               an array's element (negative counts from the end)
        [case=open-50,target=lto]
                          the one element of an array of objects whose members have those
                          values (compared as text); none or several is an error
  - An optional scale after the path, `*100` or `/1000`, multiplies or divides the value
    (a share quoted as a percentage, µs quoted as ms).
  - The number follows `-->` directly: an optional sign (`-` or `−`), digits with optional
    groups of three after a space or a thin space (`30 110`), an optional decimal part.
  - Rounding rule: with d decimals quoted, the scaled value must lie within 0.5 × 10^-d of the
    number (the value rounded to the quoted precision, either way at the half).
  - A text (a CPU model, a kernel) is quoted as a code span right after the marker,
    `<!-- fig results.json:metadata.kernel -->`6.18.44``, and must equal the member's text.

Every README.md under experiments/ and the top-level README.md are read. Exit status 1 when a
marked figure differs from its file, its file or path does not exist, or a marker is malformed;
the failures are listed as README:line. `--root DIR` checks another tree (the tests plant
mismatches in a copy).
"""

import argparse
import json
import math
import os
import re
import sys

MARKER = re.compile(
    r'<!--\s*fig\s+(?P<file>[^:\s]+):(?P<path>(?:[^\s"]|"[^"]*")+?)(?:\s+(?P<scale>[*/]\s*[0-9.eE+-]+))?\s*-->'
    r"(?:`(?P<text>[^`]*)`|(?P<number>[-−]?\d{1,3}(?:[ \u2009\u202f]\d{3})+(?:\.\d+)?|[-−]?\d+(?:\.\d+)?))?"
)
SEGMENT = re.compile(r'\["(?P<quoted>[^"]*)"\]|\[(?P<index>-?\d+)\]|\[(?P<match>[^\]]*=[^\]]*)\]|(?P<name>[^.\[\]]+)')


class FigureError(Exception):
    """A marker that does not resolve to a number."""


def parse_path(path):
    """The segments of PATH: ('name', str), ('index', int) or ('match', {member: text})."""
    segments = []
    position = 0
    while position < len(path):
        if path[position] == ".":
            position += 1
            continue
        found = SEGMENT.match(path, position)
        if not found:
            raise FigureError(f"bad path {path!r} at {path[position:]!r}")
        if found.group("quoted") is not None:
            segments.append(("name", found.group("quoted")))
        elif found.group("index") is not None:
            segments.append(("index", int(found.group("index"))))
        elif found.group("match") is not None:
            pairs = {}
            for pair in found.group("match").split(","):
                member, _, text = pair.partition("=")
                pairs[member.strip()] = text.strip()
            segments.append(("match", pairs))
        else:
            segments.append(("name", found.group("name")))
        position = found.end()
    return segments


def as_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolve(document, path):
    """The value PATH selects in DOCUMENT."""
    value = document
    for kind, key in parse_path(path):
        if kind == "name":
            if not isinstance(value, dict) or key not in value:
                raise FigureError(f"no member {key!r} in {path}")
            value = value[key]
        elif kind == "index":
            if not isinstance(value, list) or not -len(value) <= key < len(value):
                raise FigureError(f"no element [{key}] in {path}")
            value = value[key]
        else:
            if not isinstance(value, list):
                raise FigureError(f"[{key}] applied to a non-array in {path}")
            chosen = [
                item
                for item in value
                if isinstance(item, dict)
                and all(member in item and as_text(item[member]) == text for member, text in key.items())
            ]
            if len(chosen) != 1:
                raise FigureError(f"{len(chosen)} elements match {key} in {path}")
            value = chosen[0]
    return value


def quoted_value(number):
    """(value, decimals) of a quoted number."""
    text = number.replace("−", "-").replace(" ", "").replace("\u2009", "").replace("\u202f", "")
    decimals = len(text.split(".", 1)[1]) if "." in text else 0
    return float(text), decimals


def check_readme(readme, root):
    """(checked, failures) of one README; failures are strings."""
    folder = os.path.dirname(readme)
    cache = {}
    checked = 0
    failures = []
    with open(readme, encoding="utf-8") as f:
        lines = f.read().split("\n")
    where_of = lambda line: f"{os.path.relpath(readme, root)}:{line}"
    for number_of_line, line in enumerate(lines, 1):
        for marker in MARKER.finditer(line):
            where = where_of(number_of_line)
            if marker.group("number") is None and marker.group("text") is None:
                failures.append(
                    f"{where}: a marker not followed by a number or a `text`: {marker.group(0)}")
                continue
            file = os.path.normpath(os.path.join(folder, marker.group("file")))
            try:
                if file not in cache:
                    if not os.path.isfile(file):
                        raise FigureError(f"no file {os.path.relpath(file, root)}")
                    with open(file, encoding="utf-8") as f:
                        cache[file] = json.load(f)
                value = resolve(cache[file], marker.group("path"))
                if marker.group("text") is not None:
                    checked += 1
                    if as_text(value) != marker.group("text"):
                        failures.append(f"{where}: quotes `{marker.group('text')}` but "
                                        f"{marker.group('file')}:{marker.group('path')} is {value!r}")
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise FigureError(f"{marker.group('path')} is {value!r}, not a number")
                scale = marker.group("scale")
                if scale:
                    factor = float(scale[1:].strip())
                    value = value * factor if scale[0] == "*" else value / factor
                quoted, decimals = quoted_value(marker.group("number"))
                tolerance = 0.5 * 10 ** -decimals + 1e-9 * max(1.0, abs(value))
                checked += 1
                if not math.isfinite(value) or abs(value - quoted) > tolerance:
                    failures.append(
                        f"{where}: quotes {marker.group('number')} but "
                        f"{marker.group('file')}:{marker.group('path')}{' ' + scale if scale else ''} "
                        f"is {value!r}"
                    )
            except (FigureError, ValueError, OSError) as error:
                failures.append(f"{where}: {error}")
    return checked, failures


def readmes(root):
    """The top-level README and every README.md under experiments/."""
    found = []
    top = os.path.join(root, "README.md")
    if os.path.isfile(top):
        found.append(top)
    for directory, subdirectories, files in os.walk(os.path.join(root, "experiments")):
        subdirectories.sort()
        if "README.md" in files:
            found.append(os.path.join(directory, "README.md"))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    default_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--root", default=default_root, help="the tree to check")
    args = parser.parse_args(argv)
    total = 0
    failures = []
    for readme in readmes(args.root):
        checked, failed = check_readme(readme, args.root)
        total += checked
        failures.extend(failed)
    for failure in failures:
        print(failure)
    print(f"{total} marked figures checked, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
