#!/usr/bin/env bash
# IO-error test: runs the server BINARY on runnel-faultfs and makes the
# disk fail under it, one fault after another: fsyncs of the log fail
# (EIO), then its writes (ENOSPC, then EIO). The server must stop
# acknowledging appends (it answers 503/507 and /health says why), and after
# a power cut and a restart without the fault nothing it acknowledged is
# lost. Exit 0 only if so.
#
#   scripts/io-errors.sh BINARY [SERVE FLAGS...]
#
# FAULTFS_ARGS="--rounds 5" goes through the faults five times. Everything
# else as in scripts/power-loss.sh, which does the work.
exec env FAULTFS_MODE=io-errors "$(dirname "$0")/power-loss.sh" "$@"
