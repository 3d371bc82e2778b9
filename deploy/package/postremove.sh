#!/bin/sh
# slurmscope-agent package: after removal. .deb: $1 = "remove", "purge",
# "upgrade", ...; .rpm: $1 = 0 on erase, 1 on upgrade. /var/lib/slurmscope
# (the spool, the remote-write queue, profiles written to files) is left in
# place, even on purge: it may hold profiles not yet sent.
set -e
[ -z "${DPKG_ROOT:-}" ] || exit 0
[ -d /run/systemd/system ] || exit 0
case "$1" in
remove | purge | 0) systemctl daemon-reload || true ;;
esac
exit 0
