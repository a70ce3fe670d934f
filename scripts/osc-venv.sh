# Sourced by the client smoke scripts: $VENV (default /tmp/berth-osc-venv)
# holds python-openstackclient, osc-placement and python-blazarclient from
# PyPI, made on first use.
VENV=${OSC_VENV:-/tmp/berth-osc-venv}
if [ ! -x "$VENV/bin/blazar" ] || [ ! -x "$VENV/bin/openstack" ]; then
  if [ ! -x "$VENV/bin/pip" ]; then
    if ! python3 -m venv "$VENV"; then
      # Debian splits venv out of python3.
      [ "$(id -u)" = 0 ] && apt-get install -y -q python3-venv >/dev/null
      python3 -m venv "$VENV"
    fi
  fi
  "$VENV/bin/pip" install -q python-openstackclient osc-placement python-blazarclient
fi
