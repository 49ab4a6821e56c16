#!/bin/sh
# Fills in a configuration template of this directory: every ${NAME} (upper
# case, digits, underscores) becomes the value of the environment variable
# NAME. A variable that is not set stops it, naming the template and the
# variable, and leaves no output file behind.
#
# Run: deploy/ha/render.sh TEMPLATE OUTPUT
#
# deploy/ha/local.sh and the containers of deploy/ha/docker-compose.yml both
# use it, so the two layouts run the same configuration text. The output is
# written with mode 600: it holds passwords.
set -eu
if [ "$#" -ne 2 ]; then
    echo "usage: render.sh TEMPLATE OUTPUT" >&2
    exit 2
fi
template=$1
output=$2
umask 077
# perl-base is part of every Debian system, the slim images included.
if ! perl -pe 's/\$\{([A-Z][A-Z0-9_]*)\}/defined $ENV{$1} ? $ENV{$1} : die "render.sh: $ARGV: \${$1} is not set\n"/ge' \
        "$template" >"$output.tmp"; then
    rm -f "$output.tmp"
    exit 1
fi
mv "$output.tmp" "$output"
