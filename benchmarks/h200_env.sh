# Sourced by the h200_*.sh scripts: $OUT (default ./h200_out) made, the carried wheels in .whl/
# installed where the device machine lacks them (gymnasium), and the repo on PYTHONPATH.
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/h200_out}
mkdir -p "$OUT"
if ! python3 -c "import gymnasium" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
