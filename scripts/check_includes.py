#!/usr/bin/env python3
"""Checks that dependencies point down: app -> ui, sessions -> engine (docs: DESIGN "Layers").

Reads the #include lines of every C/C++/CUDA source under engine/, ui/, sessions/ and app/ and
prints each include that reaches up or sideways as

    file:line: <include> — <rule>

exiting 1 when there is any. Quoted includes are resolved the way the compiler finds them
(beside the including file first, then from the project root, which is the one include
directory every target has), so "../model/x.h" is caught as well as "engine/model/x.h".

Usage: scripts/check_includes.py [ROOT]   (default: the project this script lives in)
"""

import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh")
INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# (folder the including file is in, what it may not include, why). A quoted include is
# matched on its project path ("ui/..."), an angled one on its name as written (<sqlite3.h>).
# The third-party libraries are named because each belongs to exactly one layer: the engine is
# a library other front ends can link without a terminal, a database or a command line.
RULES = [
    ("engine/", re.compile(r'^"(ui|app|sessions)/'),
     "engine/ is the bottom layer: it never includes ui/, app/ or sessions/"),
    ("engine/", re.compile(r'^<(n?curses(w?/.*|\.h)|ncursesw?/.*|term\.h)>$'),
     "engine/ never includes curses (the terminal belongs to ui/)"),
    ("engine/", re.compile(r'^<sqlite3\.h>$'),
     "engine/ never includes SQLite (state leaves as bytes; sessions/ stores it)"),
    ("engine/", re.compile(r'^<CLI/'),
     "engine/ never includes CLI11 (the command line belongs to app/)"),
    ("engine/", re.compile(r'^<httplib\.h>$'),
     "engine/ never includes cpp-httplib (HTTP belongs to app/)"),
    ("ui/", re.compile(r'^"sessions/'),
     "ui/ never includes sessions/ (app/ wires the store in through ui's ports)"),
    ("ui/", re.compile(r'^"engine/model/'),
     "ui/ never includes engine/model/ (it drives the model through engine/generate)"),
    ("ui/", re.compile(r'^"app/'),
     "ui/ never includes app/ (app/ is above it)"),
    ("sessions/", re.compile(r'^"(ui|app)/'),
     "sessions/ never includes ui/ or app/ (they are above it)"),
    # The rooms inside ui/ (docs/architecture.md), bottom up: io/ (terminal text, progress, the
    # clipboard, what a message brings in), tools/, chat/, then the front ends line/, scripted/
    # and tui/, which never include each other.
    ("ui/io/", re.compile(r'^"ui/(tools|chat|line|scripted|tui)/'),
     "ui/io/ is ui's bottom room: it never includes the rooms above it"),
    ("ui/tools/", re.compile(r'^"ui/(chat|line|scripted|tui)/'),
     "ui/tools/ never includes the chat or a front end (the chat drives the tools)"),
    ("ui/chat/", re.compile(r'^"ui/(line|scripted|tui)/'),
     "ui/chat/ never includes a front end (the front ends drive the chat)"),
    ("ui/line/", re.compile(r'^"ui/(scripted|tui)/'),
     "a front end never includes another (what they share lives in chat/ or io/)"),
    ("ui/scripted/", re.compile(r'^"ui/(line|tui)/'),
     "a front end never includes another (what they share lives in chat/ or io/)"),
    ("ui/tui/", re.compile(r'^"ui/(line|scripted)/'),
     "a front end never includes another (what they share lives in chat/ or io/)"),
] + [
    # Inside app/: the commands (commands/, bench/, and main.cpp, which registers them) sit on
    # top of the rooms they use.
    (f"app/{room}/", re.compile(r'^"app/(commands|bench)/'),
     "only app/commands/, app/bench/ and main.cpp include the commands")
    for room in ("models", "cli", "store", "remote", "serve")
]


# Today's exceptions, each named as (including file, include as written), with the reason it
# stands. The check fails on any violation not listed here, and on an entry that no longer
# matches anything (so the list only shrinks). Empty: the tree has none.
ALLOWED = {
}


def project_path(root, including_file, target):
    """The include's path from the project root, as the compiler would find it."""
    beside = os.path.normpath(os.path.join(os.path.dirname(including_file), target))
    if target.startswith(("./", "../")) or os.path.isfile(os.path.join(root, beside)):
        return beside.replace(os.sep, "/")
    return os.path.normpath(target).replace(os.sep, "/")


def source_files(root):
    for top in ("engine", "ui", "sessions", "app"):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")


def violations(root):
    for path in source_files(root):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE_LINE.match(line)
                if not match:
                    continue
                bracket, target = match.groups()
                written = f"<{target}>" if bracket == "<" else f'"{target}"'
                resolved = written if bracket == "<" else f'"{project_path(root, path, target)}"'
                for folder, forbidden, why in RULES:
                    if path.startswith(folder) and forbidden.search(resolved):
                        yield path, number, written, why


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    failed = False
    used = set()
    for path, number, include, why in violations(root):
        if (path, include) in ALLOWED:
            used.add((path, include))
            continue
        print(f"{path}:{number}: {include} — {why}")
        failed = True
    for path, include in sorted(set(ALLOWED) - used):
        print(f"{path}: {include} — listed in check_includes.py's ALLOWED but no longer "
              "included: remove the entry")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
