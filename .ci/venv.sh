# Shared by .ci/against-release and .ci/other-pythons (sourced, from the
# repository's root): the differential suites and the virtualenvs they run in.

# The suites that prove the slim engine builds stock's state: what runs on
# every interpreter and release besides the main one.
DIFFERENTIAL=(tests/test_equivalence.py tests/test_staging.py tests/test_bad_input.py tests/test_dropin.py
  tests/test_pipeline.py tests/test_shim.py tests/test_dispatch.py tests/test_messages.py)

# What CI's second lane (.ci/run, `.ci/other-pythons --ci`) runs: every
# differential suite on every interpreter and release does not fit in CI's
# 30 minutes on a 2-core machine beside the whole suite
# (docs/interpreters.md). On each other Python: the suites where the
# interpreter matters most, the check of every CPython-specific mechanism
# (shim) and staged ingestion compared with stock with those checks passed
# and failed (staging), with pipeline, bad input and messages (seconds).
# On the oldest release, as before this lane: also equivalence and
# dispatch (distributed's state and worker choices, which change by
# release). The drop-in suite runs on the main interpreter (the whole
# suite); `.ci/other-pythons` without --ci runs every differential suite.
CI_INTERPRETER=(tests/test_shim.py tests/test_staging.py tests/test_pipeline.py tests/test_bad_input.py
  tests/test_messages.py)
CI_RELEASE=("${CI_INTERPRETER[@]}" tests/test_equivalence.py tests/test_dispatch.py)

# venv_with PYTHON VENV REQUIREMENTS FULL
# A virtualenv VENV made by PYTHON, with REQUIREMENTS (one a line) and this
# checkout (editable, --no-deps); FULL=1 also registers its Jupyter kernel.
# Reused while the interpreter's version and the requirements are the same.
# One pip resolution for all the requirements: pip refuses (and says why)
# when they cannot be installed together on that interpreter.
venv_with() {
  local py=$1 venv=$2 reqs=$3 full=$4
  local stamp="$venv/.slimgraph-requirements" want
  want="$("$py" -c 'import sys; print(sys.version)')
$reqs"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  echo "installing into $venv ($py)"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  printf '%s\n' "$reqs" > "$venv/requirements.txt"
  "$venv/bin/python" -m pip install -q -r "$venv/requirements.txt"
  "$venv/bin/python" -m pip install -q --no-deps -e .
  if [ "$full" = 1 ]; then
    "$venv/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null
  fi
  printf '%s' "$want" > "$stamp"
}

# installed VENV [VERSION]
# Says what VENV has (Python, dask, distributed, numpy, pandas); with
# VERSION, fails unless dask and distributed are that release.
installed() {
  "$1/bin/python" - "${2:-}" <<'PYEOF'
import platform
import sys

import dask
import distributed
import numpy
import pandas

want = sys.argv[1]
print(f"Python {platform.python_version()}: dask {dask.__version__}, distributed {distributed.__version__}, "
      f"numpy {numpy.__version__}, pandas {pandas.__version__}")
if want and (dask.__version__, distributed.__version__) != (want, want):
    raise SystemExit(f"expected dask and distributed {want}")
PYEOF
}
