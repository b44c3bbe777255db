#!/usr/bin/env bash
# Checks that every C++ and CUDA source tracked by git is formatted as .clang-format says,
# printing each file that is not (and the first lines clang-format would change) and exiting 1.
# Debian bookworm's clang-format (14) is the one the tree is formatted with; another version may
# disagree on a few constructs, so the version is printed with any failure.
#
# Usage: scripts/check_format.sh [--fix]   (--fix: reformat the files in place instead)
set -euo pipefail
cd "$(dirname "$0")/.."
formatter=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$formatter" ]; then
  echo "check_format: clang-format is not installed (Debian: apt-get install clang-format)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = --fix ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 32 -P "$(nproc)" "$formatter" -i
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! diff_text=$("$formatter" "$f" | diff -u "$f" - ); then
    echo "check_format: $f is not formatted (scripts/check_format.sh --fix):"
    printf '%s\n' "$diff_text" | sed -n '3,12p'
    bad=$((bad + 1))
  fi
done
if ((bad)); then
  echo "check_format: $bad of ${#files[@]} files differ from $("$formatter" --version)"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
