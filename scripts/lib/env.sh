# Sourced by the scripts in scripts/: find or make a Python environment pip may
# install into, on a fresh Debian machine as well as on a developer's.
#
# Debian's Python refuses `pip install` outside a virtual environment (PEP 668),
# so the project keeps its own in .venv, made here when absent. A user already
# inside a virtual environment ($VIRTUAL_ENV) keeps theirs. GPUSCALE_PYTHON
# picks the interpreter .venv is made from (default: python3 on PATH).

# apt_install PKG...: install Debian packages, as root or through sudo.
apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing Debian packages: $*" >&2
  if [ -z "${_GPUSCALE_APT_UPDATED:-}" ]; then
    $sudo apt-get update -q >&2
    _GPUSCALE_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" >&2
}

# ensure_env: set PY to the environment's interpreter, making .venv when needed.
ensure_env() {
  if [ -n "${VIRTUAL_ENV:-}" ]; then
    PY="$VIRTUAL_ENV/bin/python"
    return
  fi
  if [ ! -x .venv/bin/python ]; then
    local base="${GPUSCALE_PYTHON:-python3}"
    if ! command -v "$base" >/dev/null 2>&1; then
      apt_install python3
    fi
    # Without python3-venv, Debian's venv module stops at ensurepip and leaves a
    # half-made directory behind: remove it, install the package, try once more.
    if ! "$base" -m venv .venv >/dev/null 2>&1; then
      rm -rf .venv
      apt_install python3-venv
      "$base" -m venv .venv
    fi
    echo "made the project environment .venv with $("$base" --version 2>&1)" >&2
  fi
  PY="$PWD/.venv/bin/python"
}

# pip_install ARGS...: pip install into the environment, showing one line per
# package as pip collects it and the summary, so a first install (a minute or
# two) shows progress without pip's every line; pip's own exit status is kept.
pip_install() {
  local status errexit=0
  case $- in *e*) errexit=1 ;; esac
  set +e
  "$PY" -m pip install --disable-pip-version-check --progress-bar off "$@" 2>&1 |
    sed -u -n -E -e 's/^(Collecting [^ ]+).*/  \1/p' -e 's/^(Successfully installed).*/  \1/p' \
      -e '/^(ERROR|error)/p' -e '/^  (×|╰|│)/p' >&2
  status=${PIPESTATUS[0]}
  [ "$errexit" -eq 0 ] || set -e
  return "$status"
}
