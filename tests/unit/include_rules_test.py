#!/usr/bin/env python3
"""ctest for scripts/check_includes.py: a tree with one forbidden include fails and names it;
the real tree passes.

Usage: include_rules_test.py PROJECT_ROOT
"""

import os
import subprocess
import sys
import tempfile


def run_check(script, root):
    return subprocess.run([sys.executable, script, root], capture_output=True, text=True)


def main():
    project = sys.argv[1]
    script = os.path.join(project, "scripts", "check_includes.py")
    failures = []

    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        # Allowed: downward includes, and the ones a layer may make of its own folder.
        write("engine/model/model.h", "#pragma once\n")
        write("engine/generate/generate.h", '#pragma once\n#include "engine/model/model.h"\n')
        write("ui/chat.cpp", '#include <vector>\n#include "engine/generate/generate.h"\n')
        write("sessions/store.cpp", '#include <sqlite3.h>\n#include "engine/model/model.h"\n')
        # The one forbidden include, on line 3, reached through a relative path.
        write("ui/tui/view.cpp",
              '#include <string>\n#include "ui/chat.h"\n#include "../../engine/model/model.h"\n')

        result = run_check(script, root)
        if result.returncode != 1:
            failures.append(f"tree with a forbidden include: exit {result.returncode}, want 1")
        lines = result.stdout.splitlines()
        if len(lines) != 1 or not lines[0].startswith(
                'ui/tui/view.cpp:3: "../../engine/model/model.h" — ui/ never includes engine/model/'):
            failures.append(f"tree with a forbidden include: printed {result.stdout!r}, "
                            "want the one violation at ui/tui/view.cpp:3")

    # The rooms inside ui/ and app/: one include up a room in each, the rest allowed.
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        write("ui/io/progress.h", "#pragma once\n")
        write("ui/tools/tool_set.h", '#pragma once\n#include "ui/io/progress.h"\n')
        write("ui/chat/chat_controller.h", '#pragma once\n#include "ui/tools/tool_set.h"\n')
        write("ui/tui/view.cpp", '#include "ui/chat/chat_controller.h"\n')
        write("ui/tools/tool_runner.cpp",
              '#include "ui/tools/tool_set.h"\n#include "ui/chat/chat_controller.h"\n')
        write("app/commands/commands.h", "#pragma once\n")
        write("app/bench/cmd_bench.cpp", '#include "app/commands/commands.h"\n')
        write("app/main.cpp", '#include "app/commands/commands.h"\n')
        write("app/models/load_model.cpp", '#include <string>\n#include "app/commands/commands.h"\n')
        result = run_check(script, root)
        want = [
            'app/models/load_model.cpp:2: "app/commands/commands.h" — only app/commands/',
            'ui/tools/tool_runner.cpp:2: "ui/chat/chat_controller.h" — ui/tools/ never includes',
        ]
        lines = sorted(result.stdout.splitlines())
        if result.returncode != 1 or len(lines) != 2 or not all(
                line.startswith(prefix) for line, prefix in zip(lines, want)):
            failures.append(f"tree with two includes up a room: exit {result.returncode}, "
                            f"printed {result.stdout!r}, want {want}")

    result = run_check(script, project)
    if result.returncode != 0:
        failures.append(f"the project's own tree fails the include rules:\n{result.stdout}")

    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
