#!/bin/sh
# slurmscope-agent package: after install or upgrade. The same script serves
# the .deb ($1 = "configure", $2 = the version replaced, empty on a first
# install) and the .rpm ($1 = 1 on install, 2 on upgrade).
#
# A first install leaves the agent stopped: it runs once the admin has set
# /etc/slurmscope/agent.env and enabled the unit. An upgrade restarts an agent
# that was running, so the new binary takes over.
set -e
# Not the running system (dpkg --root, an image being built): no systemd to
# tell.
[ -z "${DPKG_ROOT:-}" ] || exit 0
[ -d /run/systemd/system ] || exit 0
systemctl daemon-reload || true
case "$1" in
configure) [ -z "${2:-}" ] || systemctl try-restart slurmscope-agent.service || true ;;
[2-9]*) systemctl try-restart slurmscope-agent.service || true ;;
esac
exit 0
