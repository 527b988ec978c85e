#!/usr/bin/env bash
# The library as a package of its own: build the wheel from this checkout, install it ALONE (its
# declared dependencies only) on the newest supported Python in a fresh venv outside the
# checkout, and check what a user of the package gets:
#   - one version (package metadata == tpde_lib.__version__), the histogram cache shipped,
#   - none of the book's packages pulled in (jupytext, PyYAML, ipywidgets, IPython),
#   - `import tpde_lib` loads neither scipy.stats, matplotlib.pyplot nor POT,
#   - the README's example runs, and the library's unit tests pass against the installed wheel
#     (the tests of the book's machinery -- chapters, ledger, widgets, downloads -- are not
#     library tests and need the book's environment).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${TPDE_WHEEL_PYTHON:-}
if [ -z "$py" ]; then
  # pyenv's 3.13 where there is one (its shim on the PATH may point at another version)
  py=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13.*/bin/python3.13 2>/dev/null | sort -V | tail -1)
  if [ -z "$py" ] && python3.13 --version >/dev/null 2>&1; then py=$(command -v python3.13); fi
fi
[ -n "$py" ] || { echo "check_wheel: no Python 3.13 found"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$py" -m venv "$work/venv"
pip="$work/venv/bin/pip"
"$pip" -q install --upgrade pip >/dev/null
"$pip" -q wheel --no-deps -w "$work/dist" "$root"
wheel=$(ls "$work"/dist/tpde_lib-*.whl)
echo "wheel: $(basename "$wheel") on $("$work/venv/bin/python" --version)"
"$pip" -q install "$wheel"
for book_only in jupytext PyYAML ipywidgets ipython; do
  if "$pip" show -q "$book_only" >/dev/null 2>&1; then
    echo "check_wheel: installing the wheel pulled in $book_only (a book dependency)"; exit 1
  fi
done

cd "$work"
"$work/venv/bin/python" - "$root" <<'PY'
import importlib.metadata as md
import pathlib
import re
import sys

import tpde_lib as tp

root = pathlib.Path(sys.argv[1])
assert pathlib.Path(tp.__file__).is_relative_to(sys.prefix), tp.__file__   # the wheel, not the checkout
heavy = [m for m in ("scipy.stats", "matplotlib.pyplot", "ot") if m in sys.modules]
assert not heavy, f"import tpde_lib loaded {heavy}"
assert md.version("tpde_lib") == tp.__version__, (md.version("tpde_lib"), tp.__version__)
cache = tp.official.load_histogram_cache()
assert cache, "the histogram cache is empty"
readme = (root / "README.md").read_text()
example = re.search(r"```python\n(import numpy as np\nimport tpde_lib as tp\n.*?)```", readme, re.S)
assert example, "README: no example starting with `import numpy as np / import tpde_lib as tp`"
exec(compile(example.group(1), "README example", "exec"), {})
print(f"tpde_lib {tp.__version__}: one version, histogram cache loaded, README example ran")
PY

# the library's unit tests against the installed wheel (pytest and hypothesis at the book's pins)
"$pip" -q install $(grep -E '^(pytest|hypothesis)==' "$root/requirements.txt")
mkdir tests && cp "$root"/tests/*.py tests/
# the book's own tests: those importing the book's packages, and those reading the repository's
# chapters, building its pages or checking its tools
book_imports='^\s*(import|from) (tpde_book|nbformat|jupytext|ipywidgets|IPython|sphinx|nbval|nbclient|yaml|docutils|myst_nb|tests\.nbmyst)\b'
for f in tests/*.py; do
  if grep -qE "$book_imports" "$f"; then rm "$f"; fi
done
rm -f tests/test_chapter_format.py tests/test_api_autodoc.py tests/test_check_built_book.py
echo "library tests: $(ls tests/test_*.py | wc -l) files"
"$work/venv/bin/python" -m pytest tests -q -p no:cacheprovider -o addopts="" \
  --import-mode=importlib -W error::pytest.PytestUnknownMarkWarning
