#!/bin/sh
# Container entrypoint of the Magnetar image (docker/Dockerfile); also runs outside Docker.
#
# Configuration comes from the environment, as in Pulsar's images:
#   * a variable named exactly like a conf/broker.toml key (`advertisedAddress=broker`, Pulsar's
#     apply-config-from-env convention) is exported as MAGNETAR_<key>, which `magnetar` reads;
#   * MAGNETAR_<key>=value is passed through as is and wins over the plain name.
# Precedence inside `magnetar`: defaults < --conf file < MAGNETAR_<key> < --set key=value.
#
# Then it execs its arguments, by default `magnetar standalone` (the command `make run` runs), so
# the broker is PID 1's successor and gets SIGTERM from `docker stop` directly.
set -eu

# The key names, from the defaults alone: a bad MAGNETAR_ variable must not hide the key list
# (the broker reports it, naming the variable, when it starts).
keys=$(env -i PATH="$PATH" magnetar config | sed -n 's/^\([A-Za-z][A-Za-z0-9]*\) = .*/\1/p')
if [ -z "$keys" ]; then
    echo "entrypoint: 'magnetar config' listed no configuration keys" >&2
    exit 1
fi

for key in $keys; do
    if value=$(printenv "$key") && ! printenv "MAGNETAR_$key" >/dev/null; then
        export "MAGNETAR_$key=$value"
    fi
done

# A container serves its published ports: bind every interface unless told otherwise (the
# broker's own default, for `make run`, is loopback).
if ! printenv MAGNETAR_bindAddress >/dev/null; then
    export MAGNETAR_bindAddress=0.0.0.0
fi

if [ "$#" -eq 0 ]; then
    set -- magnetar standalone
fi
exec "$@"
