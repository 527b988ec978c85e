#!/usr/bin/env bash
# Install the Binder environment the way repo2docker does, and check that it works.
#
# Usage: bash tools/check_binder_install.sh
#
# repo2docker reads binder/runtime.txt (python-X.Y), makes an environment on that Python, runs
# `pip install -r binder/requirements.txt` from the repository's root, then binder/postBuild
# (also from the root, with the environment first on the PATH). This script does the same in a
# throwaway venv on that Python (from pyenv, else `pythonX.Y` on the PATH), then checks: the
# install resolved (`pip check`), tpde_lib imports from the repository, JupyterLab sees the
# Jupytext, jupyterlab-myst and widgets extensions, and postBuild installed the book's settings
# into the environment. Unlike repo2docker it keeps pip's cache and skips byte-compiling (faster;
# same resolution and files).
# Prints `binder-install: 1 passed, 0 failed` (or `0 passed, 1 failed`) and exits 1 on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
fail() { echo "FAIL $*"; echo "binder-install: 0 passed, 1 failed"; exit 1; }

runtime=$(tr -d '[:space:]' < binder/runtime.txt)
[[ "$runtime" =~ ^python-([0-9]+\.[0-9]+)$ ]] || fail "binder/runtime.txt: expected python-X.Y, got '$runtime'"
want=${BASH_REMATCH[1]}
py=""
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
for cand in $(ls -d "$pyenv_root"/versions/"$want".* 2>/dev/null | sort -V -r); do
  if [ -x "$cand/bin/python$want" ]; then py="$cand/bin/python$want"; break; fi
done
[ -n "$py" ] || py=$(command -v "python$want" || true)
[ -n "$py" ] || fail "no Python $want found (pyenv under $pyenv_root, or python$want on the PATH)"
got=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$got" = "$want" ] || fail "$py is Python $got, binder/runtime.txt asks for $want"
echo "Binder runtime $runtime -> $py ($("$py" --version))"

env_dir=$(mktemp -d /tmp/tpde-binder-XXXXXX)
trap 'rm -rf "$env_dir"' EXIT
"$py" -m venv "$env_dir/env"
export PATH="$env_dir/env/bin:$PATH"
if ! pip install -q --no-compile --disable-pip-version-check -r binder/requirements.txt > "$env_dir/pip.log" 2>&1; then
  grep -v "^WARNING: Location" "$env_dir/pip.log" | tail -20
  fail "pip install -r binder/requirements.txt on Python $want"
fi
echo "installed binder/requirements.txt in $(( $(date +%s) - start )) s"
pip check || fail "pip check: the Binder environment has conflicts"
[ -x binder/postBuild ] || fail "binder/postBuild is not executable"
./binder/postBuild || fail "binder/postBuild"

python - <<'PY' || fail "the Binder environment does not work (see above)"
import json, subprocess, sys
from pathlib import Path

import tpde_lib

root = Path.cwd().resolve()
assert Path(tpde_lib.__file__).resolve().is_relative_to(root), f"tpde_lib from {tpde_lib.__file__}"
out = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"],
                     capture_output=True, text=True, check=True)
listing = out.stdout + out.stderr
for ext in ("jupyterlab-jupytext", "jupyterlab-myst", "@jupyter-widgets/jupyterlab-manager"):
    assert ext in listing, f"JupyterLab extension {ext} missing:\n{listing}"
sys.path.insert(0, str(root / "tools"))
import install_lab_settings as s

path = s.settings_path()
assert path.is_relative_to(Path(sys.prefix)), path
assert json.loads(path.read_text()) == s.SETTINGS, f"{path} does not hold the book's settings"
print(f"tpde_lib {tpde_lib.__file__}; extensions listed; settings in {path}")
PY
echo "Binder install check finished in $(( $(date +%s) - start )) s"
echo "binder-install: 1 passed, 0 failed"
