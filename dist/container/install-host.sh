#!/bin/busybox sh
# The DaemonSet's init container (dist/kubernetes/isold.yaml): the hook runs on the node (the
# runtime starts it), so the node gets the binary and the hook definition pointing at it.
# The node's directories are mounted under /host.
set -e
bb=/bin/busybox
$bb mkdir -p /host/usr/local/bin /host/usr/share/containers/oci/hooks.d
$bb cp /usr/bin/isold /host/usr/local/bin/.isold.new
$bb mv /host/usr/local/bin/.isold.new /host/usr/local/bin/isold
$bb sed 's|"path": "/usr/bin/isold"|"path": "/usr/local/bin/isold"|' \
    /usr/share/isold/isold.json >/host/usr/share/containers/oci/hooks.d/.isold.json.new
$bb mv /host/usr/share/containers/oci/hooks.d/.isold.json.new \
    /host/usr/share/containers/oci/hooks.d/isold.json
