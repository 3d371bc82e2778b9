#!/bin/sh
# slurmscope-agent package: before removal. .deb: $1 = "remove" (or
# "upgrade", when nothing is to stop); .rpm: $1 = 0 on erase, 1 on upgrade.
# On removal the agent is stopped and disabled, so that no unit is left
# pointing at a binary that is gone.
set -e
[ -z "${DPKG_ROOT:-}" ] || exit 0
[ -d /run/systemd/system ] || exit 0
case "$1" in
remove | 0) systemctl disable --now slurmscope-agent.service || true ;;
esac
exit 0
